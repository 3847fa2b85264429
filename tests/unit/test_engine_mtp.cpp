// MTP speculation (engine/mtp_drafter.h) on the CPU runner, with tiny-deepseek-mtp (one module)
// and a two-module variant of it (a second module taken from another seed's model):
// - the runner returns every row's pre-final-norm hidden state when the plan asks, equal to a
//   single-sequence forward's, and nothing otherwise; two tensor-parallel CPU ranks return the
//   same (within 1e-4) and their drafted runs equal their plain run; with DCP they refuse;
// - the mechanism: every proposal the drafter makes during engine runs (chunked prefill, drafts
//   accepted in part by forced acceptance, preemption, n = 2 forks after a prefix-cache hit,
//   k above the number of modules; a decode engine going on from a prefill engine's module rows)
//   equals the drafts computed from scratch for that sequence:
//   the main model over the whole sequence, each module over all its rows in a fresh cache,
//   chained greedily. A wrong row, token or cache rollback changes them;
// - the output: the suite's eight kinds of sampling give the plain run's tokens and logprobs
//   with MTP drafts for k = 1, 2, 3 and one or two modules, under preemption too;
// - state: released with the sequences (finished or aborted), refused without hidden states.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "../engine_run.h"
#include "speculative_engine_suite.h"
#include "tachyon/app/mtp_modules.h"
#include "tachyon/base/file_util.h"
#include "tachyon/engine/mtp_drafter.h"
#include "tachyon/model/mtp.h"
#include "tachyon/model/safetensors.h"
#include "tachyon/runner/tp_cpu_model_runner.h"

namespace tachyon::engine::engine_mtp_test {

using namespace speculative_test;  // NOLINT: the suite's vocabulary
using Modules = std::vector<model::MtpModule>;

core::SpeculativeConfig mtp_config(int32_t k) { return {.method = "mtp", .num_speculative_tokens = k}; }

// `dir`'s model with a second MTP module (layer 4): `donor`'s module (layer 3), of the same shapes.
void write_two_module_model(const std::filesystem::path& dir, const std::filesystem::path& donor,
                            const std::filesystem::path& out) {
  std::filesystem::create_directories(out);
  nlohmann::json config = nlohmann::json::parse(read_file(dir / "config.json"));
  config["num_nextn_predict_layers"] = 2;
  write_file(out / "config.json", config.dump(2));
  model::SafetensorsCheckpoint main(dir), other(donor);
  std::map<std::string, model::TensorSource> tensors;
  const auto add = [&](const std::string& name, const model::TensorView& view) {
    const model::TensorView* source = &view;
    tensors[name] = {view.dtype, view.shape, [source](std::byte* bytes) {
                       const size_t size = static_cast<size_t>(source->numel()) * dtype_size(source->dtype);
                       std::memcpy(bytes, source->data, size);
                     }};
  };
  for (const auto& [name, view] : main.tensors()) add(name, view);
  const std::string layer3 = "model.layers.3.";
  for (const auto& [name, view] : other.tensors()) {
    if (name.rfind(layer3, 0) == 0) add("model.layers.4." + name.substr(layer3.size()), view);
  }
  model::write_safetensors(out / "model.safetensors", tensors);
}

std::unique_ptr<MtpDrafter> make_mtp_drafter(const Modules& modules, int32_t k) {
  return std::make_unique<MtpDrafter>(app::cpu_mtp_modules(modules), k);
}

int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// The logits [k][vocab] the drafter's definition gives for drafts 1..k of `tokens` (prompt and
// outputs; the last just sampled, at position E), computed from scratch and fed the drafts
// `given`: the main model's hidden states of positions begin..E-1 from a forward over the whole
// sequence; module j < min(modules, k) over all rows begin..E-1 in a fresh cache (row p reads
// module j-1's output at p and token p + j + 1, a draft past E); past the last module, the last
// one again one row further on its own previous output and the previous draft.
std::vector<std::vector<float>> reference_logits(const model::DenseModel& main, const Modules& modules,
                                                 std::span<const int32_t> tokens, int64_t begin,
                                                 const std::vector<int32_t>& given) {
  const int64_t e = static_cast<int64_t>(tokens.size()) - 1, n = e - begin, h = main.config().hidden_size;
  const int64_t vocab = main.config().vocab_size, k = static_cast<int64_t>(given.size());
  model::SequenceKvCache main_cache(main.config(), e);
  std::vector<float> x;  // [n, hidden] the inputs of the current module's rows
  main.forward(tokens.first(static_cast<size_t>(e)), main_cache, false,
               [&](std::string_view name, int64_t, std::span<const float> v) {
                 if (name == "final_hidden") x.assign(v.begin() + begin * h, v.end());
               });
  std::vector<int32_t> seq(tokens.begin(), tokens.end());  // tokens, then the drafts
  const int64_t used = std::min<int64_t>(static_cast<int64_t>(modules.size()), k);
  std::vector<model::SequenceKvCache> caches;
  std::vector<float> last_hidden;
  std::vector<std::vector<float>> logits;
  for (int64_t j = 0; j < k; ++j) {
    model::MtpOutput out;
    if (j < used) {
      caches.push_back(modules[static_cast<size_t>(j)].make_cache(n + k));
      const std::vector<int32_t> next(seq.begin() + begin + j + 1, seq.begin() + begin + j + 1 + n);
      out = modules[static_cast<size_t>(j)].forward(x, next, caches.back());
      x = out.hidden;
    } else {
      out = modules[static_cast<size_t>(used - 1)].forward(last_hidden, std::span<const int32_t>(&seq.back(), 1),
                                                           caches.back());
    }
    last_hidden.assign(out.hidden.end() - h, out.hidden.end());
    logits.emplace_back(out.logits.end() - vocab, out.logits.end());
    seq.push_back(given[static_cast<size_t>(j)]);
  }
  return logits;
}

std::vector<int32_t> reference_drafts(const model::DenseModel& main, const Modules& modules,
                                      std::span<const int32_t> tokens, int32_t k) {
  std::vector<int32_t> drafts;
  for (int32_t j = 0; j < k; ++j) {  // each step's greedy draft feeds the next
    std::vector<int32_t> given = drafts;
    given.resize(static_cast<size_t>(k), 0);
    drafts.push_back(argmax(reference_logits(main, modules, tokens, 0, given)[static_cast<size_t>(j)]));
  }
  return drafts;
}

struct Proposal {
  int64_t sequence_id = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> drafts;
  int64_t begin = 0;  // where the drafter's module context starts
};

// What the recording drafter saw, kept beyond the engine's life.
struct Record {
  std::vector<Proposal> proposals;
  int64_t stale = 0;              // drafts handed out for a sequence of another length
  int64_t sequences_left = -1;    // module states when the engine went away
};

// An MtpDrafter that records every proposal.
class RecordingDrafter : public Drafter {
 public:
  RecordingDrafter(std::unique_ptr<MtpDrafter> mtp, std::shared_ptr<Record> record)
      : mtp_(std::move(mtp)), record_(std::move(record)) {}
  ~RecordingDrafter() override { record_->sequences_left = static_cast<int64_t>(mtp_->num_sequences()); }
  std::vector<int32_t> propose(int64_t id, std::span<const int32_t> tokens) override {
    std::vector<int32_t> drafts = mtp_->propose(id, tokens);
    record_->proposals.push_back({id, {tokens.begin(), tokens.end()}, drafts, mtp_->context_begin(id)});
    if (tokens.size() > 1) record_->stale += !mtp_->propose(id, tokens.first(tokens.size() - 1)).empty();
    return drafts;
  }
  void release(int64_t id) override { mtp_->release(id); }
  bool needs_hidden_states() const override { return mtp_->needs_hidden_states(); }
  void observe(const core::StepPlan& plan, const core::StepOutput& output) override { mtp_->observe(plan, output); }
  bool moves_state_with_kv() const override { return mtp_->moves_state_with_kv(); }
  std::string export_state(int64_t id) const override { return mtp_->export_state(id); }
  bool import_state(int64_t id, std::span<const int32_t> tokens, const std::string& state) override {
    return mtp_->import_state(id, tokens, state);
  }
  const MtpDrafter& mtp() const { return *mtp_; }

