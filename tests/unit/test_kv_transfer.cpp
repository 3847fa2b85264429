// Prefill/decode disaggregation at the engine level (engine/kv_transfer.h, runner/kv_export.h):
// a prefill engine runs each prompt and leases its KV, the rows are exported and imported into a
// decode engine with another block size, and every output is token-for-token the one a single
// engine gives (greedy and seeded sampling, prompts of 1 to 70 tokens, stops and lengths);
// leases expire, refuse other epochs and are taken once; every block returns to free on both sides.
#include <gtest/gtest.h>
#include <unistd.h>

#include <random>
#include <thread>

#include "../engine_run.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/model/make_model.h"
#include "tachyon/runner/cpu_model_runner.h"

namespace tachyon::engine {
namespace {

class KvTransferTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("tachyon-kv-transfer-" + std::to_string(::getpid())));
    model::make_model({.arch = "qwen3", .preset = "tiny", .seed = 5, .out_dir = *dir_});
    model_ = new model::DenseModel(model::DenseModel::load(*dir_));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete model_;
    delete dir_;
  }
  static std::unique_ptr<EngineCore> engine(int32_t block_size, int32_t num_blocks = 256, int32_t eos = 7,
                                            int64_t max_num_seqs = 256) {
    core::EngineConfig c;
    c.scheduler.max_num_seqs = max_num_seqs;
    c.scheduler.max_num_batched_tokens = 256;
    c.scheduler.max_model_len = 256;
    if (eos >= 0) c.scheduler.eos_token_id = eos;
    c.num_blocks = num_blocks;
    c.block_size = block_size;
    return std::make_unique<EngineCore>(c, std::make_unique<runner::CpuModelRunner>(*model_, num_blocks, block_size));
  }

  static std::filesystem::path* dir_;
  static model::DenseModel* model_;
};
std::filesystem::path* KvTransferTest::dir_ = nullptr;
model::DenseModel* KvTransferTest::model_ = nullptr;

struct Case {
  std::vector<int32_t> prompt;
  core::SamplingParams params;
};

std::vector<Case> mixed_cases(int count) {
  std::mt19937 rng(1234);
  std::vector<Case> cases;
  for (int i = 0; i < count; ++i) {
    Case c;
    const int length = 1 + static_cast<int>(rng() % 70);
    for (int t = 0; t < length; ++t) c.prompt.push_back(static_cast<int32_t>(rng() % 512));
    c.params.max_tokens = 1 + static_cast<int32_t>(rng() % 14);
    if (i % 2 == 0) {
      c.params.temperature = 0.0f;
    } else {
      c.params.temperature = 0.9f;
      c.params.top_p = 0.95f;
      c.params.seed = 1000 + static_cast<uint64_t>(i);
    }
    if (i % 5 == 0) c.params.repetition_penalty = 1.2f;  // reads the prompt and the imported first token
    if (i % 7 == 0) c.params.min_tokens = std::min(2, c.params.max_tokens);
    cases.push_back(std::move(c));
  }
  return cases;
}

struct Finished {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
};

Finished drain(OutputChannel& channel) {
  Finished f;
  while (auto out = channel.take(std::chrono::milliseconds(0))) {
    for (const CompletionDelta& d : out->completions) {
      f.tokens.insert(f.tokens.end(), d.token_ids.begin(), d.token_ids.end());
      if (d.finish_reason != FinishReason::kNone) f.reason = d.finish_reason;
    }
  }
  return f;
}

void run_idle(EngineCore& e) {
  for (int guard = 0; e.has_work() && guard < 100000; ++guard) e.step();
  e.step();  // releases what was given back meanwhile and publishes the stats
}

std::vector<Finished> run_plain(EngineCore& e, const std::vector<Case>& cases) {
  std::vector<std::shared_ptr<OutputChannel>> channels;
  for (const Case& c : cases) {
    channels.push_back(std::make_shared<OutputChannel>());
    e.submit(c.prompt, c.params, channels.back());
  }
  run_idle(e);
  std::vector<Finished> out;
  for (auto& channel : channels) out.push_back(drain(*channel));
  return out;
}

