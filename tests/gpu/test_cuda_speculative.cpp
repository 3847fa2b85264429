// Draft-token verification on the CUDA runner (CudaModelRunner::verifies_drafts), against the
// run without drafts on the same GPU:
//   - build_sampling_inputs gives a sequence with k drafts 1 + k rows, row i with step, penalty
//     history and min_tokens mask advanced by i (host only);
//   - the runner, driven by hand-made plans on tiny random models: drafts equal to the plain
//     run's tokens are accepted, a wrong draft ends the list with the plain run's token, and each
//     verify row's logits are the plain decode row's within bf16 tolerance;
//   - forced acceptance (benchmarks) follows the keyed rule, whatever the drafts;
//   - an EngineCore with the n-gram drafter gives the plain engine's tokens (greedy and seeded),
//     over one runner and over 2 tensor-parallel ranks sharing the GPU, and so does one whose
//     draft model (a runner of its own beside the group) drafts for those 2 ranks;
//   - so does one whose runner drafts with the model's MTP module on the device
//     (cuda_mtp_drafter.h), graphs and eager, k 1 and 3, with chunked prefill and prefix hits;
//     its acceptance on a trained module is checked by the MTP canary (scripts/gpu-test.sh).
// The numerics: a verify step runs its rows as decode rows (the split-KV decode kernel and the
// decode graphs, as the plain run), but its GEMMs see 1 + k rows per sequence where the plain run's
// see one (GEMV or another GEMM shape), so bf16 may round differently and a token may flip where
// the plain run's choice was a near tie. Where a token differs, the tests require that near tie
// (kLogitTieBound, near_ties.h) instead of equality; nowhere else.
// Needs a GPU: ctest -R gpu.cuda_speculative (scripts/gpu-test.sh).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "near_ties.h"
#include "runner_test_util.h"
#include "tachyon/engine/draft_model_drafter.h"
#include "tachyon/engine/drafter.h"
#include "tachyon/engine/runner_drafter.h"
#include "tachyon/model/mtp.h"
#include "tachyon/kernels/sampling.h"
#include "tachyon/runner/cuda/sampling_inputs.h"
#include "tachyon/runner/draft_acceptance.h"
#include "tachyon/runner/step_inputs.h"