 private:
  std::unique_ptr<MtpDrafter> mtp_;
  std::shared_ptr<Record> record_;
};

class EngineMtpTest : public SpeculativeEngineSuite<37> {
 protected:
  static void SetUpTestSuite() {
    const std::string base =
        (std::filesystem::temp_directory_path() / ("tachyon-engine-mtp-" + std::to_string(::getpid()))).string();
    dir_ = new std::filesystem::path(base);
    model::make_model({.arch = "deepseek_v3", .preset = "tiny-deepseek-mtp", .seed = 37, .out_dir = *dir_});
    model_ = new model::DenseModel(model::DenseModel::load(*dir_));
    one_ = new Modules(model::load_mtp_modules(*dir_));
    const std::filesystem::path donor = base + "-donor", two = base + "-two";
    model::make_model({.arch = "deepseek_v3", .preset = "tiny-deepseek-mtp", .seed = 38, .out_dir = donor});
    write_two_module_model(*dir_, donor, two);
    two_ = new Modules(model::load_mtp_modules(two));
    std::filesystem::remove_all(donor);
    std::filesystem::remove_all(two);
  }
  static void TearDownTestSuite() {
    delete one_;
    delete two_;
    SpeculativeEngineSuite<37>::TearDownTestSuite();
  }

  static DrafterFactory recorded(const Modules& modules, int32_t k, std::shared_ptr<Record> record) {
    return [&modules, k, record] {
      return std::make_unique<RecordingDrafter>(make_mtp_drafter(modules, k), record);
    };
  }