// Prefill all, export all, import all, decode all (batched on both sides).
std::vector<Finished> run_disaggregated(EngineCore& prefill, EngineCore& decode, const std::vector<Case>& cases) {
  std::vector<int64_t> ids;
  std::vector<std::shared_ptr<OutputChannel>> first;
  for (const Case& c : cases) {
    first.push_back(std::make_shared<OutputChannel>());
    ids.push_back(prefill.submit_prefill(c.prompt, c.params, first.back()));
  }
  run_idle(prefill);
  std::vector<std::shared_ptr<OutputChannel>> channels;
  for (size_t i = 0; i < cases.size(); ++i) {
    Finished f = drain(*first[i]);
    EXPECT_EQ(f.tokens.size(), 1u);
    KvPayload payload = prefill.export_kv({prefill.kv_epoch(), ids[i]});
    EXPECT_EQ(payload.prompt, cases[i].prompt);
    EXPECT_EQ(payload.first_token, f.tokens.at(0));
    channels.push_back(std::make_shared<OutputChannel>());
    decode.submit_imported(std::move(payload), cases[i].params, channels.back());
  }
  run_idle(prefill);
  run_idle(decode);
  std::vector<Finished> out;
  for (auto& channel : channels) out.push_back(drain(*channel));
  return out;
}

TEST_F(KvTransferTest, DisaggregatedOutputsEqualOneEngine) {
  const std::vector<Case> cases = mixed_cases(48);
  // The end token: one the model samples early for some prompt, so that stops are exercised.
  int32_t eos = -1;
  for (const Finished& f : run_plain(*engine(4, 256, -1), cases)) {
    if (eos < 0 && f.tokens.size() >= 3) eos = f.tokens[2];
  }
  auto plain = engine(4, 256, eos);
  const std::vector<Finished> expected = run_plain(*plain, cases);
  auto prefill = engine(4, 1024, eos);  // every prompt's lease at once (leased blocks are not reusable)
  auto decode = engine(8, 512, eos);    // another block size: rows, not blocks, move
  const std::vector<Finished> got = run_disaggregated(*prefill, *decode, cases);
  int stops = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(got[i].tokens, expected[i].tokens) << "case " << i << " (prompt of " << cases[i].prompt.size() << ")";
    EXPECT_EQ(got[i].reason, expected[i].reason) << "case " << i;
    stops += expected[i].reason == FinishReason::kStop;
  }
  EXPECT_GT(stops, 0) << "no case stopped on the end token; the stop path went untested";
  EXPECT_EQ(prefill->stats().kv_blocks_free, prefill->stats().kv_blocks_total);
  EXPECT_EQ(decode->stats().kv_blocks_free, decode->stats().kv_blocks_total);
  EXPECT_EQ(decode->stats().prompt_tokens_computed, 0) << "the decode engine recomputed prompts";
}

TEST_F(KvTransferTest, LeaseIsTakenOnceAndOnlyInItsEpoch) {
  auto prefill = engine(4);
  auto channel = std::make_shared<OutputChannel>();
  const int64_t id = prefill->submit_prefill({1, 2, 3, 4, 5, 6}, core::SamplingParams{}, channel);
  run_idle(prefill.operator*());
  EXPECT_LT(prefill->stats().kv_blocks_free, prefill->stats().kv_blocks_total) << "the lease holds the prompt's blocks";
  EXPECT_THROW(prefill->export_kv({prefill->kv_epoch() + 1, id}), KvTransferError);
  EXPECT_THROW(prefill->export_kv({prefill->kv_epoch(), id + 1}), KvTransferError);
  KvPayload payload = prefill->export_kv({prefill->kv_epoch(), id});
  EXPECT_EQ(payload.prompt.size(), 6u);
  EXPECT_THROW(prefill->export_kv({prefill->kv_epoch(), id}), KvTransferError);
  run_idle(*prefill);
  EXPECT_EQ(prefill->stats().kv_blocks_free, prefill->stats().kv_blocks_total);
}

