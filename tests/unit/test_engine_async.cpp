// Asynchronous scheduling on the tiny model and the CPU runner: the engine plans and launches
// step n+1 before it applies step n (two steps in flight, step n+1's decode inputs deferred to
// the runner), and must give token for token, logprob for logprob, what the synchronous loop
// gives (logprobs to rounding): greedy and seeded sampling, penalties (those sequences wait for their token), min_tokens,
// stop ids, EOS, n > 1 siblings, chunked prefills, prefix-cache hits, preemption in a cache too
// small for the batch, and aborts. A counting runner in front of the CPU runner proves the
// overlap happened (two steps in flight, deferred tokens resolved). The fair scheduling policy
// gives the FCFS tokens in both loops.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>

#include "../tiny_model_suite.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/runner/cpu_model_runner.h"

namespace tachyon::engine {
namespace {

struct Request {
  std::vector<int32_t> prompt;
  core::SamplingParams params;
};

struct Completion {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string finish_reason;
};

// Forwards to the CPU runner, reporting overlap (and so switching asynchronous scheduling on
// under `auto`), and counts what the engine did with it.
class CountingRunner : public runner::ModelRunner {
 public:
  explicit CountingRunner(std::unique_ptr<runner::ModelRunner> inner, bool overlaps)
      : inner_(std::move(inner)), overlaps_(overlaps) {}
  void launch(const core::StepPlan& plan) override {
    ++in_flight_;
    max_in_flight = std::max(max_in_flight, in_flight_);
    deferred_tokens += static_cast<int64_t>(plan.deferred_tokens.size());
    inner_->launch(plan);
  }
  core::StepOutput wait() override {
    --in_flight_;
    return inner_->wait();
  }
  bool overlaps_steps() const override { return overlaps_; }
  int64_t vocab_size() const override { return inner_->vocab_size(); }

  int max_in_flight = 0;
  int64_t deferred_tokens = 0;

 private:
  std::unique_ptr<runner::ModelRunner> inner_;
  bool overlaps_;
  int in_flight_ = 0;
};

struct RunResult {
  std::vector<std::vector<Completion>> completions;  // [request][index]
  EngineStats stats;
  int max_in_flight = 0;
  int64_t deferred_tokens = 0;
  bool async = false;
};

class EngineAsyncTest : public testing::TinyModelSuite<5> {
 protected:
  // `abort_after`: request index -> abort it once it has delivered that many tokens.
  static RunResult run(const std::vector<Request>& requests, core::AsyncScheduling mode, int32_t num_blocks,
                       const std::map<size_t, size_t>& abort_after = {},
                       core::SchedulingPolicy policy = core::SchedulingPolicy::kFcfs) {
    core::EngineConfig c;
    c.scheduler.policy = policy;
    c.scheduler.max_num_batched_tokens = 20;  // long prompts are chunked
    c.scheduler.max_num_seqs = 8;
    c.scheduler.max_model_len = 96;
    c.scheduler.eos_token_id = 3;
    c.num_blocks = num_blocks;
    c.block_size = 4;
    c.device.async_scheduling = mode;
    auto counting = std::make_unique<CountingRunner>(
        std::make_unique<runner::CpuModelRunner>(*model_, c.num_blocks, c.block_size), true);
    CountingRunner* counter = counting.get();
    EngineCore engine(c, std::move(counting));
    std::vector<std::shared_ptr<OutputChannel>> channels;
    std::vector<int64_t> ids;
    for (const Request& r : requests) {
      channels.push_back(std::make_shared<OutputChannel>());
      ids.push_back(engine.submit(r.prompt, r.params, channels.back()));
    }
    RunResult result;
    result.completions.resize(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) result.completions[i].resize(static_cast<size_t>(requests[i].params.n));
    std::vector<size_t> delivered(requests.size(), 0);
    std::vector<bool> aborted(requests.size(), false);
    for (int guard = 0; engine.has_work() && guard < 100000; ++guard) {
      engine.step();
      for (size_t i = 0; i < requests.size(); ++i) {
        while (auto delta = channels[i]->take(std::chrono::milliseconds(0))) {
          for (const auto& d : delta->completions) {
            Completion& completion = result.completions[i][static_cast<size_t>(d.index)];
            completion.tokens.insert(completion.tokens.end(), d.token_ids.begin(), d.token_ids.end());
            for (const auto& l : d.logprobs) completion.logprobs.push_back(l.logprob);
            if (d.finish_reason != FinishReason::kNone) completion.finish_reason = finish_reason_name(d.finish_reason);
            delivered[i] += d.token_ids.size();
          }
        }
        auto abort = abort_after.find(i);
        if (abort != abort_after.end() && delivered[i] >= abort->second && !aborted[i]) {
          engine.abort(ids[i]);
          aborted[i] = true;
        }
      }
    }
    EXPECT_FALSE(engine.has_work()) << "the engine did not drain";
    result.stats = engine.stats();
    result.max_in_flight = counter->max_in_flight;
    result.deferred_tokens = counter->deferred_tokens;
    result.async = engine.async_scheduling();
    return result;
  }