  // Every proposal of `record` has k drafts, each of them the reference's greedy token given the
  // drafts before it (up to rounding: its reference logit within 1e-4 of the row's maximum, the
  // batched paged forward and the chunked module rows against single-sequence ones). Returns how
  // many were exactly the reference's argmax.
  static int64_t expect_reference_drafts(const Record& record, const std::vector<SpecRequest>& requests,
                                         const Modules& modules, int32_t k, const std::string& what) {
    // Sequence ids in submission order, n per request: which prompt each one has.
    std::vector<size_t> prompt_sizes;
    for (const SpecRequest& r : requests) prompt_sizes.insert(prompt_sizes.end(), r.params.n, r.prompt.size());
    int64_t exact = 0, total = 0;
    for (const Proposal& p : record.proposals) {
      // A sequence that has sampled nothing yet (its next step is the last prompt token of a
      // chunked prefill) has no drafts.
      const size_t expected =
          p.tokens.size() > prompt_sizes.at(static_cast<size_t>(p.sequence_id)) ? static_cast<size_t>(k) : 0;
      if (p.drafts.size() != expected) {
        ADD_FAILURE() << what << ": " << p.drafts.size() << " drafts for sequence " << p.sequence_id << " at "
                      << p.tokens.size() << " tokens";
        continue;
      }
      if (expected == 0) continue;
      const auto logits = reference_logits(*model_, modules, p.tokens, p.begin, p.drafts);
      for (int32_t j = 0; j < k; ++j) {
        const std::vector<float>& row = logits[static_cast<size_t>(j)];
        const float best = *std::max_element(row.begin(), row.end());
        const float mine = row[static_cast<size_t>(p.drafts[static_cast<size_t>(j)])];
        EXPECT_GE(mine, best - 1e-4f * std::max(1.0f, std::abs(best)))
            << what << " sequence " << p.sequence_id << " at " << p.tokens.size() << " tokens, draft " << j;
        exact += mine == best;
        ++total;
      }
    }
    EXPECT_EQ(record.stale, 0) << what;
    EXPECT_EQ(record.sequences_left, 0) << what << ": module state outlived its sequences";
    return exact * 100 / std::max<int64_t>(total, 1);
  }

  // Defined below, after HiddenStateProbe.
  static void expect_ranks_serve_mtp_exactly(const RunnerFactory& ranks, const std::string& layout);