TEST_F(KvTransferTest, ExpiredAndReleasedLeasesFreeTheirBlocks) {
  auto prefill = engine(4);
  prefill->set_kv_lease_timeout(std::chrono::milliseconds(1));
  auto channel = std::make_shared<OutputChannel>();
  const int64_t expiring = prefill->submit_prefill({9, 8, 7, 6, 5}, core::SamplingParams{}, channel);
  run_idle(*prefill);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  run_idle(*prefill);
  EXPECT_EQ(prefill->stats().kv_blocks_free, prefill->stats().kv_blocks_total);
  EXPECT_THROW(prefill->export_kv({prefill->kv_epoch(), expiring}), KvTransferError);

  prefill->set_kv_lease_timeout(std::chrono::seconds(30));
  const int64_t released = prefill->submit_prefill({9, 8, 7, 6, 5, 4, 3, 2, 1}, core::SamplingParams{}, channel);
  run_idle(*prefill);
  EXPECT_LT(prefill->stats().kv_blocks_free, prefill->stats().kv_blocks_total);
  prefill->release_kv({prefill->kv_epoch(), released});
  run_idle(*prefill);
  EXPECT_EQ(prefill->stats().kv_blocks_free, prefill->stats().kv_blocks_total);
}

TEST_F(KvTransferTest, RefusesRowsThatDoNotFitAndWhatIsNotVerified) {
  auto decode = engine(4);
  auto channel = std::make_shared<OutputChannel>();
  KvPayload payload;
  payload.prompt = {1, 2, 3};
  payload.first_token = 4;
  payload.values_per_token = 3;
  payload.rows.assign(9, 0.0f);
  EXPECT_THROW(decode->submit_imported(payload, core::SamplingParams{}, channel), KvTransferError);
  core::SamplingParams n2;
  n2.n = 2;
  EXPECT_THROW(decode->submit_prefill({1, 2, 3}, n2, channel), Error);
  core::SamplingParams logprobs;
  logprobs.logprobs = 1;
  EXPECT_THROW(decode->submit_prefill({1, 2, 3}, logprobs, channel), Error);
}

// A decode engine with no room for the prompt's rows now waits for room: still the same tokens.
TEST_F(KvTransferTest, NoRoomForImportedRowsWaitsForRoom) {
  std::vector<Case> cases = mixed_cases(6);
  for (Case& c : cases) c.prompt.resize(std::min<size_t>(c.prompt.size(), 40));
  auto plain = engine(4);
  const std::vector<Finished> expected = run_plain(*plain, cases);
  auto prefill = engine(4);
  auto decode = engine(4, 64);  // 256 tokens: not all six prompts' rows at once
  const std::vector<Finished> got = run_disaggregated(*prefill, *decode, cases);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(got[i].tokens, expected[i].tokens) << "case " << i;
  EXPECT_EQ(decode->stats().kv_blocks_free, decode->stats().kv_blocks_total);
}

// Imported requests take running slots like any other: with max_num_seqs 2, six imports run two
// at a time (the others wait with their rows, never recomputing their prompts).
TEST_F(KvTransferTest, ImportsCountAgainstMaxNumSeqs) {
  const std::vector<Case> cases = mixed_cases(6);
  const std::vector<Finished> expected = run_plain(*engine(4), cases);
  auto prefill = engine(4);
  auto decode = engine(8, 256, 7, /*max_num_seqs=*/2);
  std::vector<std::shared_ptr<OutputChannel>> channels;
  for (const Case& c : cases) {
    auto first = std::make_shared<OutputChannel>();
    const int64_t id = prefill->submit_prefill(c.prompt, c.params, first);
    run_idle(*prefill);
    channels.push_back(std::make_shared<OutputChannel>());
    decode->submit_imported(prefill->export_kv({prefill->kv_epoch(), id}), c.params, channels.back());
  }
  int64_t most_running = 0;
  for (int guard = 0; decode->has_work() && guard < 100000; ++guard) {
    decode->step();
    most_running = std::max(most_running, decode->stats().num_running);
    EXPECT_LE(decode->stats().num_running + decode->stats().num_waiting, 6);
  }
  run_idle(*decode);
  EXPECT_EQ(most_running, 2);
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(drain(*channels[i]).tokens, expected[i].tokens) << "case " << i;
  EXPECT_EQ(decode->stats().prompt_tokens_computed, 0) << "an import recomputed its prompt instead of waiting";
  EXPECT_EQ(decode->stats().kv_blocks_free, decode->stats().kv_blocks_total);
}