  static std::vector<Request> requests(uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> shared_prefix(12);
    for (auto& t : shared_prefix) t = static_cast<int32_t>(rng() % 512);
    std::vector<Request> out;
    for (int i = 0; i < 12; ++i) {
      Request r;
      if (i % 3 == 0) r.prompt = shared_prefix;  // prefix-cache hits
      for (size_t n = 1 + rng() % 40; n > 0; --n) r.prompt.push_back(static_cast<int32_t>(rng() % 512));
      r.params.max_tokens = static_cast<int32_t>(3 + rng() % 30);
      switch (i % 6) {
        case 0: r.params.temperature = 0.0f; break;  // greedy
        case 1:                                       // seeded, filtered, with stop ids
          r.params.temperature = 0.9f, r.params.top_k = 20, r.params.top_p = 0.9f, r.params.seed = rng();
          r.params.stop_token_ids = {static_cast<int32_t>(rng() % 512), static_cast<int32_t>(rng() % 512)};
          break;
        case 2:  // every penalty and min_tokens: planned only once its last token is known
          r.params.temperature = 1.1f, r.params.seed = rng(), r.params.repetition_penalty = 1.3f;
          r.params.frequency_penalty = 0.4f, r.params.presence_penalty = 0.3f, r.params.min_tokens = 3;
          break;
        case 3:  // n > 1 siblings from one prompt, with logprobs
          r.params.temperature = 0.7f, r.params.seed = rng(), r.params.n = 2, r.params.logprobs = 2;
          break;
        case 4:  // repetition penalty alone reads the prompt, not the outputs: planned ahead
          r.params.temperature = 0.0f, r.params.repetition_penalty = 1.2f, r.params.logprobs = 0;
          break;
        case 5:  // greedy to EOS-free length, min_tokens past EOS
          r.params.temperature = 0.0f, r.params.ignore_eos = true, r.params.min_tokens = 2;
          break;
      }
      out.push_back(r);
    }
    return out;
  }

  static void expect_same(const RunResult& a, const RunResult& b, const std::string& what, size_t skip = SIZE_MAX) {
    ASSERT_EQ(a.completions.size(), b.completions.size());
    for (size_t r = 0; r < a.completions.size(); ++r) {
      if (r == skip) continue;
      for (size_t c = 0; c < a.completions[r].size(); ++c) {
        const Completion& x = a.completions[r][c];
        const Completion& y = b.completions[r][c];
        EXPECT_EQ(x.tokens, y.tokens) << what << " request " << r << " completion " << c;
        // The CPU product gives a row the same bits in any batch (kernels/cpu/fixed_order_gemm.h),
        // so the logprobs agree bit for bit today; the tolerance dates from a BLAS whose sums
        // depended on the batch's shape. The tokens must not move.
        ASSERT_EQ(x.logprobs.size(), y.logprobs.size()) << what << " request " << r << " completion " << c;
        for (size_t t = 0; t < x.logprobs.size(); ++t) {
          EXPECT_NEAR(x.logprobs[t], y.logprobs[t], 1e-4) << what << " request " << r << " completion " << c;
        }
        EXPECT_EQ(x.finish_reason, y.finish_reason) << what << " request " << r << " completion " << c;
      }
    }
  }

};

TEST_F(EngineAsyncTest, OverlappedStepsGiveTheSynchronousTokens) {
  int64_t deferred = 0, preemptions = 0, prefix_hits = 0;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    const std::vector<Request> reqs = requests(seed);
    for (int32_t num_blocks : {200, 40}) {  // 40 blocks of 4: the batch does not fit, preemption
      const RunResult sync = run(reqs, core::AsyncScheduling::kOff, num_blocks);
      const RunResult async = run(reqs, core::AsyncScheduling::kOn, num_blocks);
      ASSERT_FALSE(sync.async);
      ASSERT_TRUE(async.async);
      EXPECT_EQ(sync.max_in_flight, 1);
      EXPECT_EQ(async.max_in_flight, 2) << "the next step is launched before the last one is applied";
      expect_same(sync, async, "seed " + std::to_string(seed) + " blocks " + std::to_string(num_blocks));
      // Steps planned for sequences that finished meanwhile deliver nothing and count nothing.
      EXPECT_EQ(async.stats.generated_tokens, sync.stats.generated_tokens);
      EXPECT_EQ(async.stats.kv_blocks_free, async.stats.kv_blocks_total) << "every block came back";
      deferred += async.deferred_tokens;
      preemptions += async.stats.preemptions;
      prefix_hits += async.stats.kv.prefix_hit_tokens;
      if (HasFailure()) return;
    }
  }
  // The runs exercised what they claim to.
  EXPECT_GT(deferred, 500);
  EXPECT_GT(preemptions, 5);
  EXPECT_GT(prefix_hits, 50);
}

// The fair policy changes which sequences share a step and which are preempted, never a
// sequence's tokens: the FCFS run's, in both loops, with clients of several requests and
// requests of their own, in a cache too small for the batch (fairness preemptions included).
TEST_F(EngineAsyncTest, FairSchedulingGivesTheFcfsTokens) {
  int64_t preemptions = 0;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    std::vector<Request> reqs = requests(seed);
    for (size_t i = 0; i < reqs.size(); ++i) reqs[i].params.client = i % 4 == 0 ? 0 : 1 + i % 3;
    for (int32_t num_blocks : {200, 40}) {
      const RunResult fcfs = run(reqs, core::AsyncScheduling::kOff, num_blocks);
      for (core::AsyncScheduling mode : {core::AsyncScheduling::kOff, core::AsyncScheduling::kOn}) {
        const RunResult fair = run(reqs, mode, num_blocks, {}, core::SchedulingPolicy::kFair);
        expect_same(fcfs, fair, "seed " + std::to_string(seed) + " blocks " + std::to_string(num_blocks));
        EXPECT_EQ(fair.stats.kv_blocks_free, fair.stats.kv_blocks_total) << "every block came back";
        preemptions += fair.stats.preemptions;
        if (HasFailure()) return;
      }
    }
  }
  EXPECT_GT(preemptions, 5);
}