  static inline Modules* one_ = nullptr;  // tiny-deepseek-mtp's module
  static inline Modules* two_ = nullptr;  // the same + a second module of other weights
};

// A drafter that only looks at the hidden states the runner returns.
struct HiddenStateProbe : Drafter {
  explicit HiddenStateProbe(bool needs) : needs(needs) {}
  std::vector<int32_t> propose(int64_t, std::span<const int32_t>) override { return {}; }
  bool needs_hidden_states() const override { return needs; }
  void observe(const core::StepPlan& plan, const core::StepOutput& output) override {
    ++steps;
    if (!needs) {
      empty += output.hidden_states.empty();
      return;
    }
    const int64_t h = static_cast<int64_t>(output.hidden_states.size()) / plan.num_tokens();
    for (const core::ScheduledSequence& s : plan.sequences) {
      for (int64_t i = 0; i < s.num_tokens; ++i) {
        const auto row = output.hidden_states.begin() + (s.first_token + i) * h;
        rows[s.sequence_id][s.num_computed + i].assign(row, row + h);
      }
    }
  }
  bool needs;
  int64_t steps = 0, empty = 0;
  std::map<int64_t, std::map<int64_t, std::vector<float>>> rows;  // [sequence][position] -> hidden
};

TEST_F(EngineMtpTest, TheCpuRunnerReturnsEveryRowsHiddenStateWhenAsked) {
  std::vector<SpecRequest> requests = make_requests(4, true);
  for (SpecRequest& r : requests) r.params.n = 1;
  for (bool needs : {true, false}) {
    core::EngineConfig c = engine_config(mtp_config(1));  // the probe stands in for the drafter
    auto probe = std::make_unique<HiddenStateProbe>(needs);
    HiddenStateProbe* seen = probe.get();
    EngineCore engine(c, std::make_unique<runner::CpuModelRunner>(*model_, c.num_blocks, c.block_size),
                      std::move(probe));
    std::vector<std::shared_ptr<OutputChannel>> channels;
    for (const SpecRequest& r : requests) {
      channels.push_back(std::make_shared<OutputChannel>());
      engine.submit(r.prompt, r.params, channels.back());
    }
    std::vector<std::vector<int32_t>> outputs = ::tachyon::testing::run_engine_to_idle(engine, channels);
    ASSERT_GT(seen->steps, 0);
    if (!needs) {
      EXPECT_EQ(seen->empty, seen->steps) << "hidden states returned unasked";
      continue;
    }
    // Each sequence's rows (chunked prefill, then decodes, batched with others) against its
    // single-sequence forward.
    for (size_t i = 0; i < requests.size(); ++i) {
      std::vector<int32_t> tokens = requests[i].prompt;
      tokens.insert(tokens.end(), outputs[i].begin(), outputs[i].end() - 1);  // the last is never computed
      std::vector<float> want;
      model::SequenceKvCache cache(model_->config(), static_cast<int64_t>(tokens.size()));
      model_->forward(tokens, cache, false, [&](std::string_view name, int64_t, std::span<const float> v) {
        if (name == "final_hidden") want.assign(v.begin(), v.end());
      });
      const auto& got = seen->rows[static_cast<int64_t>(i)];
      ASSERT_EQ(got.size(), tokens.size()) << "request " << i;
      const int64_t h = model_->config().hidden_size;
      double diff = 0.0, scale = 0.0;
      for (const auto& [position, row] : got) {
        for (int64_t d = 0; d < h; ++d) {
          diff = std::max(diff, static_cast<double>(std::abs(row[d] - want[position * h + d])));
          scale = std::max(scale, static_cast<double>(std::abs(want[position * h + d])));
        }
      }
      EXPECT_LT(diff, 1e-4 * scale) << "request " << i;
    }
  }
}

// Hidden states from `ranks` against the single runner's for every row of every step (a group's
// partial sums add in another order: within 1e-4), and MTP drafts over `ranks` against the plain
// run of the same ranks: identical tokens and logprobs (one module and two, k 1 and 3).
void EngineMtpTest::expect_ranks_serve_mtp_exactly(const RunnerFactory& ranks, const std::string& layout) {
  std::vector<SpecRequest> requests = make_requests(6, true);
  for (SpecRequest& r : requests) r.params.n = 1;
  std::map<int64_t, std::map<int64_t, std::vector<float>>> rows[2];  // single runner, the ranks
  for (int i : {0, 1}) {
    const core::EngineConfig c = engine_config(mtp_config(1));  // the probe stands in for the drafter
    auto probe = std::make_unique<HiddenStateProbe>(true);
    HiddenStateProbe* seen = probe.get();
    std::unique_ptr<runner::ModelRunner> runner =
        i == 0 ? std::make_unique<runner::CpuModelRunner>(*model_, c.num_blocks, c.block_size) : ranks(c);
    EngineCore engine(c, std::move(runner), std::move(probe));
    std::vector<std::shared_ptr<OutputChannel>> channels;
    for (const SpecRequest& r : requests) {
      channels.push_back(std::make_shared<OutputChannel>());
      engine.submit(r.prompt, r.params, channels.back());
    }
    ::tachyon::testing::run_engine_to_idle(engine, channels);
    rows[i] = seen->rows;
  }
  ASSERT_EQ(rows[1].size(), rows[0].size()) << layout;
  double diff = 0.0, scale = 0.0;
  for (const auto& [sequence, positions] : rows[0]) {
    ASSERT_EQ(rows[1][sequence].size(), positions.size()) << layout << " sequence " << sequence;
    for (const auto& [position, row] : positions) {
      const std::vector<float>& ranks_row = rows[1][sequence][position];
      ASSERT_EQ(ranks_row.size(), row.size()) << layout;
      for (size_t d = 0; d < row.size(); ++d) {
        diff = std::max(diff, static_cast<double>(std::abs(ranks_row[d] - row[d])));
        scale = std::max(scale, static_cast<double>(std::abs(row[d])));
      }
    }
  }
  EXPECT_GT(scale, 0.0) << layout;
  EXPECT_LT(diff, 1e-4 * scale) << layout;

  requests = make_requests(7, true);
  set_stop_ids(requests);
  const Completions plain = run_with(requests, engine_config({}), nullptr, nullptr, ranks);
  for (const auto& [modules, k] : {std::pair{one_, 1}, std::pair{one_, 3}, std::pair{two_, 3}}) {
    const std::string what = layout + " k " + std::to_string(k) + " modules " + std::to_string(modules->size());
    auto record = std::make_shared<Record>();
    EngineStats stats;
    expect_same(run_with(requests, engine_config(mtp_config(k)), &stats, recorded(*modules, k, record), ranks), plain,
                requests, what);
    EXPECT_GT(stats.draft_tokens, 0) << what;
    EXPECT_EQ(record->sequences_left, 0) << what;
  }
}

// Two tensor-parallel CPU ranks, with and without decode context parallelism, return the hidden
// states the single runner returns (each rank holds the whole residual stream) and verify MTP
// drafts exactly.
TEST_F(EngineMtpTest, TensorParallelRanksReturnHiddenStatesAndVerifyMtpDraftsExactly) {
  const model::ModelWeights weights = model::load_weights(model_->config(), model::SafetensorsCheckpoint(*dir_));
  expect_ranks_serve_mtp_exactly(tensor_parallel_ranks(weights, 2), "tp 2");

  // With decode context parallelism each rank attends over its share of the latent cache and the
  // group merges them before the all-reduces: the ranks still hold the whole residual stream.
  expect_ranks_serve_mtp_exactly(decode_context_parallel_ranks(weights, 2, 2), "tp 2 dcp 2");
}

// The experts split by expert over two tensor-parallel ranks, with and without two-batch overlap
// (the micro-batches' hidden states concatenated in the step's order), and data-parallel attention
// (two replicas of one rank and of two, the experts over all ranks): each group's ranks hold the
// whole residual stream of their tokens, the replicas' rows come back in the step's order, and MTP
// drafts over them give the plain run of the same layout exactly.
TEST_F(EngineMtpTest, ExpertAndDataParallelRanksReturnHiddenStatesAndVerifyMtpDraftsExactly) {
  const model::ModelWeights weights = model::load_weights(model_->config(), model::SafetensorsCheckpoint(*dir_));
  expect_ranks_serve_mtp_exactly(tensor_parallel_ranks(weights, 2, /*expert_parallel=*/true), "tp 2 ep");
  expect_ranks_serve_mtp_exactly(two_batch_overlap_ranks(weights, 2), "tp 2 ep tbo");
  expect_ranks_serve_mtp_exactly(data_parallel_ranks(weights, 2, 1), "dp 2");
  expect_ranks_serve_mtp_exactly(data_parallel_ranks(weights, 2, 2), "dp 2 tp 2");
}

// Prefill context parallelism (2 and 3 whole-model ranks, and --tp 2 --pcp 2): a split step's
// hidden states are gathered from the ranks that computed them and put back in the step's token
// order (one more all_gatherv); MTP drafts over them give the plain run of the same ranks exactly.
TEST_F(EngineMtpTest, PrefillContextParallelRanksReturnHiddenStatesAndVerifyMtpDraftsExactly) {
  const model::ModelWeights weights = model::load_weights(model_->config(), model::SafetensorsCheckpoint(*dir_));
  expect_ranks_serve_mtp_exactly(prefill_context_parallel_ranks(weights, 2), "pcp 2");
  expect_ranks_serve_mtp_exactly(prefill_context_parallel_ranks(weights, 3), "pcp 3");
  expect_ranks_serve_mtp_exactly(prefill_context_parallel_ranks(weights, 2, 2), "tp 2 pcp 2");
}

// Forced acceptance accepts drafts by a keyed draw, so rows of accepted drafts (and the token
// sampled after them) feed the modules as often as rejected ones are rolled back.
TEST_F(EngineMtpTest, ProposalsEqualDraftsComputedFromScratch) {
  struct Case {
    const char* what;
    const Modules* modules;
    int32_t k;
    bool prefix_caching;
    int32_t num_blocks;  // 40: preemption
  };
  const Case cases[] = {
      {"one module k 3", one_, 3, false, 160},
      {"two modules k 3", two_, 3, false, 160},
      {"two modules k 2, preemption, forks after prefix hits", two_, 2, true, 40},
      {"one module k 2, preemption", one_, 2, true, 40},
  };
  for (const Case& t : cases) {
    std::vector<SpecRequest> requests = make_requests(7, true);
    core::EngineConfig c = engine_config(mtp_config(t.k));
    c.enable_prefix_caching = t.prefix_caching;
    c.num_blocks = t.num_blocks;
    c.speculative.forced_acceptance = 0.6f;
    auto record = std::make_shared<Record>();
    EngineStats stats;
    run_with(requests, c, &stats, recorded(*t.modules, t.k, record));
    ASSERT_GT(record->proposals.size(), 20u) << t.what;
    EXPECT_GT(stats.draft_tokens_accepted, stats.draft_tokens / 4) << t.what;
    EXPECT_EQ(stats.preemptions > 0, t.num_blocks < 160) << t.what;
    bool truncated = false;
    for (const Proposal& p : record->proposals) truncated |= p.begin > 0;
    EXPECT_EQ(truncated, t.prefix_caching) << t.what << ": module context starting after a prefix-cache hit";
    const int64_t exact = expect_reference_drafts(*record, requests, *t.modules, t.k, t.what);
    EXPECT_GE(exact, 95) << t.what << ": % of drafts exactly the reference's argmax";
  }
}

TEST_F(EngineMtpTest, ProposalsOfTheFirstStepEqualTheDefinitionsGreedyChain) {
  // The same check written without the teacher-forced logits: draft j + 1 is the argmax after
  // the greedy drafts 1..j.
  std::vector<int32_t> prompt = {5, 9, 17, 33, 65, 129, 257, 3, 7, 11, 13, 19, 23};
  for (const Modules* modules : {one_, two_}) {
    for (int32_t k : {1, 2, 3}) {
      auto record = std::make_shared<Record>();
      core::EngineConfig c = engine_config(mtp_config(k));
      SpecRequest r{prompt, {}};
      r.params.temperature = 0.0f;
      r.params.max_tokens = 2;
      r.params.ignore_eos = true;
      run_with({r}, c, nullptr, recorded(*modules, k, record));
      ASSERT_EQ(record->proposals.size(), 1u);
      EXPECT_EQ(record->proposals[0].drafts, reference_drafts(*model_, *modules, record->proposals[0].tokens, k))
          << modules->size() << " modules, k " << k;
    }
  }
}

TEST_F(EngineMtpTest, MtpDraftsNeverChangeTheTokens) {
  struct Drafting {
    const Modules* modules;
    int32_t k;
  };
  for (bool repetitive : {true, false}) {
    for (uint32_t seed = 1; seed <= 2; ++seed) {
      std::vector<SpecRequest> requests = make_requests(seed, repetitive);
      set_stop_ids(requests);
      EngineStats plain_stats;
      const Completions plain = run(requests, {}, &plain_stats);
      for (const Drafting& d : {Drafting{one_, 1}, Drafting{one_, 2}, Drafting{one_, 3}, Drafting{two_, 2},
                                Drafting{two_, 3}}) {
        const std::string what = std::string(repetitive ? "repetitive" : "random") + " seed " + std::to_string(seed) +
                                 " k " + std::to_string(d.k) + " modules " + std::to_string(d.modules->size());
        auto record = std::make_shared<Record>();
        EngineStats stats;
        expect_same(run(requests, mtp_config(d.k), &stats, recorded(*d.modules, d.k, record)), plain, requests, what);
        EXPECT_EQ(stats.generated_tokens, plain_stats.generated_tokens) << what;
        EXPECT_GT(stats.draft_tokens, 0) << what;
        EXPECT_EQ(record->sequences_left, 0) << what;
      }
    }
  }
}

// Over the FP8 KV cache (--kv-cache-dtype fp8) MTP drafts change no token of the plain FP8 run
// (logprobs within 1e-3, as test_engine_ngram.cpp says why: a verify step writes the rows a plain
// step would, up to the f32 rounding of another batch shape); the modules keep their own caches.
// The FP8 run differs from the bf16 one (the cache is FP8).
TEST_F(EngineMtpTest, MtpDraftsOverAnFp8KvCacheNeverChangeTheTokens) {
  bool differs_from_bf16 = false;
  for (uint32_t seed = 1; seed <= 2; ++seed) {
    const std::vector<SpecRequest> requests = make_requests(seed, seed == 1);
    const Completions plain = plain_fp8_kv_run(requests, differs_from_bf16);
    for (const auto& [modules, k] : {std::pair{one_, 1}, std::pair{one_, 3}, std::pair{two_, 3}}) {
      const std::string what = "fp8 kv seed " + std::to_string(seed) + " k " + std::to_string(k) + " modules " +
                               std::to_string(modules->size());
      auto record = std::make_shared<Record>();
      EngineStats stats;
      expect_same(run_with(requests, fp8_kv_config(mtp_config(k)), &stats, recorded(*modules, k, record)), plain,
                  requests, what, 1e-3);
      EXPECT_GT(stats.draft_tokens, 0) << what;
      EXPECT_EQ(record->sequences_left, 0) << what;
    }
  }
  EXPECT_TRUE(differs_from_bf16) << "the FP8 cache changed no logprob (is it FP8?)";
}

TEST_F(EngineMtpTest, PreemptionKeepsTheTokens) {
  std::vector<SpecRequest> requests = make_requests(5, true);
  core::EngineConfig c = engine_config({});
  c.num_blocks = 40;  // max_model_len 160 at block size 4: the least the engine accepts
  EngineStats plain_stats, stats;
  const Completions plain = run_with(requests, c, &plain_stats);
  c.speculative = mtp_config(2);
  auto record = std::make_shared<Record>();
  expect_same(run_with(requests, c, &stats, recorded(*one_, 2, record)), plain, requests, "preemption");
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_GT(stats.draft_tokens, 0);
  EXPECT_EQ(record->sequences_left, 0);
}

TEST_F(EngineMtpTest, AbortedSequencesReleaseTheirState) {
  core::EngineConfig c = engine_config(mtp_config(2));
  auto record = std::make_shared<Record>();
  auto drafter = std::make_unique<RecordingDrafter>(make_mtp_drafter(*one_, 2), record);
  const RecordingDrafter* seen = drafter.get();
  EngineCore engine(c, std::make_unique<runner::CpuModelRunner>(*model_, c.num_blocks, c.block_size),
                    std::move(drafter));
  core::SamplingParams params;
  params.max_tokens = 50;
  params.n = 2;
  params.ignore_eos = true;
  auto channel = std::make_shared<OutputChannel>();
  const int64_t id = engine.submit({4, 8, 15, 16, 23, 42, 7, 9}, params, channel);
  for (int i = 0; i < 6; ++i) engine.step();
  EXPECT_EQ(seen->mtp().num_sequences(), 2u);
  EXPECT_GT(record->proposals.size(), 0u);
  engine.abort(id);
  engine.step();
  EXPECT_EQ(seen->mtp().num_sequences(), 0u);
}

// Prefill/decode disaggregation (engine/kv_transfer.h) with MTP on both sides.
class EngineMtpDisaggregationTest : public EngineMtpTest {
 protected:
  // The suite's requests that disaggregation carries (n = 1, no logprobs).
  static std::vector<SpecRequest> transferable_requests(uint32_t seed) {
    std::vector<SpecRequest> out;
    for (const SpecRequest& r : make_requests(seed, true)) {
      if (r.params.n == 1 && r.params.logprobs < 0) out.push_back(r);
    }
    return out;
  }
  static std::unique_ptr<runner::ModelRunner> cpu_runner(const core::EngineConfig& c) {
    return std::make_unique<runner::CpuModelRunner>(*model_, c.num_blocks, c.block_size);
  }
  static void run_idle(EngineCore& engine) {
    for (int guard = 0; engine.has_work() && guard < 100000; ++guard) engine.step();
  }
  // Every request's prompt through a prefill engine whose drafter is `prefill_drafter` (null:
  // none), its payload (rows, first token, drafter state) exported.
  static std::vector<KvPayload> prefill(const std::vector<SpecRequest>& requests, const core::EngineConfig& c,
                                        std::unique_ptr<Drafter> prefill_drafter) {
    EngineCore engine(c, cpu_runner(c), std::move(prefill_drafter));
    std::vector<int64_t> ids;
    std::vector<std::shared_ptr<OutputChannel>> channels;
    for (const SpecRequest& r : requests) {
      channels.push_back(std::make_shared<OutputChannel>());
      ids.push_back(engine.submit_prefill(r.prompt, r.params, channels.back()));
    }
    run_idle(engine);
    std::vector<KvPayload> payloads;
    for (int64_t id : ids) payloads.push_back(engine.export_kv({engine.kv_epoch(), id}));
    return payloads;
  }
  // The payloads decoded by an engine with `drafter`.
  static Completions decode(std::vector<KvPayload> payloads, const std::vector<SpecRequest>& requests,
                            const core::EngineConfig& c, std::unique_ptr<Drafter> drafter, EngineStats& stats) {
    EngineCore engine(c, cpu_runner(c), std::move(drafter));
    std::vector<std::shared_ptr<OutputChannel>> channels;
    for (size_t i = 0; i < requests.size(); ++i) {
      channels.push_back(std::make_shared<OutputChannel>());
      engine.submit_imported(std::move(payloads[i]), requests[i].params, channels.back());
    }
    run_idle(engine);
    Completions out(requests.size(), std::vector<SpecCompletion>(1));
    for (size_t i = 0; i < requests.size(); ++i) {
      while (auto delta = channels[i]->take(std::chrono::milliseconds(0))) {
        for (const auto& d : delta->completions) {
          out[i][0].tokens.insert(out[i][0].tokens.end(), d.token_ids.begin(), d.token_ids.end());
        }
      }
    }
    stats = engine.stats();
    return out;
  }
};

// The prefill engine's modules run over each prompt and their rows move with the KV
// (KvPayload::draft_state); the decode engine's drafter goes on from them: every proposal it
// makes, the first decode step's included, is the reference chain over the whole sequence (the
// module context from position 0), and the tokens are the plain run's. Without the state (the
// mutation this catches) the first step has no drafts and the context starts at the first
// decoded token. The two engines' k may differ (the decode engine drafts again for its own).
TEST_F(EngineMtpDisaggregationTest, TheDecodeEngineDraftsFromThePrefillEnginesModuleRows) {
  struct Case {
    const Modules* modules;
    int32_t prefill_k;  // the prefill engine's k (its drafts are made again for another k)
    int32_t k;          // the decode engine's
  };
  for (const Case& t : {Case{one_, 1, 1}, Case{one_, 3, 3}, Case{one_, 1, 3}, Case{one_, 3, 2}, Case{two_, 1, 1},
                      Case{two_, 3, 3}, Case{two_, 2, 3}}) {
    const Modules* modules = t.modules;
    const int32_t k = t.k;
    const std::string what = std::to_string(modules->size()) + " modules, k " + std::to_string(t.prefill_k) +
                             " -> " + std::to_string(k);
    const std::vector<SpecRequest> requests = transferable_requests(11);
    const Completions plain = run(requests, {});
    const core::EngineConfig c = engine_config(mtp_config(k));
    std::vector<KvPayload> payloads =
        prefill(requests, engine_config(mtp_config(t.prefill_k)), make_mtp_drafter(*modules, t.prefill_k));
    for (const KvPayload& p : payloads) EXPECT_FALSE(p.draft_state.empty()) << what;
    auto record = std::make_shared<Record>();
    EngineStats stats;
    const Completions got = decode(std::move(payloads), requests, c, recorded(*modules, k, record)(), stats);
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(got[i][0].tokens, plain[i][0].tokens) << what << " request " << i;
    }
    EXPECT_EQ(stats.draft_states_imported, static_cast<int64_t>(requests.size())) << what;
    EXPECT_EQ(stats.draft_states_refused, 0) << what;
    EXPECT_GT(stats.draft_tokens_accepted, 0) << what;
    ASSERT_GT(record->proposals.size(), requests.size()) << what;
    for (const Proposal& p : record->proposals) {
      EXPECT_EQ(p.begin, 0) << what << ": sequence " << p.sequence_id << "'s module context starts later";
    }
    EXPECT_GE(expect_reference_drafts(*record, requests, *modules, k, what), 95)
        << what << ": % of drafts exactly the reference's argmax";
  }
}