namespace tachyon::runner {
namespace {

namespace kc = kernels::cuda;
using core::SamplingParams;

// Of the rows compared (runner level), at least this fraction must give the plain run's token.
constexpr double kMinExactRowFraction = 0.9;

// ---------------------------------------------------------------------------------------------
// build_sampling_inputs with drafts (host only).

core::ScheduledSequence sampled_sequence(int64_t id, const SamplingParams& p, uint64_t seed,
                                         std::vector<int32_t> drafts) {
  core::ScheduledSequence s;
  s.sequence_id = id;
  s.sample = true;
  s.params = std::make_shared<const SamplingParams>(p);
  s.seed = seed;
  s.prompt_tokens = {5, 6, 7};
  s.output_tokens = {1, 2};
  s.num_output_tokens = 2;
  s.eos_token_id = 2;
  s.draft_tokens = std::move(drafts);
  return s;
}

TEST(CudaSpeculative, BuildSamplingInputsGivesEachDraftRowItsStepHistoryAndMask) {
  SamplingParams greedy;
  greedy.temperature = 0.0f, greedy.logprobs = 2;
  SamplingParams penalized;
  penalized.temperature = 0.8f, penalized.repetition_penalty = 1.2f, penalized.frequency_penalty = 0.3f;
  penalized.min_tokens = 4, penalized.stop_token_ids = {9, 8};
  SamplingParams presence;  // outputs only (no prompt), min_tokens with ignore_eos: stop ids alone
  presence.temperature = 1.0f, presence.presence_penalty = 0.5f, presence.min_tokens = 3, presence.ignore_eos = true;
  presence.stop_token_ids = {11};

  core::StepPlan plan;
  core::ScheduledSequence chunk;  // a prefill chunk that samples nothing
  chunk.sequence_id = 0;
  plan.sequences.push_back(chunk);
  plan.sequences.push_back(sampled_sequence(1, greedy, 11, {40}));
  plan.sequences.push_back(sampled_sequence(2, penalized, 12, {30, 31, 32}));
  plan.sequences.push_back(sampled_sequence(3, greedy, 13, {}));
  plan.sequences.push_back(sampled_sequence(4, presence, 14, {50, 51}));
  const SamplingInputs in = build_sampling_inputs(plan);
  ASSERT_EQ(in.rows.size(), 2u + 4u + 1u + 3u) << "1 + k rows per sampled sequence, in plan order";
  auto slice = [&](int32_t begin, int32_t n) {
    return std::vector<int32_t>(in.tokens.begin() + begin, in.tokens.begin() + begin + n);
  };

  // Greedy with one draft: steps 2 and 3, no history, no mask.
  for (int i = 0; i < 2; ++i) {
    const kc::SamplingRow& r = in.rows[static_cast<size_t>(i)];
    EXPECT_EQ(r.seed, 11u);
    EXPECT_EQ(r.step, 2u + static_cast<uint64_t>(i));
    EXPECT_EQ(r.num_logprobs, 2);
    EXPECT_EQ(r.num_prompt_tokens + r.num_output_tokens + r.num_masked, 0);
  }
  // Penalized with three drafts: row i reads the prompt, the outputs and drafts 0..i-1 from one
  // shared history; min_tokens 4 masks the rows at output counts 2 and 3, not 4 and 5.
  const kc::SamplingRow& first = in.rows[2];
  EXPECT_EQ(slice(first.history_begin, 8), (std::vector<int32_t>{5, 6, 7, 1, 2, 30, 31, 32}));
  EXPECT_EQ(slice(first.masked_begin, first.num_masked), (std::vector<int32_t>{9, 8, 2}));
  for (int i = 0; i < 4; ++i) {
    const kc::SamplingRow& r = in.rows[2 + static_cast<size_t>(i)];
    EXPECT_EQ(r.seed, 12u) << "row " << i;
    EXPECT_EQ(r.step, 2u + static_cast<uint64_t>(i)) << "row " << i;
    EXPECT_EQ(r.temperature, 0.8f);
    EXPECT_EQ(r.repetition_penalty, 1.2f);
    EXPECT_EQ(r.history_begin, first.history_begin) << "row " << i;
    EXPECT_EQ(r.num_prompt_tokens, 3) << "row " << i;
    EXPECT_EQ(r.num_output_tokens, 2 + i) << "row " << i;
    if (i < 2) {
      EXPECT_EQ(r.masked_begin, first.masked_begin) << "row " << i;
      EXPECT_EQ(r.num_masked, 3) << "row " << i;
    } else {
      EXPECT_EQ(r.num_masked, 0) << "row " << i << ": output count " << 2 + i << " reaches min_tokens 4";
    }
  }
  // Plain greedy without drafts: one row at step 2, as before drafts existed.
  EXPECT_EQ(in.rows[6].seed, 13u);
  EXPECT_EQ(in.rows[6].step, 2u);
  EXPECT_EQ(in.rows[6].num_prompt_tokens + in.rows[6].num_output_tokens + in.rows[6].num_masked, 0);
  // Presence penalty with two drafts: outputs + drafts (no prompt); stop id 11 masked (no EOS:
  // ignore_eos) in the row at output count 2 only.
  const kc::SamplingRow& p0 = in.rows[7];
  EXPECT_EQ(slice(p0.history_begin, 4), (std::vector<int32_t>{1, 2, 50, 51}));
  for (int i = 0; i < 3; ++i) {
    const kc::SamplingRow& r = in.rows[7 + static_cast<size_t>(i)];
    EXPECT_EQ(r.step, 2u + static_cast<uint64_t>(i));
    EXPECT_EQ(r.num_prompt_tokens, 0);
    EXPECT_EQ(r.num_output_tokens, 2 + i);
    EXPECT_EQ(r.num_masked, i == 0 ? 1 : 0) << "row " << i;
  }
  EXPECT_EQ(slice(p0.masked_begin, 1), (std::vector<int32_t>{11}));
  // One copy of each history and mask list, not one per row: 8 + 3 and 4 + 1 ids.
  EXPECT_EQ(in.tokens.size(), 16u);
}

// Without drafts the rows are what they were before verification existed: one per sequence, the
// history prompt + outputs, then the masked ids.
TEST(CudaSpeculative, BuildSamplingInputsWithoutDraftsIsOneRowPerSequence) {
  SamplingParams penalized;
  penalized.temperature = 1.0f, penalized.repetition_penalty = 1.1f, penalized.min_tokens = 4;
  penalized.stop_token_ids = {9, 8};
  core::StepPlan plan;
  plan.sequences.push_back(sampled_sequence(1, penalized, 5, {}));
  const SamplingInputs in = build_sampling_inputs(plan);
  ASSERT_EQ(in.rows.size(), 1u);
  EXPECT_EQ(in.tokens, (std::vector<int32_t>{5, 6, 7, 1, 2, 9, 8, 2}));
  EXPECT_EQ(in.rows[0].history_begin, 0);
  EXPECT_EQ(in.rows[0].num_prompt_tokens, 3);
  EXPECT_EQ(in.rows[0].num_output_tokens, 2);
  EXPECT_EQ(in.rows[0].masked_begin, 5);
  EXPECT_EQ(in.rows[0].num_masked, 3);
  EXPECT_EQ(in.rows[0].step, 2u);
}

TEST(CudaSpeculative, DraftsOnASequenceThatSamplesNothingAreRefused) {
  core::StepPlan plan;
  core::ScheduledSequence chunk;
  chunk.draft_tokens = {4};
  plan.sequences.push_back(chunk);
  EXPECT_THROW(build_sampling_inputs(plan), Error);
}

// The staging layout holds 1 + k rows per sequence when sized for them (logits rows, and the
// attention sequences a verify step's decode rows take: core::max_decode_rows), and refuses more.
TEST(CudaSpeculative, StagingHoldsTheLogitsRowsItWasSizedFor) {
  const StepInputLimits limits{.max_tokens = 64, .max_seqs = 8, .max_blocks_per_seq = 4,
                               .sampling_row_bytes = sizeof(kc::SamplingRow), .max_logits_rows = 8};
  const StepInputLayout layout = StepInputLayout::make(limits);
  EXPECT_GE(layout.context_lens - layout.logits_rows, 8 * sizeof(int32_t));
  EXPECT_GE(layout.block_tables - layout.sampling_rows, 8 * sizeof(kc::SamplingRow));
  // Two sequences of one known token and three drafts: 4 tokens and 4 logits rows each.
  auto plan_of = [](int32_t drafts) {
    core::StepPlan plan;
    plan.block_size = 16;
    for (int64_t s = 0; s < 2; ++s) {
      core::ScheduledSequence seq;
      seq.sequence_id = s, seq.first_token = plan.num_tokens(), seq.num_tokens = 1 + drafts, seq.num_computed = 5;
      seq.block_table = {static_cast<int32_t>(s)}, seq.sample = true;
      for (int32_t t = 0; t <= drafts; ++t) {
        if (t > 0) seq.draft_tokens.push_back(t);
        plan.token_ids.push_back(t);
        plan.positions.push_back(5 + t);
        plan.slot_mapping.push_back(s * 16 + 5 + t);
        plan.logits_rows.push_back(plan.num_tokens() - 1);
      }
      plan.sequences.push_back(seq);
    }
    return plan;
  };
  std::vector<std::byte> staging(layout.variable);
  const StepInputSummary summary = fill_step_inputs(plan_of(3), layout, limits, staging.data());
  EXPECT_EQ(summary.num_sampled, 8);
  EXPECT_TRUE(summary.decode_only) << "a verify step runs as decode rows";
  EXPECT_EQ(summary.num_decode_seqs, 8);
  const auto* rows = reinterpret_cast<const int32_t*>(staging.data() + layout.logits_rows);
  EXPECT_EQ(std::vector<int32_t>(rows, rows + 8), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_THROW(fill_step_inputs(plan_of(4), layout, limits, staging.data()), Error) << "10 rows > 8";
}

// ---------------------------------------------------------------------------------------------
// The runner driven by hand.

// A sequence driven by hand: its known tokens (prompt, then outputs), how many are in the KV
// cache, and its blocks (from a bump allocator all sequences share).
struct HandSequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;
  int64_t num_prompt = 0;
  int64_t computed = 0;
  std::vector<int32_t> blocks;
  uint64_t seed = 0;

  int64_t num_outputs() const { return static_cast<int64_t>(tokens.size()) - num_prompt; }
  std::vector<int32_t> outputs() const { return {tokens.begin() + num_prompt, tokens.end()}; }
};

// One step over `seqs`: each runs its known tokens not yet cached, then its drafts (empty: a
// plain step), and is sampled: logits rows at its last known token and at each draft.
core::StepPlan hand_step(const std::vector<HandSequence*>& seqs, const std::vector<std::vector<int32_t>>& drafts,
                         const SamplingParams& params, int32_t block_size, int32_t& next_block,
                         float forced_acceptance = -1.0f) {
  core::StepPlan plan;
  plan.block_size = block_size;
  plan.forced_acceptance = forced_acceptance;
  for (size_t i = 0; i < seqs.size(); ++i) {
    HandSequence& s = *seqs[i];
    const std::vector<int32_t>& d = drafts[i];
    const int64_t known = static_cast<int64_t>(s.tokens.size()) - s.computed;
    const int64_t n = known + static_cast<int64_t>(d.size());
    while (static_cast<int64_t>(s.blocks.size()) * block_size < s.computed + n) s.blocks.push_back(next_block++);
    core::ScheduledSequence scheduled;
    scheduled.sequence_id = s.id;
    scheduled.first_token = plan.num_tokens();
    scheduled.num_tokens = n;
    scheduled.num_computed = s.computed;
    scheduled.block_table = s.blocks;
    scheduled.sample = true;
    scheduled.draft_tokens = d;
    scheduled.params = std::make_shared<const SamplingParams>(params);
    scheduled.seed = s.seed;
    scheduled.num_output_tokens = s.num_outputs();
    scheduled.output_tokens = s.outputs();
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = s.computed + t;
      plan.token_ids.push_back(t < known ? s.tokens[static_cast<size_t>(pos)] : d[static_cast<size_t>(t - known)]);
      plan.positions.push_back(pos);
      plan.slot_mapping.push_back(int64_t{s.blocks[static_cast<size_t>(pos / block_size)]} * block_size + pos % block_size);
    }
    for (int64_t r = 0; r <= static_cast<int64_t>(d.size()); ++r) plan.logits_rows.push_back(scheduled.first_token + known - 1 + r);
    plan.sequences.push_back(std::move(scheduled));
  }
  return plan;
}

// A step's output for a sequence applied: its last known token and the accepted drafts are now
// cached; the accepted drafts and the drawn token are known.
void apply(HandSequence& s, const core::SequenceOutput& out) {
  ASSERT_EQ(out.sequence_id, s.id);
  s.computed = static_cast<int64_t>(s.tokens.size()) + out.num_accepted();
  for (const core::SampledToken& t : out.tokens) s.tokens.push_back(t.token);
}

std::vector<float> row_of(const std::vector<float>& logits, size_t row, int64_t vocab) {
  return {logits.begin() + static_cast<long>(row * static_cast<size_t>(vocab)),
          logits.begin() + static_cast<long>((row + 1) * static_cast<size_t>(vocab))};
}

// The best logit minus the second best.
double top2_gap(const std::vector<float>& row) {
  std::vector<float> sorted = row;
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  return static_cast<double>(sorted[0]) - static_cast<double>(sorted[1]);
}

int32_t argmax(const std::vector<float>& row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());  // first max: lowest id
}

