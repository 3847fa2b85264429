// The scheduler and KV manager with draft tokens, driven by a fake verifying runner over a fake
// KV cache (no model). The fake model's next token is a hash of the whole context, read back
// position by position through the block table from the slots the plans wrote; so a rejected
// draft counted as computed, a lookahead slot given back too early or too late, a wrong slot
// mapping, or a prefix-cache block naming tokens it does not hold changes the tokens. Every run
// must give each sequence exactly the tokens of the plain greedy loop, with random drafts (random
// accept counts), random aborts between schedule and update, preemption and prefix-cache hits,
// and exact block accounting after every step. The same runs overlapped (asynchronous
// scheduling): each plan is made while the previous one is launched but not yet applied, its
// decodes' inputs are deferred tokens resolved from the previous step's samples, and the tokens
// must still be the plain loop's.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <unordered_map>

#include "tachyon/engine/scheduler.h"

namespace tachyon::engine {
namespace {

constexpr int32_t kVocab = 61;
constexpr int32_t kEos = 5;

int32_t next_token(std::span<const int32_t> context) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t t : context) h = (h ^ static_cast<uint64_t>(t + 1)) * 0x100000001b3ull;
  h ^= h >> 29;
  return static_cast<int32_t>(h % kVocab);
}

// The plain greedy loop with the scheduler's stop rules (EOS after min_tokens, max_tokens,
// max_model_len): what every run must produce.
std::vector<int32_t> reference_output(std::vector<int32_t> tokens, const core::SamplingParams& p, int64_t max_model_len) {
  std::vector<int32_t> out;
  for (;;) {
    const int32_t t = next_token(tokens);
    tokens.push_back(t);
    out.push_back(t);
    const bool may_stop = static_cast<int32_t>(out.size()) >= p.min_tokens;
    if (may_stop && t == kEos) break;
    if (static_cast<int32_t>(out.size()) >= p.max_tokens || static_cast<int64_t>(tokens.size()) >= max_model_len) break;
  }
  return out;
}

// A runner that keeps (position, token) per KV slot and verifies drafts the way the real one
// does: row i is the next token after the first i drafts; a draft is accepted iff it equals it.
class FakeVerifyingRunner {
 public:
  explicit FakeVerifyingRunner(int64_t num_slots) : slots_(static_cast<size_t>(num_slots), {-1, -1}) {}

  core::StepOutput run(const core::StepPlan& plan) {
    for (const core::ScheduledSequence& s : plan.sequences) {
      for (int64_t i = 0; i < s.num_tokens; ++i) {
        const size_t t = static_cast<size_t>(s.first_token + i);
        const int64_t position = plan.positions[t];
        EXPECT_EQ(position, s.num_computed + i);
        EXPECT_EQ(plan.slot_mapping[t], slot_of(s, plan.block_size, position));
        slots_.at(static_cast<size_t>(plan.slot_mapping[t])) = {position, plan.token_ids[t]};
      }
    }
    core::StepOutput out;
    size_t row = 0;
    for (const core::ScheduledSequence& s : plan.sequences) {
      if (!s.sample) continue;
      const int64_t k = s.num_draft_tokens();
      for (int64_t i = 0; i < k; ++i) {
        EXPECT_EQ(plan.token_ids[static_cast<size_t>(s.first_token + s.num_tokens - k + i)], s.draft_tokens[static_cast<size_t>(i)]);
      }
      core::SequenceOutput seq{s.sequence_id, {}, k};
      for (int64_t i = 0; i <= k; ++i) {
        const int64_t position = s.num_computed + s.num_tokens - 1 - k + i;  // the row's token
        EXPECT_EQ(plan.logits_rows[row++], s.first_token + (position - s.num_computed));
        core::SampledToken token;
        token.token = next_token(read_context(s, plan.block_size, position));
        seq.tokens.push_back(token);
        if (i == k || token.token != s.draft_tokens[static_cast<size_t>(i)]) {
          row += static_cast<size_t>(k - i);  // the rows of drafts after the first rejected one
          break;
        }
      }
      accepted_ += seq.num_accepted();
      rejected_ += k - seq.num_accepted();
      out.sequences.push_back(std::move(seq));
    }
    EXPECT_EQ(row, plan.logits_rows.size());
    return out;
  }