// A decode engine short of blocks preempts imported sequences and computes them again from
// position 0; the imported module rows stay, the rows it shows again are skipped, and every
// proposal is still the reference chain over the whole sequence.
TEST_F(EngineMtpDisaggregationTest, PreemptedImportsKeepTheImportedModuleRows) {
  const std::vector<SpecRequest> requests = transferable_requests(14);
  const Completions plain = run(requests, {});
  const core::EngineConfig c = engine_config(mtp_config(2));
  core::EngineConfig tight = c;
  tight.num_blocks = 40;  // max_model_len 160 at block size 4: the least the engine accepts
  std::vector<KvPayload> payloads = prefill(requests, c, make_mtp_drafter(*one_, 2));
  auto record = std::make_shared<Record>();
  EngineStats stats;
  const Completions got = decode(std::move(payloads), requests, tight, recorded(*one_, 2, record)(), stats);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(got[i][0].tokens, plain[i][0].tokens) << "request " << i;
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_EQ(stats.draft_states_imported, static_cast<int64_t>(requests.size()));
  for (const Proposal& p : record->proposals) EXPECT_EQ(p.begin, 0) << "sequence " << p.sequence_id;
  EXPECT_GE(expect_reference_drafts(*record, requests, *one_, 2, "preempted imports"), 95);
}