std::vector<HandSequence> hand_sequences(const model::ModelConfig& mc, int64_t first_id, uint64_t salt) {
  auto gen = gpu_test::rng(salt);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(mc.vocab_size - 1));
  std::vector<HandSequence> seqs;
  for (int64_t length : {7, 19, 33, 12}) {
    HandSequence s;
    s.id = first_id + static_cast<int64_t>(seqs.size());
    s.tokens.resize(static_cast<size_t>(length));
    for (int32_t& t : s.tokens) t = token(gen);
    s.num_prompt = length;
    s.seed = 1000 + static_cast<uint64_t>(s.id);
    seqs.push_back(std::move(s));
  }
  return seqs;
}

std::vector<HandSequence*> pointers(std::vector<HandSequence>& seqs) {
  std::vector<HandSequence*> out;
  for (HandSequence& s : seqs) out.push_back(&s);
  return out;
}

core::EngineConfig speculative_config(int32_t k) {
  core::EngineConfig config = small_config(/*eager=*/false);
  config.speculative = {.method = "ngram", .num_speculative_tokens = k, .ngram_min = 1, .ngram_max = 3};
  return config;
}

class CudaSpeculativeRunner : public ::testing::TestWithParam<Variant> {};

// The plain run: prefill, then greedy decodes one token at a time (decode graphs). The verify
// run, on new sequences with the same prompts in the same runner: prefill, then steps whose
// sequences carry drafts taken from the plain run's tokens, by turns all right, right then
// wrong, wrong at once, or none. Each emitted token must be the plain run's (or the plain run's
// choice was a near tie); a right draft must be accepted and the list must end at the first
// wrong one; each verify row's logits must be the plain row's within twice the bf16 tolerance
// (each run lies within the tolerance of the f32 reference).
TEST_P(CudaSpeculativeRunner, VerifiesDraftsAsThePlainRunDecodes) {
  const fs::path dir = make_tiny(GetParam());
  const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  const int64_t vocab = mc.vocab_size;
  const core::EngineConfig config = speculative_config(3);
  model::SafetensorsCheckpoint checkpoint(dir);
  CudaModelRunner gpu(model::load_weights_bf16(mc, checkpoint), config);
  ASSERT_TRUE(gpu.verifies_drafts());
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  int32_t next_block = 0;
  const int64_t kOutputs = 24;

  // The plain run; plain_rows[s][j]: the logits that chose output j of sequence s.
  std::vector<HandSequence> plain = hand_sequences(mc, 0, 21);
  std::vector<std::vector<std::vector<float>>> plain_rows(plain.size());
  const int64_t replays_before = gpu.graph_replays();
  for (int64_t j = 0; j < kOutputs; ++j) {
    const core::StepPlan plan =
        hand_step(pointers(plain), std::vector<std::vector<int32_t>>(plain.size()), greedy, config.block_size, next_block);
    gpu.launch(plan);
    const core::StepOutput out = gpu.wait();
    const std::vector<float> logits = gpu.last_logits(static_cast<int32_t>(plan.logits_rows.size()));
    ASSERT_EQ(out.sequences.size(), plain.size());
    for (size_t s = 0; s < plain.size(); ++s) {
      ASSERT_EQ(out.sequences[s].tokens.size(), 1u);
      EXPECT_EQ(out.sequences[s].num_draft_tokens, 0);
      plain_rows[s].push_back(row_of(logits, s, vocab));
      apply(plain[s], out.sequences[s]);
    }
  }
  EXPECT_GT(gpu.graph_replays(), replays_before) << "the plain decodes replay the decode graph";

  // The verify run.
  std::vector<HandSequence> spec = hand_sequences(mc, 100, 21);
  {
    const core::StepPlan plan =
        hand_step(pointers(spec), std::vector<std::vector<int32_t>>(spec.size()), greedy, config.block_size, next_block);
    gpu.launch(plan);
    const core::StepOutput out = gpu.wait();
    for (size_t s = 0; s < spec.size(); ++s) {
      EXPECT_EQ(out.sequences[s].tokens[0].token, plain[s].outputs()[0]) << "the same prefill gives the same token";
      apply(spec[s], out.sequences[s]);
    }
  }
  std::vector<bool> in_sync(spec.size(), true);
  int64_t rows_compared = 0, rows_exact = 0, accepted = 0, rejected = 0, near_ties = 0;
  double worst_error = 0.0, worst_shift = 0.0;  // relative, and the largest |logit difference|
  const double tolerance = 2 * logits_tolerance(mc);
  for (int round = 0; round < 64; ++round) {
    std::vector<HandSequence*> step_seqs;
    std::vector<size_t> index;
    std::vector<std::vector<int32_t>> drafts;
    std::vector<int64_t> right_drafts;  // leading drafts equal to the plain run's tokens
    for (size_t s = 0; s < spec.size(); ++s) {
      const int64_t n = spec[s].num_outputs();
      const std::vector<int32_t> truth = plain[s].outputs();
      if (!in_sync[s] || n + 1 > kOutputs) continue;
      const int64_t room = kOutputs - n - 1;  // drafts whose rows' plain tokens exist
      auto right = [&](int64_t i) { return truth[static_cast<size_t>(n + i)]; };
      auto wrong = [&](int64_t i) { return static_cast<int32_t>((right(i) + 1) % vocab); };
      std::vector<int32_t> d;
      int64_t leading = 0;
      switch ((round + static_cast<int>(s)) % 4) {
        case 0:  // all right
          for (int64_t i = 0; i < std::min<int64_t>(3, room); ++i) d.push_back(right(i));
          leading = static_cast<int64_t>(d.size());
          break;
        case 1:  // right, then wrong
          if (room >= 2) d = {right(0), wrong(1)}, leading = 1;
          break;
        case 2:  // wrong at once, then right ones that must not count
          if (room >= 3) d = {wrong(0), right(1), right(2)};
          break;
        case 3:  // none: a plain decode inside a verify step
          break;
      }
      step_seqs.push_back(&spec[s]);
      index.push_back(s);
      drafts.push_back(d);
      right_drafts.push_back(leading);
    }
    if (step_seqs.empty()) break;
    const core::StepPlan plan = hand_step(step_seqs, drafts, greedy, config.block_size, next_block);
    const int64_t replays = gpu.graph_replays();
    gpu.launch(plan);
    const core::StepOutput out = gpu.wait();
    const std::vector<float> logits = gpu.last_logits(static_cast<int32_t>(plan.logits_rows.size()));
    EXPECT_EQ(gpu.graph_replays(), replays + 1) << "round " << round << ": a verify step replays a decode graph";
    ASSERT_EQ(out.sequences.size(), step_seqs.size());
    size_t first_row = 0;
    for (size_t q = 0; q < step_seqs.size(); ++q) {
      const size_t s = index[q];
      const core::SequenceOutput& o = out.sequences[q];
      const int64_t n = spec[s].num_outputs();
      const std::vector<int32_t> truth = plain[s].outputs();
      const std::string where = "round " + std::to_string(round) + " sequence " + std::to_string(s) + " output " +
                                std::to_string(n);
      EXPECT_EQ(o.num_draft_tokens, static_cast<int64_t>(drafts[q].size())) << where;
      ASSERT_GE(o.tokens.size(), 1u) << where;
      ASSERT_LE(o.tokens.size(), drafts[q].size() + 1) << where;
      bool flipped = false;
      for (size_t j = 0; j < o.tokens.size(); ++j) {
        const size_t output = static_cast<size_t>(n) + j;
        const std::vector<float>& plain_row = plain_rows[s][output];
        const std::vector<float> spec_row = row_of(logits, first_row + j, vocab);
        const double error = gpu_test::relative_error(spec_row, plain_row);
        worst_error = std::max(worst_error, error);
        for (int64_t v = 0; v < vocab; ++v) {
          worst_shift = std::max(worst_shift, std::abs(static_cast<double>(spec_row[v]) - plain_row[v]));
        }
        EXPECT_LT(error, tolerance) << where << " row " << j << ": the verify row's logits are not the decode row's";
        ++rows_compared;
        if (o.tokens[j].token == truth[output]) {
          ++rows_exact;
          continue;
        }
        // Greedy on (nearly) the same logits: only a near tie may flip. A flipped row rejects its
        // draft and ends the list, unless it drew the draft itself (a wrong draft is right + 1).
        ++near_ties;
        EXPECT_LT(top2_gap(plain_row), kLogitTieBound)
            << where << " row " << j << ": token " << o.tokens[j].token << ", the plain run chose " << truth[output];
        const bool drew_the_draft = j < drafts[q].size() && o.tokens[j].token == drafts[q][j];
        EXPECT_TRUE(j + 1 == o.tokens.size() || drew_the_draft) << where << ": a token after a rejected draft";
        flipped = true;
        break;
      }
      if (flipped) {
        in_sync[s] = false;
      } else {
        EXPECT_EQ(o.num_accepted(), right_drafts[q]) << where << ": drafts equal to the plain tokens must be accepted "
                                                     << "up to the first wrong one";
      }
      accepted += o.num_accepted();
      rejected += static_cast<int64_t>(drafts[q].size()) - o.num_accepted();
      first_row += drafts[q].size() + 1;
      apply(spec[s], o);
    }
    EXPECT_EQ(first_row, plan.logits_rows.size());
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0);
  EXPECT_GE(static_cast<double>(rows_exact), kMinExactRowFraction * static_cast<double>(rows_compared))
      << rows_exact << " of " << rows_compared << " rows gave the plain run's token";
  std::printf("[verify vs decode] %-40s %lld/%lld rows exact, %lld near ties, %lld accepted, %lld rejected, worst "
              "logits rel. error %.2e (tolerance %.0e), largest logit shift %.4f\n",
              dir.filename().string().c_str(), static_cast<long long>(rows_exact), static_cast<long long>(rows_compared),
              static_cast<long long>(near_ties), static_cast<long long>(accepted), static_cast<long long>(rejected),
              worst_error, tolerance, worst_shift);
}