  int64_t accepted() const { return accepted_; }
  int64_t rejected() const { return rejected_; }

 private:
  static int64_t slot_of(const core::ScheduledSequence& s, int32_t block_size, int64_t position) {
    return static_cast<int64_t>(s.block_table.at(static_cast<size_t>(position / block_size))) * block_size +
           position % block_size;
  }
  // Tokens 0..position as the cache holds them; a slot last written for another position is a
  // bug the test reports (the hash of a wrong context would also give other tokens).
  std::vector<int32_t> read_context(const core::ScheduledSequence& s, int32_t block_size, int64_t position) {
    std::vector<int32_t> context;
    for (int64_t q = 0; q <= position; ++q) {
      const auto& [written_at, token] = slots_.at(static_cast<size_t>(slot_of(s, block_size, q)));
      EXPECT_EQ(written_at, q) << "sequence " << s.sequence_id << " reads position " << q << " from a slot holding "
                               << written_at;
      context.push_back(token);
    }
    return context;
  }

  std::vector<std::pair<int64_t, int32_t>> slots_;
  int64_t accepted_ = 0, rejected_ = 0;
};

struct RunCounts {
  int64_t accepted = 0, rejected = 0, preemptions = 0, prefix_hit_tokens = 0, aborted = 0, draft_steps = 0;
  int64_t deferred = 0, held_back = 0;
};