// A prefill engine without MTP sends no state: the decode engine's drafter starts at the first
// decoded token (no drafts for the first step), and the tokens are still the plain run's.
TEST_F(EngineMtpDisaggregationTest, WithoutThePrefillEnginesModulesDraftsStartAtTheFirstDecodedToken) {
  const std::vector<SpecRequest> requests = transferable_requests(12);
  const Completions plain = run(requests, {});
  const core::EngineConfig c = engine_config(mtp_config(2));
  std::vector<KvPayload> payloads = prefill(requests, engine_config({}), nullptr);
  auto record = std::make_shared<Record>();
  EngineStats stats;
  const Completions got = decode(std::move(payloads), requests, c, recorded(*one_, 2, record)(), stats);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(got[i][0].tokens, plain[i][0].tokens) << "request " << i;
  EXPECT_EQ(stats.draft_states_imported, 0);
  std::map<int64_t, int64_t> seen;  // proposals per sequence
  for (const Proposal& p : record->proposals) {
    const int64_t prompt = static_cast<int64_t>(requests[static_cast<size_t>(p.sequence_id)].prompt.size());
    if (seen[p.sequence_id]++ == 0) {  // the first decode step: no module state yet
      EXPECT_TRUE(p.drafts.empty()) << "sequence " << p.sequence_id;
      EXPECT_EQ(p.begin, -1) << "sequence " << p.sequence_id;
    } else {
      EXPECT_EQ(p.begin, prompt) << "sequence " << p.sequence_id << ": the context starts at the first decoded token";
    }
  }
  EXPECT_EQ(seen.size(), requests.size());
  EXPECT_GT(stats.draft_tokens, 0);
}