// Verify steps replay the decode graphs of their row buckets; --enforce-eager pads them to the
// same buckets and runs the same kernels: the two give identical tokens and bit-identical logits,
// step after step, with drafts of every length (0..3) mixed in a batch and forced acceptance
// (p = 0.5) so that sequences advance by different amounts.
TEST_P(CudaSpeculativeRunner, VerifyStepsInGraphsEqualEagerOnes) {
  const fs::path dir = make_tiny(GetParam());
  const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  const int64_t vocab = mc.vocab_size;
  model::SafetensorsCheckpoint checkpoint(dir);
  const model::Bf16ModelWeights weights = model::load_weights_bf16(mc, checkpoint);
  // Two runners in one process: each gets a fixed KV cache (the utilization budget is the GPU's).
  core::EngineConfig graph_config = speculative_config(3);
  graph_config.device.kv_cache_memory_bytes = int64_t{256} << 20;
  core::EngineConfig eager_config = graph_config;
  eager_config.device.enforce_eager = true;
  CudaModelRunner graphs(weights, graph_config);
  CudaModelRunner eager(weights, eager_config);
  ASSERT_EQ(graphs.graph_batch_sizes(), eager.graph_batch_sizes());
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  auto gen = gpu_test::rng(25);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<HandSequence> a = hand_sequences(mc, 0, 26), b = hand_sequences(mc, 0, 26);
  int32_t next_a = 0, next_b = 0;
  int64_t verify_steps = 0;
  for (int round = 0; round < 12; ++round) {
    std::vector<std::vector<int32_t>> drafts(a.size());
    if (round > 0) {
      for (size_t s = 0; s < a.size(); ++s) {
        drafts[s].resize(static_cast<size_t>((round + static_cast<int>(s)) % 4));
        for (int32_t& t : drafts[s]) t = token(gen);
      }
    }
    const float p = round > 0 ? 0.5f : -1.0f;
    const core::StepPlan plan_a = hand_step(pointers(a), drafts, greedy, 16, next_a, p);
    const core::StepPlan plan_b = hand_step(pointers(b), drafts, greedy, 16, next_b, p);
    const int64_t replays = graphs.graph_replays();
    graphs.launch(plan_a);
    const core::StepOutput out_a = graphs.wait();
    eager.launch(plan_b);
    const core::StepOutput out_b = eager.wait();
    if (plan_a.has_drafts()) {
      ++verify_steps;
      EXPECT_EQ(graphs.graph_replays(), replays + 1) << "round " << round;
    }
    EXPECT_EQ(eager.graph_replays(), 0);
    const int32_t rows = static_cast<int32_t>(plan_a.logits_rows.size());
    EXPECT_EQ(graphs.last_logits(rows), eager.last_logits(rows)) << "round " << round << ": logits differ";
    ASSERT_EQ(out_a.sequences.size(), out_b.sequences.size());
    for (size_t s = 0; s < a.size(); ++s) {
      ASSERT_EQ(out_a.sequences[s].tokens.size(), out_b.sequences[s].tokens.size()) << "round " << round;
      for (size_t j = 0; j < out_a.sequences[s].tokens.size(); ++j) {
        EXPECT_EQ(out_a.sequences[s].tokens[j].token, out_b.sequences[s].tokens[j].token) << "round " << round;
      }
      apply(a[s], out_a.sequences[s]);
      apply(b[s], out_b.sequences[s]);
    }
  }
  EXPECT_EQ(verify_steps, 11);
}