// Leased blocks (and those of prompts running for a lease) stop at the cap: the next prefill is
// refused until a lease is pulled, released or expires. A prompt larger than the cap still runs
// when nothing else is held.
TEST_F(KvTransferTest, LeasedBlocksAreCappedUntilPulledOrExpired) {
  auto prefill = engine(4);
  prefill->set_kv_lease_max_blocks(10);
  auto channel = std::make_shared<OutputChannel>();
  const std::vector<int32_t> twelve = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // 3 blocks
  const int64_t first = prefill->submit_prefill(twelve, core::SamplingParams{}, channel);
  prefill->submit_prefill(twelve, core::SamplingParams{}, channel);
  prefill->submit_prefill(twelve, core::SamplingParams{}, channel);
  EXPECT_THROW(prefill->submit_prefill(twelve, core::SamplingParams{}, channel), KvLeasesFullError)
      << "running prompts count against the cap";
  run_idle(*prefill);
  EXPECT_EQ(prefill->kv_lease_stats().outstanding, 3);
  EXPECT_THROW(prefill->submit_prefill(twelve, core::SamplingParams{}, channel), KvLeasesFullError);
  EXPECT_EQ(prefill->kv_lease_stats().refused, 2);
  prefill->export_kv({prefill->kv_epoch(), first});
  prefill->submit_prefill(twelve, core::SamplingParams{}, channel);
  run_idle(*prefill);

  auto expiring = engine(4);
  expiring->set_kv_lease_max_blocks(2);
  expiring->set_kv_lease_timeout(std::chrono::milliseconds(1));
  expiring->submit_prefill(twelve, core::SamplingParams{}, channel);  // larger than the cap, nothing else held
  EXPECT_THROW(expiring->submit_prefill({1, 2}, core::SamplingParams{}, channel), KvLeasesFullError);
  run_idle(*expiring);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  run_idle(*expiring);
  EXPECT_EQ(expiring->kv_lease_stats().expired, 1);
  EXPECT_EQ(expiring->stats().kv_blocks_free, expiring->stats().kv_blocks_total);
  expiring->submit_prefill({1, 2}, core::SamplingParams{}, channel);
  run_idle(*expiring);
}

// A lease released while its prompt still runs (the client left) is dropped as it is granted:
// its blocks come back without waiting for the timeout, and the cap's count with them.
TEST_F(KvTransferTest, LeaseReleasedBeforeItsGrantIsDropped) {
  auto prefill = engine(4);
  auto channel = std::make_shared<OutputChannel>();
  const int64_t id = prefill->submit_prefill({5, 6, 7, 8, 9, 10, 11}, core::SamplingParams{}, channel);
  prefill->release_kv({prefill->kv_epoch(), id});  // before the engine has even admitted it
  run_idle(*prefill);
  EXPECT_EQ(prefill->stats().kv_blocks_free, prefill->stats().kv_blocks_total);
  EXPECT_EQ(prefill->kv_lease_stats().blocks, 0);
  EXPECT_EQ(prefill->kv_lease_stats().outstanding, 0);
  EXPECT_THROW(prefill->export_kv({prefill->kv_epoch(), id}), KvTransferError);
}

}  // namespace
}  // namespace tachyon::engine