// One randomized run; `draft_quality` is the chance that a draft is the true next token.
// `overlapped`: plan step n+1 before applying step n (no drafts then, as the engine requires).
RunCounts run_trial(uint32_t seed, bool drafts, double draft_quality, bool overlapped = false) {
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  core::SchedulerConfig config;
  config.max_num_batched_tokens = uniform(6, 40);
  config.max_num_seqs = uniform(2, 8);
  config.max_model_len = 48;
  config.eos_token_id = kEos;
  const int32_t block_size = std::vector<int32_t>{1, 2, 4, 8}[static_cast<size_t>(uniform(0, 3))];
  const int32_t num_blocks = (config.max_model_len + block_size - 1) / block_size * uniform(1, 3);
  KvCacheManager kv(num_blocks, block_size, true);
  Scheduler scheduler(config, kv);
  FakeVerifyingRunner runner(static_cast<int64_t>(num_blocks) * block_size);

  // Prompts share a few prefixes so the prefix cache has something to find.
  std::vector<std::vector<int32_t>> prefixes(3);
  for (auto& p : prefixes) {
    p.resize(static_cast<size_t>(uniform(0, 12)));
    for (auto& t : p) t = uniform(0, kVocab - 1);
  }
  std::vector<std::unique_ptr<Sequence>> sequences;
  std::vector<std::vector<int32_t>> expected;
  std::vector<bool> aborted;
  const int num_sequences = 24;
  RunCounts counts;
  int added = 0;
  std::vector<int32_t> last_sampled;          // the last launched step's samples, plan order
  core::StepPlan in_flight_plan;              // overlapped: launched, not yet applied
  core::StepOutput in_flight_output;
  bool in_flight = false;
  for (int step = 0; step < 5000; ++step) {
    if (added < num_sequences && uniform(0, 2) == 0) {
      auto s = std::make_unique<Sequence>();
      s->id = added;
      s->arrival = added;
      core::SamplingParams p;
      p.temperature = 0.0f;
      p.max_tokens = uniform(1, 30);
      p.min_tokens = uniform(0, 3);
      // A penalty on outputs (the fake model ignores it) holds a sequence back while overlapped.
      if (uniform(0, 4) == 0) p.frequency_penalty = 0.5f;
      s->params = std::make_shared<const core::SamplingParams>(p);
      s->tokens = prefixes[static_cast<size_t>(uniform(0, 2))];
      for (int i = uniform(1, 10); i > 0; --i) s->tokens.push_back(uniform(0, kVocab - 1));
      s->num_prompt_tokens = static_cast<int64_t>(s->tokens.size());
      expected.push_back(reference_output(s->tokens, p, config.max_model_len));
      aborted.push_back(false);
      scheduler.add(s.get());
      sequences.push_back(std::move(s));
      ++added;
    }
    if (added == num_sequences && !scheduler.has_work() && !in_flight) break;
    // Drafts: the true continuation, each token replaced by a random one with 1 - quality.
    for (Sequence* s : scheduler.running()) {
      if (!drafts || s->num_tokens() - s->num_computed_tokens != 1) continue;
      std::vector<int32_t> context = s->tokens;
      s->draft_tokens.clear();
      for (int i = uniform(0, 5); i > 0; --i) {
        int32_t t = next_token(context);
        if (std::uniform_real_distribution<double>(0, 1)(rng) > draft_quality) t = uniform(0, kVocab - 1);
        s->draft_tokens.push_back(t);
        context.push_back(t);
      }
    }
    if (overlapped) {  // sequences the next plan must leave out until their token is known
      for (const Sequence* s : scheduler.running()) {
        counts.held_back += s->num_pending_outputs > 0 && s->params->penalizes_outputs();
      }
    }
    core::StepPlan plan = scheduler.schedule();
    counts.preemptions += static_cast<int64_t>(plan.preempted.size());
    counts.draft_steps += plan.has_drafts();
    // The runner resolves deferred tokens from the previous launched step's samples, as the
    // real ones do (this fake computes at launch, which is the device's launch order).
    if (!overlapped) {
      EXPECT_TRUE(plan.deferred_tokens.empty());
    }
    core::StepPlan launched = plan;
    for (const core::DeferredToken& d : plan.deferred_tokens) {
      EXPECT_LT(d.sampled_index, static_cast<int64_t>(last_sampled.size()));
      if (d.sampled_index >= static_cast<int64_t>(last_sampled.size())) return counts;
      launched.token_ids[static_cast<size_t>(d.token_index)] = last_sampled[static_cast<size_t>(d.sampled_index)];
    }
    counts.deferred += static_cast<int64_t>(plan.deferred_tokens.size());
    core::StepOutput output = runner.run(launched);
    last_sampled.clear();
    for (const core::SequenceOutput& o : output.sequences) last_sampled.push_back(o.tokens.back().token);
    // An abort between schedule and update (a client that went away mid-step).
    if (!scheduler.running().empty() && uniform(0, 40) == 0) {
      Sequence* victim = scheduler.running()[static_cast<size_t>(uniform(0, static_cast<int>(scheduler.running().size()) - 1))];
      aborted[static_cast<size_t>(victim->id)] = true;
      scheduler.abort(victim);
      ++counts.aborted;
    }
    if (overlapped) {
      // Apply the previous step now; this one stays in flight.
      std::swap(plan, in_flight_plan);
      std::swap(output, in_flight_output);
      const bool had = in_flight;
      in_flight = !in_flight_plan.empty();
      if (!had) continue;
    }
    scheduler.update(plan, output);
    for (const core::SequenceOutput& o : output.sequences) {
      const Sequence& s = *sequences[static_cast<size_t>(o.sequence_id)];
      if (aborted[static_cast<size_t>(o.sequence_id)]) continue;
      // What update kept is exactly the tail of the sequence's tokens.
      EXPECT_TRUE(std::equal(o.tokens.rbegin(), o.tokens.rend(), s.tokens.rbegin(),
                             [](const core::SampledToken& a, int32_t b) { return a.token == b; }));
    }
    std::vector<const std::vector<int32_t>*> tables;
    for (const auto& s : sequences) {
      if (!s->finished()) tables.push_back(&s->block_table);
      if (!s->finished() && s->status == SequenceStatus::kRunning) {
        // A running sequence holds exactly the blocks its computed and in-flight tokens need: no
        // lookahead left over.
        EXPECT_EQ(static_cast<int64_t>(s->block_table.size()),
                  (s->num_scheduled_tokens() + block_size - 1) / block_size)
            << "sequence " << s->id << " with " << s->num_computed_tokens << " computed tokens and "
            << s->num_inflight_tokens << " in flight";
      }
    }
    EXPECT_NO_THROW(kv.check_invariants(tables)) << "seed " << seed << " step " << step;
    if (::testing::Test::HasFailure()) return counts;
  }
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Sequence& s = *sequences[i];
    EXPECT_TRUE(s.finished()) << "seed " << seed << " sequence " << i << " never finished";
    std::vector<int32_t> out(s.tokens.begin() + s.num_prompt_tokens, s.tokens.end());
    if (aborted[i]) {
      EXPECT_TRUE(out.size() <= expected[i].size() && std::equal(out.begin(), out.end(), expected[i].begin()))
          << "seed " << seed << " aborted sequence " << i << " is not a prefix of its plain output";
    } else {
      EXPECT_EQ(out, expected[i]) << "seed " << seed << " sequence " << i << (drafts ? " with" : " without") << " drafts";
    }
  }
  counts.accepted = runner.accepted();
  counts.rejected = runner.rejected();
  counts.prefix_hit_tokens = kv.stats().prefix_hit_tokens;
  return counts;
}