// Forced acceptance (benchmarks): p = 1 accepts every draft, whatever it is, and emits row k's
// own token after them; p = 0 accepts none; p = 0.5 accepts as the keyed draw says.
TEST_P(CudaSpeculativeRunner, ForcedAcceptanceFollowsTheKeyedRule) {
  const fs::path dir = make_tiny(GetParam());
  const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  const int64_t vocab = mc.vocab_size;
  const core::EngineConfig config = speculative_config(3);
  model::SafetensorsCheckpoint checkpoint(dir);
  CudaModelRunner gpu(model::load_weights_bf16(mc, checkpoint), config);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  int32_t next_block = 0;
  auto gen = gpu_test::rng(23);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<HandSequence> seqs = hand_sequences(mc, 0, 22);
  {
    const core::StepPlan plan =
        hand_step(pointers(seqs), std::vector<std::vector<int32_t>>(seqs.size()), greedy, config.block_size, next_block);
    gpu.launch(plan);
    const core::StepOutput out = gpu.wait();
    for (size_t s = 0; s < seqs.size(); ++s) apply(seqs[s], out.sequences[s]);
  }
  const std::vector<int64_t> ks = {3, 1, 0, 2};
  for (int round = 0; round < 6; ++round) {
    const float p = round % 3 == 0 ? 1.0f : round % 3 == 1 ? 0.0f : 0.5f;
    std::vector<std::vector<int32_t>> drafts;
    for (size_t s = 0; s < seqs.size(); ++s) {
      drafts.emplace_back(static_cast<size_t>(ks[(s + static_cast<size_t>(round)) % ks.size()]));
      for (int32_t& t : drafts.back()) t = token(gen);
    }
    const core::StepPlan plan = hand_step(pointers(seqs), drafts, greedy, config.block_size, next_block, p);
    gpu.launch(plan);
    const core::StepOutput out = gpu.wait();
    const std::vector<float> logits = gpu.last_logits(static_cast<int32_t>(plan.logits_rows.size()));
    size_t first_row = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const core::SequenceOutput& o = out.sequences[s];
      const std::vector<int32_t>& d = drafts[s];
      const std::string where = "p " + std::to_string(p) + " round " + std::to_string(round) + " sequence " +
                                std::to_string(s);
      // The keyed rule: draft i is accepted iff the draw of (seed, output count of row i) < p.
      size_t expected = 0;
      while (expected < d.size() &&
             forced_acceptance_uniform(seqs[s].seed, static_cast<uint64_t>(seqs[s].num_outputs()) + expected) < p) {
        ++expected;
      }
      if (p == 1.0f) {
        EXPECT_EQ(expected, d.size());
      }
      if (p == 0.0f) {
        EXPECT_EQ(expected, 0u);
      }
      EXPECT_EQ(o.num_draft_tokens, static_cast<int64_t>(d.size())) << where;
      ASSERT_EQ(o.tokens.size(), expected + 1) << where;
      for (size_t i = 0; i < expected; ++i) EXPECT_EQ(o.tokens[i].token, d[i]) << where << " draft " << i;
      // The last token is its own row's greedy draw (row `expected`, after the accepted drafts).
      EXPECT_EQ(o.tokens.back().token, argmax(row_of(logits, first_row + expected, vocab))) << where;
      first_row += d.size() + 1;
      apply(seqs[s], o);
    }
  }
}

// A plan with deferred tokens and drafts cannot be resolved (deferred tokens index one sampled
// row per sequence): refused.
TEST_P(CudaSpeculativeRunner, DeferredTokensWithDraftsAreRefused) {
  const fs::path dir = make_tiny(GetParam());
  const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  const core::EngineConfig config = speculative_config(2);
  model::SafetensorsCheckpoint checkpoint(dir);
  CudaModelRunner gpu(model::load_weights_bf16(mc, checkpoint), config);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  int32_t next_block = 0;
  std::vector<HandSequence> seqs = hand_sequences(mc, 0, 24);
  core::StepPlan prefill =
      hand_step(pointers(seqs), std::vector<std::vector<int32_t>>(seqs.size()), greedy, config.block_size, next_block);
  gpu.launch(prefill);
  const core::StepOutput out = gpu.wait();
  for (size_t s = 0; s < seqs.size(); ++s) apply(seqs[s], out.sequences[s]);
  core::StepPlan plan = hand_step(pointers(seqs), std::vector<std::vector<int32_t>>(seqs.size(), {1, 2}), greedy,
                                  config.block_size, next_block);
  plan.deferred_tokens.push_back({plan.sequences[0].first_token, 0});
  EXPECT_THROW(gpu.launch(plan), Error);
}