// A state that does not fit the importing drafter is refused whole (nothing kept, so drafting
// starts afresh), never thrown or half taken: damaged or cut bytes, another sequence's tokens,
// another number of modules; drafts made for another k are made again for this one.
TEST_F(EngineMtpDisaggregationTest, AStateThatDoesNotFitIsRefused) {
  const std::vector<SpecRequest> requests = transferable_requests(13);
  const core::EngineConfig c = engine_config(mtp_config(3));
  const std::vector<KvPayload> payloads = prefill(requests, c, make_mtp_drafter(*one_, 3));
  const KvPayload& p = payloads.front();
  std::vector<int32_t> tokens = p.prompt;
  tokens.push_back(p.first_token);
  const auto import = [&](const Modules& modules, int32_t k, std::span<const int32_t> seq, const std::string& state) {
    std::unique_ptr<MtpDrafter> drafter = make_mtp_drafter(modules, k);
    const bool taken = drafter->import_state(7, seq, state);
    EXPECT_EQ(drafter->num_sequences(), taken ? 1u : 0u);
    return std::pair{taken, drafter->propose(7, seq)};
  };
  const auto [taken, drafts] = import(*one_, 3, tokens, p.draft_state);
  EXPECT_TRUE(taken);
  EXPECT_EQ(drafts.size(), 3u);
  EXPECT_FALSE(import(*one_, 3, tokens, p.draft_state.substr(0, p.draft_state.size() - 1)).first) << "cut";
  EXPECT_FALSE(import(*one_, 3, tokens, p.draft_state + "x").first) << "a byte too many";
  std::string bad_magic = p.draft_state;
  bad_magic[0] ^= 1;
  EXPECT_FALSE(import(*one_, 3, tokens, bad_magic).first) << "magic";
  std::vector<int32_t> longer = tokens;
  longer.push_back(5);
  EXPECT_FALSE(import(*one_, 3, longer, p.draft_state).first) << "another sequence's tokens";
  EXPECT_FALSE(import(*two_, 3, tokens, p.draft_state).first) << "two modules";
  EXPECT_FALSE(import(*one_, 3, tokens, "").first) << "empty";
  // Another k: the importer drafts again from module 0's newest row; with one module the chain
  // past it depends only on the drafts before, so k 2's drafts are k 3's first two.
  const auto [taken_k2, drafts_k2] = import(*one_, 2, tokens, p.draft_state);
  EXPECT_TRUE(taken_k2) << "k 2: the rows fit";
  EXPECT_EQ(drafts_k2, std::vector<int32_t>(drafts.begin(), drafts.begin() + 2)) << "k 2";
}

TEST_F(EngineMtpTest, ARunnerWithoutHiddenStatesIsRefused) {
  std::unique_ptr<MtpDrafter> drafter = make_mtp_drafter(*one_, 2);
  core::StepPlan plan;
  plan.token_ids = {1, 2};
  plan.positions = {0, 1};
  plan.sequences.push_back({.sequence_id = 0, .first_token = 0, .num_tokens = 2});
  try {
    drafter->observe(plan, {});
    FAIL() << "observed a step without hidden states";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--speculative-method mtp needs the model's hidden states"), std::string::npos)
        << e.what();
  }
}

}  // namespace tachyon::engine::engine_mtp_test