TEST(SchedulerDrafts, PlainRunsGiveTheGreedyLoopsTokens) {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    run_trial(seed, false, 0.0);
    if (HasFailure()) return;
  }
}

TEST(SchedulerDrafts, RunsWithDraftsGiveThePlainTokensWhateverIsAccepted) {
  RunCounts total;
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    for (double quality : {0.0, 0.5, 0.9, 1.0}) {
      const RunCounts c = run_trial(seed, true, quality);
      if (HasFailure()) {
        ADD_FAILURE() << "seed " << seed << " draft quality " << quality;
        return;
      }
      total.accepted += c.accepted, total.rejected += c.rejected, total.preemptions += c.preemptions;
      total.prefix_hit_tokens += c.prefix_hit_tokens, total.aborted += c.aborted, total.draft_steps += c.draft_steps;
    }
  }
  // The runs exercised what they claim to.
  EXPECT_GT(total.accepted, 1000);
  EXPECT_GT(total.rejected, 1000);
  EXPECT_GT(total.preemptions, 10);
  EXPECT_GT(total.prefix_hit_tokens, 100);
  EXPECT_GT(total.aborted, 10);
  EXPECT_GT(total.draft_steps, 1000);
}

TEST(SchedulerAsync, OverlappedRunsGiveTheGreedyLoopsTokens) {
  RunCounts total;
  for (uint32_t seed = 1; seed <= 120; ++seed) {
    const RunCounts c = run_trial(seed, false, 0.0, true);
    if (HasFailure()) {
      ADD_FAILURE() << "seed " << seed;
      return;
    }
    total.preemptions += c.preemptions, total.prefix_hit_tokens += c.prefix_hit_tokens, total.aborted += c.aborted;
    total.deferred += c.deferred, total.held_back += c.held_back;
  }
  // The runs exercised what they claim to.
  EXPECT_GT(total.deferred, 1000);
  EXPECT_GT(total.preemptions, 10);
  EXPECT_GT(total.prefix_hit_tokens, 100);
  EXPECT_GT(total.aborted, 10);
  EXPECT_GT(total.held_back, 50);
}

// Drafts ride only with a decode, fit max_tokens and max_model_len, and are cleared once planned.
TEST(SchedulerDrafts, DraftsAreClippedToWhatAFullAcceptanceCouldUse) {
  core::SchedulerConfig config;
  config.max_num_batched_tokens = 64;
  config.max_model_len = 12;
  KvCacheManager kv(16, 4, true);
  Scheduler scheduler(config, kv);
  Sequence s;
  s.id = 0;
  core::SamplingParams p;
  p.max_tokens = 3;
  s.params = std::make_shared<const core::SamplingParams>(p);
  s.tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  s.num_prompt_tokens = 8;
  scheduler.add(&s);
  s.draft_tokens = {9, 9, 9};  // a prefill step carries none
  core::StepPlan prefill = scheduler.schedule();
  ASSERT_EQ(prefill.sequences.size(), 1u);
  EXPECT_TRUE(prefill.sequences[0].draft_tokens.empty());
  std::vector<int32_t> first = {10};
  scheduler.update(prefill, first);
  s.draft_tokens = {11, 12, 13, 14};  // max_tokens 3 with one output: at most 1 draft
  core::StepPlan decode = scheduler.schedule();
  ASSERT_EQ(decode.sequences.size(), 1u);
  EXPECT_EQ(decode.sequences[0].draft_tokens, std::vector<int32_t>({11}));
  EXPECT_EQ(decode.sequences[0].num_tokens, 2);
  EXPECT_EQ(decode.logits_rows.size(), 2u);
  EXPECT_TRUE(s.draft_tokens.empty());
}

}  // namespace
}  // namespace tachyon::engine