// A request aborted mid-run (its completions end early, a prefix of the plain ones) changes
// nothing for the others, and its blocks come back even with a step of it still in flight.
TEST_F(EngineAsyncTest, AbortsInFlightLeaveTheOthersUnchanged) {
  const std::vector<Request> reqs = requests(21);
  const RunResult plain = run(reqs, core::AsyncScheduling::kOff, 200);
  for (size_t victim : {0, 3, 7}) {
    for (size_t after : {1, 3}) {
      const RunResult async = run(reqs, core::AsyncScheduling::kOn, 200, {{victim, after}});
      expect_same(plain, async, "victim " + std::to_string(victim), victim);
      for (size_t c = 0; c < plain.completions[victim].size(); ++c) {
        const auto& cut = async.completions[victim][c].tokens;
        const auto& whole = plain.completions[victim][c].tokens;
        EXPECT_TRUE(cut.size() <= whole.size() && std::equal(cut.begin(), cut.end(), whole.begin()))
            << "victim " << victim << " completion " << c << " is not a prefix of its plain output";
      }
      EXPECT_EQ(async.stats.kv_blocks_free, async.stats.kv_blocks_total);
    }
  }
}

// auto: on where the runner overlaps its steps, off where it does not; a drafter turns auto off
// and is refused under on.
TEST_F(EngineAsyncTest, AutoFollowsTheRunnerAndDraftersNeedTheSynchronousLoop) {
  struct AnyDrafter : Drafter {
    std::vector<int32_t> propose(int64_t, std::span<const int32_t>) override { return {1}; }
  };
  core::EngineConfig c;
  c.num_blocks = 64;
  c.block_size = 4;
  c.scheduler.max_model_len = 64;
  auto make = [&](core::AsyncScheduling mode, bool overlaps) {
    c.device.async_scheduling = mode;
    return std::make_unique<EngineCore>(
        c, std::make_unique<CountingRunner>(std::make_unique<runner::CpuModelRunner>(*model_, 64, 4), overlaps));
  };
  EXPECT_TRUE(make(core::AsyncScheduling::kAuto, true)->async_scheduling());
  EXPECT_FALSE(make(core::AsyncScheduling::kAuto, false)->async_scheduling());
  EXPECT_FALSE(make(core::AsyncScheduling::kOff, true)->async_scheduling());
  EXPECT_TRUE(make(core::AsyncScheduling::kOn, false)->async_scheduling());
  // CountingRunner does not verify drafts; the CPU runner itself does.
  c.device.async_scheduling = core::AsyncScheduling::kAuto;
  EngineCore automatic(c, std::make_unique<runner::CpuModelRunner>(*model_, 64, 4));
  automatic.set_drafter(std::make_unique<AnyDrafter>());
  EXPECT_FALSE(automatic.async_scheduling());
  c.device.async_scheduling = core::AsyncScheduling::kOn;
  EngineCore forced(c, std::make_unique<runner::CpuModelRunner>(*model_, 64, 4));
  EXPECT_THROW(forced.set_drafter(std::make_unique<AnyDrafter>()), Error);
}

}  // namespace
}  // namespace tachyon::engine