INSTANTIATE_TEST_SUITE_P(Architectures, CudaSpeculativeRunner,
                         ::testing::Values(Variant{"qwen3", "tiny-gpu"}, Variant{"deepseek_v3", "tiny-gpu-deepseek-all"}),
                         [](const auto& info) {
                           std::string name = info.param.arch + "_" + info.param.preset;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// ---------------------------------------------------------------------------------------------
// Through the engine: the n-gram drafter against no drafter.

struct EngineRun {
  std::vector<std::vector<int32_t>> tokens;               // [request]
  std::vector<std::vector<core::SampledToken>> logprobs;  // [request][token]
  engine::EngineStats stats;
  int64_t draft_graph_replays = 0;  // MTP drafting served by a graph
};

using DrafterFactory = std::function<std::unique_ptr<engine::Drafter>()>;

// `mtp`: the model's MTP module when speculative.method is "mtp" (the runner drafts with it).
// shared_gpu_tp > 0: that many tensor-parallel ranks sharing the GPU (eager) instead of one runner.
// make_drafter: the engine's drafter (a draft model's), built before the served runner as the CLI
// loads it; null: the one speculative names (n-gram) or the MTP runner's.
EngineRun run_engine(const model::Bf16ModelWeights& weights, const std::vector<std::vector<int32_t>>& prompts,
                     const std::vector<SamplingParams>& params, const core::SpeculativeConfig& speculative,
                     const model::Bf16MtpModule* mtp = nullptr, bool eager = false, int shared_gpu_tp = 0,
                     int dcp = 1, const DrafterFactory& make_drafter = nullptr, DType kv_cache_dtype = DType::kBF16) {
  core::EngineConfig config = shared_gpu_tp > 0 ? shared_gpu_config(shared_gpu_tp) : small_config(eager);
  config.device.decode_context_parallel_size = dcp;
  config.device.kv_cache_dtype = kv_cache_dtype;
  config.speculative = speculative;
  std::unique_ptr<engine::Drafter> drafter = make_drafter ? make_drafter() : nullptr;
  std::unique_ptr<ModelRunner> runner;
  const CudaModelRunner* raw_runner = nullptr;  // the engine owns it until the end of this function
  if (shared_gpu_tp > 0) {
    auto group = shared_gpu_runner(weights, config, shared_gpu_tp);
    config.num_blocks = group->num_blocks();
    runner = std::move(group);
  } else {
    auto single = std::make_unique<CudaModelRunner>(weights, config, CudaTpRank{}, mtp);
    raw_runner = single.get();
    config.num_blocks = single->num_blocks();
    runner = std::move(single);
  }
  if (mtp != nullptr) drafter = std::make_unique<engine::RunnerDrafter>();
  engine::EngineCore engine(config, std::move(runner), std::move(drafter));
  std::vector<std::shared_ptr<engine::OutputChannel>> channels;
  for (size_t i = 0; i < prompts.size(); ++i) {
    channels.push_back(std::make_shared<engine::OutputChannel>());
    engine.submit(prompts[i], params[i], channels.back());
  }
  for (int guard = 0; engine.has_work() && guard < 100000; ++guard) engine.step();
  EngineRun run;
  run.tokens.resize(prompts.size());
  run.logprobs.resize(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    while (auto delta = channels[i]->take(std::chrono::milliseconds(0))) {
      for (const auto& d : delta->completions) {
        run.tokens[i].insert(run.tokens[i].end(), d.token_ids.begin(), d.token_ids.end());
        run.logprobs[i].insert(run.logprobs[i].end(), d.logprobs.begin(), d.logprobs.end());
      }
    }
  }
  run.stats = engine.stats();
  run.draft_graph_replays = raw_runner != nullptr ? raw_runner->draft_graph_replays() : 0;
  return run;
}

// A random phrase of 3..8 tokens said 3..5 times: the n-gram lookups hit from the first step.
std::vector<int32_t> repetitive_prompt(std::mt19937_64& gen, int64_t vocab) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> phrase(static_cast<size_t>(std::uniform_int_distribution<int>(3, 8)(gen)));
  for (int32_t& t : phrase) t = token(gen);
  std::vector<int32_t> prompt;
  const int repeats = std::uniform_int_distribution<int>(3, 5)(gen);
  for (int r = 0; r < repeats; ++r) prompt.insert(prompt.end(), phrase.begin(), phrase.end());
  return prompt;
}

// Every request of `drafted` equals `plain`'s, or parts from it at a near tie of the plain run's
// draw (near_ties.h; the plain run asks for logprobs 3 to read the gaps, the drafted runs too:
// same params). Returns (requests identical, requests that diverge at a near tie).
std::pair<int, int> expect_plain_up_to_near_ties(const EngineRun& plain, const EngineRun& drafted,
                                                 const std::vector<SamplingParams>& params, const std::string& label,
                                                 double bound = kLogitTieBound) {
  int identical = 0, near_ties = 0;
  for (size_t r = 0; r < plain.tokens.size(); ++r) {
    const std::string what = label + " request " + std::to_string(r);
    EXPECT_EQ(plain.tokens[r].size(), static_cast<size_t>(params[r].max_tokens)) << what;
    if (expect_same_up_to_near_tie(plain.tokens[r], plain.logprobs[r], drafted.tokens[r], params[r], what, bound)) {
      ++identical;
    } else {
      ++near_ties;
    }
  }
  return {identical, near_ties};
}

// Six repetitive prompts (n-gram lookups hit from the first step), each greedy and seeded (top_k
// 2, temperature 0.8), asking for 3 logprobs (expect_plain_up_to_near_ties reads the gaps).
struct DraftedRequests {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
};
DraftedRequests repetitive_requests(const model::ModelConfig& mc) {
  auto gen = gpu_test::rng(31);
  constexpr float kTemperature = 0.8f;
  DraftedRequests r;
  for (int i = 0; i < 6; ++i) {
    const std::vector<int32_t> prompt = repetitive_prompt(gen, mc.vocab_size);
    for (bool seeded : {false, true}) {
      SamplingParams p;
      p.max_tokens = 32, p.ignore_eos = true, p.logprobs = 3;
      if (seeded) {
        p.temperature = kTemperature, p.top_k = 2, p.seed = 7000 + static_cast<uint64_t>(i);
      } else {
        p.temperature = 0.0f;
      }
      r.prompts.push_back(prompt);
      r.params.push_back(p);
    }
  }
  return r;
}

// How often the plain run's best two logits are that close (printed: the chance a bug hides).
void print_plain_near_ties(const EngineRun& plain) {
  int64_t plain_tokens = 0, plain_ties = 0;
  for (const auto& request : plain.logprobs) {
    for (const core::SampledToken& t : request) {
      if (t.top.size() < 2) continue;
      ++plain_tokens;
      plain_ties += static_cast<double>(t.top[0].logprob) - t.top[1].logprob < kLogitTieBound;
    }
  }
  std::printf("[plain] %lld of %lld tokens have their best two logits within %.2f\n", static_cast<long long>(plain_ties),
              static_cast<long long>(plain_tokens), kLogitTieBound);
}

// The n-gram drafter on repetitive prompts, on one runner or on shared_gpu_tp ranks sharing the
// GPU, with decode context parallelism over them when dcp > 1, over a cache of `kv` (each run
// against the plain run of the same kind).
void expect_ngram_drafts_give_the_plain_tokens(int shared_gpu_tp, const Variant& variant = {"qwen3", "tiny-gpu"},
                                               int dcp = 1, DType kv = DType::kBF16) {
  const fs::path dir = make_tiny(variant);
  const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  model::SafetensorsCheckpoint checkpoint(dir);
  const model::Bf16ModelWeights weights = model::load_weights_bf16(mc, checkpoint);
  const auto [prompts, params] = repetitive_requests(mc);
  std::string kind = shared_gpu_tp > 0 ? "tp " + std::to_string(shared_gpu_tp) + " " : "";
  if (dcp > 1) kind += "dcp " + std::to_string(dcp) + " " + variant.arch + " ";
  if (kv == DType::kF8E4M3) kind += "fp8 kv ";
  const EngineRun plain = run_engine(weights, prompts, params, {}, nullptr, false, shared_gpu_tp, dcp, nullptr, kv);
  print_plain_near_ties(plain);
  if (kv == DType::kF8E4M3) {  // the cache is FP8: its plain run's logprobs are not the bf16 cache's
    const EngineRun bf16 = run_engine(weights, prompts, params, {}, nullptr, false, shared_gpu_tp, dcp);
    bool differs = false;
    for (size_t r = 0; r < plain.logprobs.size(); ++r) {
      for (size_t j = 0; j < std::min(plain.logprobs[r].size(), bf16.logprobs[r].size()); ++j) {
        differs = differs || plain.logprobs[r][j].logprob != bf16.logprobs[r][j].logprob;
      }
    }
    EXPECT_TRUE(differs) << kind << ": the FP8 cache changed no logprob (is it FP8?)";
  }
  for (int32_t k : {1, 3}) {
    const core::SpeculativeConfig speculative{.method = "ngram", .num_speculative_tokens = k, .ngram_min = 1,
                                              .ngram_max = 3};
    const EngineRun drafted =
        run_engine(weights, prompts, params, speculative, nullptr, false, shared_gpu_tp, dcp, nullptr, kv);
    EXPECT_GT(drafted.stats.draft_tokens_accepted, 0) << kind << "k " << k << ": repetitive prompts must accept drafts";
    EXPECT_GT(drafted.stats.draft_tokens, drafted.stats.draft_tokens_accepted) << kind << "k " << k;
    const auto [identical, near_ties] =
        expect_plain_up_to_near_ties(plain, drafted, params, kind + "ngram k " + std::to_string(k),
                                     logit_tie_bound(mc.is_mla()));
    std::printf("[%sngram k %d] %d/%zu requests identical, %d diverge at a near tie; %lld of %lld drafts accepted\n",
                kind.c_str(), k, identical, prompts.size(), near_ties,
                static_cast<long long>(drafted.stats.draft_tokens_accepted),
                static_cast<long long>(drafted.stats.draft_tokens));
  }
}

TEST(CudaSpeculativeEngine, NgramDraftsGiveThePlainTokensUpToNearTies) { expect_ngram_drafts_give_the_plain_tokens(0); }

// Over the FP8 KV cache (--kv-cache-dtype fp8): a verify step writes the rows of its draft slots
// as a plain step writes its one row (each row quantized on its own), and rejected slots are
// written over later, so the drafted run gives the plain FP8 run's tokens up to near ties.
TEST(CudaSpeculativeEngine, NgramDraftsOverAnFp8KvCacheGiveThePlainTokensUpToNearTies) {
  expect_ngram_drafts_give_the_plain_tokens(0, {"qwen3", "tiny-gpu"}, 1, DType::kF8E4M3);
}

// The tensor-parallel runner verifies drafts as every rank's CudaModelRunner does, from the same
// gathered logits, so the ranks accept alike and rank 0's tokens are the group's: 2 ranks sharing
// the GPU through the host-staged communicator, against the same group's plain run.
TEST(CudaSpeculativeEngine, TensorParallelRanksVerifyNgramDraftsUpToNearTies) {
  expect_ngram_drafts_give_the_plain_tokens(2);
}

// A draft model drafting for 2 tensor-parallel ranks sharing the GPU: the whole draft model on one
// CudaModelRunner of its own beside the group (as the CLI loads it, before the served ranks, with
// a fixed cache share), its greedy drafts verified by the group: the plain group's tokens up to near
// ties, greedy and seeded, k 1 and 3, with another random model and with the target itself as the
// draft (whose greedy drafts the group must mostly accept).
TEST(CudaSpeculativeEngine, TensorParallelRanksVerifyDraftModelDraftsUpToNearTies) {
  const fs::path dir = make_tiny({"qwen3", "tiny-gpu"});
  const fs::path other_dir = fs::temp_directory_path() / "tachyon-gpu-qwen3-tiny-gpu-draft";
  if (!fs::exists(other_dir / "config.json")) {
    model::make_model({.arch = "qwen3", .preset = "tiny-gpu", .seed = 41, .out_dir = other_dir});
  }
  const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  auto load = [](const fs::path& d) {
    model::SafetensorsCheckpoint checkpoint(d);
    return model::load_weights_bf16(model::ModelConfig::from_dir(d), checkpoint);
  };
  const model::Bf16ModelWeights weights = load(dir), other = load(other_dir);
  const auto [prompts, params] = repetitive_requests(mc);
  const EngineRun plain = run_engine(weights, prompts, params, {}, nullptr, false, 2);
  print_plain_near_ties(plain);
  for (const auto& [draft, name] : {std::pair{&other, "other model"}, std::pair{&weights, "self"}}) {
    for (int32_t k : {1, 3}) {
      const DrafterFactory make_drafter = [&, draft = draft, k] {
        core::EngineConfig draft_config = small_config(/*eager=*/false);
        draft_config.device.kv_cache_memory_bytes = int64_t{32} << 20;
        auto runner = std::make_unique<CudaModelRunner>(*draft, draft_config);
        const int32_t blocks = runner->num_blocks();
        return std::make_unique<engine::DraftModelDrafter>(
            std::move(runner),
            engine::DraftModelOptions{.num_tokens = k,
                                      .num_blocks = blocks,
                                      .block_size = draft_config.block_size,
                                      .max_model_len = draft_config.scheduler.max_model_len,
                                      .max_num_batched_tokens = draft_config.scheduler.max_num_batched_tokens,
                                      .max_num_seqs = draft_config.scheduler.max_num_seqs},
            mc.vocab_size);
      };
      const core::SpeculativeConfig speculative{.method = "draft", .num_speculative_tokens = k,
                                                .draft_model = "(in memory)"};
      const EngineRun drafted = run_engine(weights, prompts, params, speculative, nullptr, false, 2, 1, make_drafter);
      const std::string what = std::string("tp 2 draft (") + name + ") k " + std::to_string(k);
      EXPECT_GT(drafted.stats.draft_tokens, 0) << what;
      if (draft == &weights) {
        EXPECT_GT(drafted.stats.draft_tokens_accepted * 2, drafted.stats.draft_tokens) << what << ": self-drafts";
      }
      const auto [identical, near_ties] = expect_plain_up_to_near_ties(plain, drafted, params, what);
      std::printf("[%s] %d/%zu requests identical, %d diverge at a near tie; %lld of %lld drafts accepted\n",
                  what.c_str(), identical, prompts.size(), near_ties,
                  static_cast<long long>(drafted.stats.draft_tokens_accepted),
                  static_cast<long long>(drafted.stats.draft_tokens));
    }
  }
}

// With decode context parallelism a verify step's 1 + k rows attend the split cache, each row
// masked by its GLOBAL position (a draft must not see the drafts after it on any rank): 2 ranks
// sharing the GPU, --dcp 2, latent attention with and without the sparse indexer.
TEST(CudaSpeculativeEngine, DecodeContextParallelRanksVerifyNgramDraftsUpToNearTies) {
  expect_ngram_drafts_give_the_plain_tokens(2, {"deepseek_v3", "tiny-gpu-deepseek-all"}, 2);
  expect_ngram_drafts_give_the_plain_tokens(2, {"glm_moe_dsa", "tiny-gpu-glm-all"}, 2);
}

// MTP drafted on the device by the runner (cuda_mtp_drafter.h): the plain engine's tokens up to
// near ties, graphs and eager, k 1 and 3, greedy and seeded; prompts long enough to prefill in
// chunks (the module's row at a chunk's end reads ScheduledSequence::next_token) and repeated
// (prefix hits: the module's cache layer comes with the blocks). A random module's drafts are
// rarely right, so with forced acceptance the test also requires that the chain drafts k tokens
// in most steps (it stops only where a sequence's blocks end). Acceptance on a trained module is
// the MTP canary's (scripts/gpu-test.sh). DeepSeek-V3, and with the sparse indexer DeepSeek-V3.2
// and GLM-5 (the module a full DSA layer); their contexts stay within the indexer's top-128, so
// a bf16 difference between a verify row and the plain decode cannot flip a token selection.
struct MtpVariant {
  Variant model;
  int first_prompt = 150;  // tokens of the first prompt (150: two chunks of the 128-token budget)
};

class CudaMtpEngine : public ::testing::TestWithParam<MtpVariant> {};

TEST_P(CudaMtpEngine, DraftsOnTheDeviceGiveThePlainTokensUpToNearTies) {
  const fs::path dir = make_tiny(GetParam().model);
  const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  model::SafetensorsCheckpoint checkpoint(dir);
  const model::Bf16ModelWeights weights = model::load_weights_bf16(mc, checkpoint);
  std::vector<model::MtpWeights> modules = model::load_mtp_weights(mc, checkpoint);
  ASSERT_EQ(modules.size(), 1u);
  const model::Bf16MtpModule module = model::to_bf16_module(mc, std::move(modules.front()));
  auto gen = gpu_test::rng(37);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(mc.vocab_size - 1));
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> prompt(static_cast<size_t>(i == 0 ? GetParam().first_prompt : 5 + 13 * i));
    for (int32_t& t : prompt) t = token(gen);
    for (bool seeded : {false, true}) {
      SamplingParams p;
      p.max_tokens = 24, p.ignore_eos = true, p.logprobs = 3;
      if (seeded) p.temperature = 0.8f, p.top_k = 2, p.seed = 9000 + static_cast<uint64_t>(i);
      if (!seeded) p.temperature = 0.0f;
      prompts.push_back(prompt);
      params.push_back(p);
    }
  }
  const EngineRun plain = run_engine(weights, prompts, params, {});
  for (const bool eager : {false, true}) {
    for (int32_t k : {1, 3}) {
      const std::string label = std::string(eager ? "eager" : "graphs") + " mtp k " + std::to_string(k);
      const core::SpeculativeConfig speculative{.method = "mtp", .num_speculative_tokens = k};
      const EngineRun drafted = run_engine(weights, prompts, params, speculative, &module, eager);
      EXPECT_GT(drafted.stats.draft_tokens, 0) << label << ": the runner proposed no drafts";
      if (eager) {
        EXPECT_EQ(drafted.draft_graph_replays, 0) << label;
      } else {
        EXPECT_GT(drafted.draft_graph_replays, 0) << label << ": no decode step drafted from a graph";
      }
      const auto [identical, near_ties] =
          expect_plain_up_to_near_ties(plain, drafted, params, label, logit_tie_bound(mc.is_mla()));
      std::printf("[%s] %d/%zu requests identical, %d diverge at a near tie; %lld of %lld drafts accepted\n",
                  label.c_str(), identical, prompts.size(), near_ties,
                  static_cast<long long>(drafted.stats.draft_tokens_accepted),
                  static_cast<long long>(drafted.stats.draft_tokens));
    }
  }
  // Forced acceptance: every draft stands, so each decode step gives 1 + (drafts it carried)
  // tokens; with chains of k = 3 nearly always, drafts are about 3/4 of the tokens decoded.
  core::SpeculativeConfig forced{.method = "mtp", .num_speculative_tokens = 3};
  forced.forced_acceptance = 1.0f;
  const EngineRun run = run_engine(weights, prompts, params, forced, &module);
  int64_t outputs = 0;
  for (const auto& request : run.tokens) outputs += static_cast<int64_t>(request.size());
  const int64_t decoded = outputs - static_cast<int64_t>(prompts.size());  // the first token is the prefill's
  EXPECT_GE(static_cast<double>(run.stats.draft_tokens), 0.6 * static_cast<double>(decoded))
      << run.stats.draft_tokens << " drafts for " << decoded << " decoded tokens: the chain stops early";
  std::printf("[mtp k 3 forced] %lld drafts for %lld decoded tokens\n", static_cast<long long>(run.stats.draft_tokens),
              static_cast<long long>(decoded));
  // Under forced acceptance the drafts are the output, so the drafting graphs must draft exactly
  // what the same passes draft eagerly (the same padded shapes): token for token, every request.
  const EngineRun eager = run_engine(weights, prompts, params, forced, &module, /*eager=*/true);
  EXPECT_GT(run.draft_graph_replays, 0);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(run.tokens[i], eager.tokens[i]) << "request " << i;
  EXPECT_EQ(run.stats.draft_tokens, eager.stats.draft_tokens);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaMtpEngine,
                         ::testing::Values(MtpVariant{{"deepseek_v3", "tiny-deepseek-mtp"}, 150},
                                           MtpVariant{{"deepseek_v32", "tiny-gpu-dsa-mtp"}, 90},
                                           MtpVariant{{"glm_moe_dsa", "tiny-gpu-glm-mtp"}, 90}),
                         [](const auto& info) { return info.param.model.arch; });

}  // namespace
}  // namespace tachyon::runner
