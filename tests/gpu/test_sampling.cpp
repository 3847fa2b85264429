// GPU sampler against the CPU sampler (kernels::cpu::sample_token, the spec): for the same logits and
// params the GPU must pick the same token in every seeded draw (hundreds per configuration, over
// vocabularies 97 .. 151936, flat and peaked rows, exact ties), report the same raw logprob
// (1e-4) and the same top list. Rows go through build_sampling_inputs and to_sampled_token, the
// runner's own path. Also pinned: the device exp equals glibc's expf bit for bit, the uniform
// equals kernels::cpu::uniform_for_step, and a row's result does not depend on the rest of its batch.
// Structured outputs' bit-packed masks (SamplingRow::allowed_row) give the CPU's tokens and logprobs.
// Needs a GPU: ctest -R gpu.sampling (scripts/gpu-test.sh); TACHYON_TEST_SEED replays a run.
#include "tachyon/kernels/cuda/sampling.h"

#include <memory>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/base/check.h"
#include "tachyon/kernels/sampling.h"
#include "tachyon/runner/cuda/sampling_inputs.h"

namespace tachyon::gpu_test {
namespace {

namespace kc = kernels::cuda;
using core::SamplingParams;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// One row to sample: its logits and everything sample_token reads.
struct Case {
  std::vector<float> logits;  // [vocab]
  SamplingParams params;
  uint64_t seed = 0;
  std::vector<int32_t> prompt, output;
  std::optional<int32_t> eos;
  std::vector<uint32_t> allowed;  // [ceil(vocab / 32)] structured-output mask; empty: none
};

SamplingParams params(float temperature, int32_t top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

core::StepPlan plan_of(const std::vector<Case>& cases) {
  core::StepPlan plan;
  for (const Case& c : cases) {
    core::ScheduledSequence s;
    s.sequence_id = static_cast<int64_t>(plan.sequences.size());
    s.sample = true;
    s.params = std::make_shared<const SamplingParams>(c.params);
    s.seed = c.seed;
    s.prompt_tokens = c.prompt;
    s.output_tokens = c.output;
    s.num_output_tokens = static_cast<int64_t>(c.output.size());
    s.eos_token_id = c.eos;
    if (!c.allowed.empty()) s.allowed_tokens = std::make_shared<const std::vector<uint32_t>>(c.allowed);
    plan.sequences.push_back(s);
  }
  return plan;
}

// Samples every case in one batch on the GPU, through the runner's host path.
std::vector<kc::SampledRow> sample_on_gpu(const std::vector<Case>& cases, runner::SamplingInputs* inputs_out = nullptr) {
  const int32_t rows = static_cast<int32_t>(cases.size());
  const int32_t vocab = static_cast<int32_t>(cases.front().logits.size());
  runner::SamplingInputs inputs = runner::build_sampling_inputs(plan_of(cases));
  std::vector<float> logits;
  for (const Case& c : cases) logits.insert(logits.end(), c.logits.begin(), c.logits.end());
  DeviceArray<float> d_logits = upload(logits);
  DeviceArray<kc::SamplingRow> d_rows = upload(inputs.rows);
  DeviceArray<int32_t> d_tokens(std::max<size_t>(inputs.tokens.size(), 1));
  if (!inputs.tokens.empty()) d_tokens.upload(inputs.tokens);
  const size_t workspace_bytes = kc::sampling_workspace_bytes(rows, vocab);
  DeviceArray<uint8_t> workspace(workspace_bytes);  // poisoned: the kernel must not need zeros
  DeviceArray<kc::SampledRow> out(static_cast<size_t>(rows));
  DeviceArray<uint32_t> d_allowed(std::max<size_t>(inputs.allowed.size(), 1));
  if (!inputs.allowed.empty()) d_allowed.upload(inputs.allowed);
  kc::sample(out.data(), d_logits.data(), d_rows.data(), d_tokens.data(), rows, vocab, workspace.data(), workspace_bytes,
             nullptr, inputs.allowed.empty() ? nullptr : d_allowed.data());
  TACHYON_CUDA_CHECK(cudaGetLastError());
  std::vector<kc::SampledRow> result = out.download();
  if (inputs_out != nullptr) *inputs_out = std::move(inputs);
  return result;
}

void expect_logprob_near(float gpu, float cpu, const std::string& what) {
  if (std::isinf(cpu)) EXPECT_EQ(gpu, cpu) << what;
  else EXPECT_NEAR(gpu, cpu, 1e-4) << what;
}

// Runs the batch on the GPU and each case through sample_token; returns the token mismatches
// (each also reported, the first few in full).
int expect_same_as_cpu(const std::vector<Case>& cases, const std::string& what) {
  // TACHYON_TEST_TRACE=1 names each batch as it starts (a batch that never ends shows last).
  static const bool trace = std::getenv("TACHYON_TEST_TRACE") != nullptr;
  if (trace) std::fprintf(stderr, "[batch] %s (%zu rows)\n", what.c_str(), cases.size());
  runner::SamplingInputs inputs;
  const std::vector<kc::SampledRow> gpu = sample_on_gpu(cases, &inputs);
  if (trace) std::fprintf(stderr, "[batch] sampled on the GPU\n");
  // The CPU's draws, rows spread over every core (a top-p over a 152K vocabulary sorts the row:
  // the CPU side was most of this binary's time); the comparisons below stay on this thread.
  std::vector<std::optional<core::SampledToken>> cpu_rows(cases.size());
  std::atomic<size_t> next_row{0};
  const auto draw_rows = [&] {
    for (size_t r = next_row++; r < cases.size(); r = next_row++) {
      const Case& c = cases[r];
      std::vector<float> logits = c.logits;
      try {
        kernels::cpu::SamplingContext context{c.prompt, c.output, c.seed, c.eos};
        context.allowed_tokens = c.allowed;
        cpu_rows[r] = kernels::cpu::sample_token(logits, c.params, context);
      } catch (const Error&) {
      }
    }
  };
  std::vector<std::thread> helpers;
  const size_t threads = std::min<size_t>(cases.size(), std::max(1u, std::thread::hardware_concurrency()));
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(draw_rows);
  draw_rows();
  for (std::thread& helper : helpers) helper.join();
  int mismatches = 0;
  for (size_t r = 0; r < cases.size(); ++r) {
    const Case& c = cases[r];
    const std::string where = what + " row " + std::to_string(r) + " seed " + std::to_string(c.seed) + " step " +
                              std::to_string(c.output.size());
    const std::optional<core::SampledToken>& cpu = cpu_rows[r];
    if (!cpu) {  // the CPU refuses (no finite logit): the GPU must report an error, not a token
      EXPECT_EQ(gpu[r].token, -1) << where;
      EXPECT_NE(gpu[r].error, kc::kSamplingOk) << where;
      EXPECT_THROW(runner::to_sampled_token(gpu[r], inputs.rows[r]), Error) << where;
      continue;
    }
    if (gpu[r].error != kc::kSamplingOk || gpu[r].token != cpu->token) {
      if (++mismatches <= 5) ADD_FAILURE() << where << ": GPU token " << gpu[r].token << " (error " << gpu[r].error << "), CPU " << cpu->token;
      continue;
    }
    const core::SampledToken got = runner::to_sampled_token(gpu[r], inputs.rows[r]);
    expect_logprob_near(got.logprob, cpu->logprob, where + " logprob");
    EXPECT_EQ(got.top.size(), cpu->top.size()) << where;
    for (size_t i = 0; i < std::min(got.top.size(), cpu->top.size()); ++i) {
      EXPECT_EQ(got.top[i].token, cpu->top[i].token) << where << " top " << i;
      expect_logprob_near(got.top[i].logprob, cpu->top[i].logprob, where + " top " + std::to_string(i));
    }
  }
  EXPECT_EQ(mismatches, 0) << what;
  return mismatches;
}

// Logits of one row: gaussian * scale, or with ties (quantized to quarters, then scaled).
std::vector<float> make_logits(std::mt19937_64& gen, int32_t vocab, float scale, bool ties) {
  std::vector<float> logits = random_floats(gen, static_cast<size_t>(vocab), 1.0f);
  for (float& l : logits) l = (ties ? std::round(l * 4.0f) / 4.0f : l) * scale;
  return logits;
}

// A batch: `distinct` logit rows, each drawn with several seeds at several steps.
std::vector<Case> make_batch(std::mt19937_64& gen, int32_t vocab, int32_t rows, int32_t distinct, float scale,
                             bool ties, const SamplingParams& p) {
  std::vector<std::vector<float>> logits;
  for (int32_t d = 0; d < distinct; ++d) logits.push_back(make_logits(gen, vocab, scale, ties));
  std::vector<Case> cases(static_cast<size_t>(rows));
  for (int32_t r = 0; r < rows; ++r) {
    Case& c = cases[static_cast<size_t>(r)];
    c.logits = logits[static_cast<size_t>(r % distinct)];
    c.params = p;
    c.seed = gen();
    c.output.resize(gen() % 40);  // the step; ids matter only to penalties (set by the caller)
    for (int32_t& id : c.output) id = static_cast<int32_t>(gen() % static_cast<uint64_t>(vocab));
  }
  return cases;
}

const std::vector<int32_t> kVocabs = {97, 1000, 32000, 151936};

struct Config {
  const char* name;
  SamplingParams params;
};

std::vector<Config> filter_configs() {
  std::vector<Config> configs = {
      {"greedy", params(0.0f)},
      {"temperature 0.5", params(0.5f)},
      {"temperature 1", params(1.0f)},
      {"temperature 1.7", params(1.7f)},
      {"top_k 1", params(1.0f, 1)},
      {"top_k 5", params(1.0f, 5)},
      {"top_k 50", params(0.8f, 50)},
      {"top_k 2048", params(1.0f, 2048)},
      {"top_k 3000", params(1.0f, 3000)},
      {"top_p 0.1", params(1.0f, 0, 0.1f)},
      {"top_p 0.9", params(1.0f, 0, 0.9f)},
      {"top_p 1.0", params(1.0f, 0, 1.0f)},
      {"min_p 0.05", params(1.0f, 0, 1.0f, 0.05f)},
      {"min_p 0.3", params(1.3f, 0, 1.0f, 0.3f)},
      {"top_k 50 top_p 0.9 min_p 0.05", params(0.8f, 50, 0.9f, 0.05f)},
      {"top_k 5000 top_p 0.95", params(1.2f, 5000, 0.95f)},
      {"top_p 0.5 min_p 0.1", params(0.7f, 0, 0.5f, 0.1f)},
      {"top_k 40 top_p 0.3", params(1.0f, 40, 0.3f)},
  };
  const int32_t logprobs[] = {-1, 0, 1, 5, 20};
  for (size_t i = 0; i < configs.size(); ++i) configs[i].params.logprobs = logprobs[i % 5];
  return configs;
}

TEST(GpuSampling, UniformMatchesHost) {
  std::mt19937_64 gen = rng(1);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t seed = i < 100 ? static_cast<uint64_t>(i) : gen(), step = i % 7 == 0 ? gen() : gen() % 4096;
    ASSERT_EQ(kc::sampling_uniform(seed, step), kernels::cpu::uniform_for_step(seed, step)) << seed << " " << step;
  }
}

// The exp of the filters and the draw must be glibc's expf exactly; every x the sampler feeds it
// lies in [-104, 0] (and below, where both give 0).
TEST(GpuSampling, ExpMatchesGlibcOnHostAndDevice) {
  std::vector<float> xs;
  for (uint32_t bits = 0x80000000u; bits <= 0xc2d00000u; bits += 61) {  // -0 .. -104, every 61st float
    float x;
    std::memcpy(&x, &bits, 4);
    ASSERT_EQ(kc::sampling_expf(x), std::exp(x)) << "x = " << x;
    if (bits % 16 < 4 || x < -86.0f) xs.push_back(x);  // a quarter of them, all of the underflow range
  }
  for (float x : {0.0f, -0.0f, -kInf, 1.0f, 88.0f, 89.0f, -103.5f, -104.5f, -1e-30f, -1e-45f}) xs.push_back(x);
  DeviceArray<float> in = upload(xs);
  DeviceArray<float> out(xs.size());
  kc::sampling_expf_device(out.data(), in.data(), static_cast<int64_t>(xs.size()), nullptr);
  const std::vector<float> got = out.download();
  int wrong = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (got[i] != std::exp(xs[i]) && ++wrong <= 5) ADD_FAILURE() << "x = " << xs[i] << ": device " << got[i];
  }
  EXPECT_EQ(wrong, 0);
}

TEST(GpuSampling, FiltersMatchCpuTokenForToken) {
  std::mt19937_64 gen = rng(2);
  for (int32_t vocab : kVocabs) {
    for (const Config& config : filter_configs()) {
      for (float scale : {0.1f, 1.0f, 10.0f}) {
        const int32_t rows = vocab >= 32000 ? 48 : 64;
        const std::string what = std::string(config.name) + " vocab " + std::to_string(vocab) + " scale " +
                                 std::to_string(scale);
        expect_same_as_cpu(make_batch(gen, vocab, rows, 8, scale, false, config.params), what);
      }
    }
  }
}

// Quantized logits: many exact ties, so top-k, top-p, greedy and the top-N list must all split
// ties the CPU's way (lower id first).
TEST(GpuSampling, TiesGoToLowerIds) {
  std::mt19937_64 gen = rng(3);
  for (int32_t vocab : {97, 1000, 32000}) {
    for (const Config& config : filter_configs()) {
      for (float scale : {0.25f, 1.0f, 4.0f}) {
        const std::string what = std::string(config.name) + " ties vocab " + std::to_string(vocab) + " scale " +
                                 std::to_string(scale);
        expect_same_as_cpu(make_batch(gen, vocab, 64, 4, scale, true, config.params), what);
      }
    }
  }
  // All logits equal: greedy and top-k 1 give id 0, the top list the first ids.
  std::vector<Case> flat = make_batch(gen, 1000, 4, 1, 1.0f, false, params(0.0f));
  flat[0].logits.assign(1000, 0.5f);
  flat[1] = flat[0], flat[1].params = params(1.0f, 1), flat[1].params.logprobs = 20;
  flat[2] = flat[0], flat[2].params = params(1.0f, 7, 0.2f), flat[2].params.logprobs = 5;
  flat[3] = flat[0], flat[3].params = params(2.0f, 0, 0.01f);
  expect_same_as_cpu(flat, "all equal");
  // 32000 equal logits: top-k and top-N ties overflow the shared list and take the vocab-wide path.
  std::vector<Case> wide = make_batch(gen, 32000, 5, 1, 1.0f, false, params(0.0f));
  for (Case& c : wide) c.logits.assign(32000, 0.5f);
  for (size_t i = 0; i < 32000; i += 3) wide[4].logits[i] = 0.25f;
  wide[0].params.logprobs = 20;
  wide[1].params = params(1.0f, 7, 0.2f), wide[1].params.logprobs = 5;
  wide[2].params = params(1.0f, 3000), wide[2].params.logprobs = 1;
  wide[3].params = params(2.0f, 0, 0.01f);
  wide[4].params = params(1.0f, 100, 0.5f), wide[4].params.logprobs = 20;
  expect_same_as_cpu(wide, "all equal, vocab 32000");
}

TEST(GpuSampling, PenaltiesMatchCpu) {
  std::mt19937_64 gen = rng(4);
  struct Penalty {
    float repetition, frequency, presence;
  };
  const Penalty penalties[] = {{1.3f, 0, 0}, {0.8f, 0, 0}, {1, 0.5f, 0}, {1, -0.5f, 0}, {1, 0, 0.7f}, {1.2f, 0.3f, -0.4f}};
  for (int32_t vocab : kVocabs) {
    for (const Penalty& pen : penalties) {
      for (float temperature : {0.0f, 1.0f}) {
        SamplingParams p = params(temperature, temperature > 0 ? 50 : 0, 0.95f);
        p.repetition_penalty = pen.repetition, p.frequency_penalty = pen.frequency, p.presence_penalty = pen.presence;
        p.logprobs = 3;
        std::vector<Case> cases = make_batch(gen, vocab, 32, 8, 2.0f, false, p);
        for (Case& c : cases) {  // repeats: ids from a small set, so counts reach 10+
          const int32_t pool = std::min(vocab, 64);
          c.prompt.resize(gen() % 300);
          for (int32_t& id : c.prompt) id = static_cast<int32_t>(gen() % static_cast<uint64_t>(vocab));
          c.output.resize(gen() % 200);
          for (int32_t& id : c.output) id = static_cast<int32_t>(gen() % static_cast<uint64_t>(pool));
          for (int32_t id = 0; id < pool; ++id) c.logits[static_cast<size_t>(id)] += 3.0f;  // penalties decide
        }
        const std::string what = "penalty " + std::to_string(pen.repetition) + "/" + std::to_string(pen.frequency) +
                                 "/" + std::to_string(pen.presence) + " T " + std::to_string(temperature) +
                                 " vocab " + std::to_string(vocab);
        expect_same_as_cpu(cases, what);
      }
    }
  }
}

TEST(GpuSampling, MinTokensMasksStopIdsAndEos) {
  std::mt19937_64 gen = rng(5);
  for (float temperature : {0.0f, 1.0f}) {
    SamplingParams p = params(temperature, 0, 1.0f);
    p.min_tokens = 5;
    p.stop_token_ids = {3, 7};
    p.logprobs = 2;
    std::vector<Case> cases = make_batch(gen, 1000, 24, 4, 1.0f, false, p);
    for (size_t r = 0; r < cases.size(); ++r) {
      Case& c = cases[r];
      c.output.resize(r % 8);  // under and over min_tokens
      c.eos = 11;
      c.params.ignore_eos = r % 3 == 0;
      for (int32_t id : {3, 7, 11}) c.logits[static_cast<size_t>(id)] = 30.0f;  // would win unmasked
    }
    expect_same_as_cpu(cases, "min_tokens T " + std::to_string(temperature));
  }
}

TEST(GpuSampling, NanInfAndEmptyRows) {
  std::mt19937_64 gen = rng(6);
  for (int32_t vocab : {97, 32000}) {
    for (const Config& config : filter_configs()) {
      std::vector<Case> cases = make_batch(gen, vocab, 12, 12, 1.0f, false, config.params);
      for (size_t r = 0; r < cases.size(); ++r) {
        std::vector<float>& l = cases[r].logits;
        for (size_t i = 0; i < l.size(); i += 1 + r) l[i] = (i / (1 + r)) % 3 == 0 ? kNaN : -kInf;
        if (r % 4 == 1) l[l.size() / 2] = kInf, l[l.size() / 3] = kInf;  // two +inf: a tie at FLT_MAX
        if (r % 4 == 2) l[5] = kInf;
        if (r == 3) l.assign(l.size(), -kInf);  // nothing finite: an error on both sides
        if (r == 7) l.assign(l.size(), kNaN);
        if (r == 11) l.assign(l.size(), -kInf), l[l.size() - 1] = -3.0f;  // exactly one finite
      }
      expect_same_as_cpu(cases, std::string("nan/inf ") + config.name + " vocab " + std::to_string(vocab));
    }
  }
  // Masking removes the only finite logits: an error, as on the CPU.
  std::vector<Case> masked = make_batch(gen, 97, 1, 1, 1.0f, false, params(1.0f));
  masked[0].logits.assign(97, -kInf);
  masked[0].logits[3] = 1.0f;
  masked[0].params.min_tokens = 1, masked[0].params.stop_token_ids = {3};
  masked[0].output.clear();
  expect_same_as_cpu(masked, "masked to nothing");
}

// A row's result is a function of that row alone: alone, first, last or among others, bit for bit.
TEST(GpuSampling, BatchInvariant) {
  std::mt19937_64 gen = rng(7);
  std::vector<Case> cases;
  for (const Config& config : filter_configs()) {
    std::vector<Case> some = make_batch(gen, 32000, 2, 2, 1.0f, false, config.params);
    cases.insert(cases.end(), some.begin(), some.end());
  }
  cases[1].params.repetition_penalty = 1.2f, cases[1].prompt = {1, 2, 3, 2};
  const std::vector<kc::SampledRow> together = sample_on_gpu(cases);
  auto same = [](const kc::SampledRow& a, const kc::SampledRow& b) {
    return a.token == b.token && a.error == b.error && std::memcmp(&a.logprob, &b.logprob, 4) == 0 &&
           a.num_top == b.num_top && std::memcmp(a.top_ids, b.top_ids, 4 * a.num_top) == 0 &&
           std::memcmp(a.top_logprobs, b.top_logprobs, 4 * a.num_top) == 0;
  };
  for (size_t r = 0; r < cases.size(); ++r) {
    const std::vector<kc::SampledRow> alone = sample_on_gpu({cases[r]});
    EXPECT_TRUE(same(alone[0], together[r])) << "row " << r << " alone";
    std::vector<Case> reversed(cases.rbegin(), cases.rend());
    if (r == 0) {
      const std::vector<kc::SampledRow> back = sample_on_gpu(reversed);
      for (size_t q = 0; q < cases.size(); ++q) EXPECT_TRUE(same(back[cases.size() - 1 - q], together[q])) << q;
    }
  }
}

// Structured outputs: a row's mask sets refused ids to -inf before everything else (raw logprobs
// included), on awkward vocabularies, dense and sparse masks, one allowed id, none (an error on
// both), with filters, penalties and min_tokens; rows without a mask share the batch.
TEST(GpuSampling, StructuredOutputMaskMatchesCpu) {
  std::mt19937_64 gen = rng(23);
  for (int32_t vocab : {97, 1000, 32000, 151936}) {
    const size_t words = (static_cast<size_t>(vocab) + 31) / 32;
    for (const Config& config : filter_configs()) {
      std::vector<Case> cases = make_batch(gen, vocab, 12, 4, 3.0f, false, config.params);
      for (size_t r = 0; r < cases.size(); ++r) {
        Case& c = cases[r];
        if (r % 6 == 5) continue;  // no mask
        c.allowed.assign(words, 0u);
        const uint64_t density = r % 6 == 0 ? 2 : r % 6 == 1 ? 100 : 1000;  // 50%, 1%, 0.1% of ids
        for (int32_t id = 0; id < vocab; ++id) {
          if (gen() % density == 0) c.allowed[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
        }
        if (r % 6 == 3) {  // exactly one id
          std::fill(c.allowed.begin(), c.allowed.end(), 0u);
          const int32_t id = static_cast<int32_t>(gen() % static_cast<uint64_t>(vocab));
          c.allowed[static_cast<size_t>(id) >> 5] = 1u << (id & 31);
        }
        if (r % 6 == 4 && vocab == 97) std::fill(c.allowed.begin(), c.allowed.end(), 0u);  // none: an error
        if (r % 6 == 2) {  // with penalties and min_tokens (EOS masked on top of the grammar's mask)
          c.params.repetition_penalty = 1.3f;
          c.params.frequency_penalty = 0.5f;
          c.prompt = {1, 2, 3};
          c.eos = 0;
          c.params.min_tokens = 50;
          c.allowed[0] |= 1u;  // EOS allowed by the mask, refused by min_tokens
        }
      }
      expect_same_as_cpu(cases, std::string(config.name) + " masked vocab " + std::to_string(vocab));
    }
  }
}

TEST(GpuSampling, BuildSamplingInputsFromPlan) {
  SamplingParams plain = params(0.7f, 40, 0.9f, 0.05f);
  plain.logprobs = 3;
  SamplingParams penalized = params(1.0f);
  penalized.repetition_penalty = 1.1f, penalized.min_tokens = 4, penalized.stop_token_ids = {9, 8};
  SamplingParams frequency = params(0.0f);
  frequency.frequency_penalty = 0.5f, frequency.min_tokens = 9, frequency.ignore_eos = true;
  const std::vector<int32_t> prompt = {5, 6, 7}, outputs = {1, 2};

  core::StepPlan plan;
  auto add = [&](bool sample, const SamplingParams* p, uint64_t seed) {
    core::ScheduledSequence s;
    s.sample = sample, s.seed = seed, s.prompt_tokens = prompt, s.output_tokens = outputs, s.eos_token_id = 2;
    if (p != nullptr) s.params = std::make_shared<const SamplingParams>(*p);
    s.num_output_tokens = static_cast<int64_t>(outputs.size());
    plan.sequences.push_back(s);
  };
  add(false, nullptr, 0);  // a prefill chunk that samples nothing
  add(true, &plain, 11);
  add(true, &penalized, 12);
  add(true, &frequency, 13);
  const runner::SamplingInputs in = runner::build_sampling_inputs(plan);
  ASSERT_EQ(in.rows.size(), 3u);
  const kc::SamplingRow& a = in.rows[0];
  EXPECT_EQ(a.temperature, 0.7f);
  EXPECT_EQ(a.top_k, 40);
  EXPECT_EQ(a.top_p, 0.9f);
  EXPECT_EQ(a.min_p, 0.05f);
  EXPECT_EQ(a.num_logprobs, 3);
  EXPECT_EQ(a.seed, 11u);
  EXPECT_EQ(a.step, 2u);
  EXPECT_EQ(a.num_prompt_tokens + a.num_output_tokens + a.num_masked, 0);
  const kc::SamplingRow& b = in.rows[1];  // repetition: prompt + outputs; min_tokens: stops + EOS
  EXPECT_EQ(b.repetition_penalty, 1.1f);
  EXPECT_EQ(b.num_prompt_tokens, 3);
  EXPECT_EQ(b.num_output_tokens, 2);
  EXPECT_EQ(b.num_masked, 3);
  const kc::SamplingRow& c = in.rows[2];  // frequency only: outputs alone; ignore_eos: stops only (none)
  EXPECT_EQ(c.num_prompt_tokens, 0);
  EXPECT_EQ(c.num_output_tokens, 2);
  EXPECT_EQ(c.num_masked, 0);
  EXPECT_EQ(c.num_logprobs, -1);
  auto slice = [&](int32_t begin, int32_t n) {
    return std::vector<int32_t>(in.tokens.begin() + begin, in.tokens.begin() + begin + n);
  };
  EXPECT_EQ(slice(b.history_begin, 5), (std::vector<int32_t>{5, 6, 7, 1, 2}));
  EXPECT_EQ(slice(b.masked_begin, 3), (std::vector<int32_t>{9, 8, 2}));
  EXPECT_EQ(slice(c.history_begin, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(in.tokens.size(), 10u);

  kc::SampledRow failed;
  failed.token = -1, failed.error = kc::kSamplingNoFiniteLogit;
  EXPECT_THROW(runner::to_sampled_token(failed, a), Error);
  kc::SampledRow ok;
  ok.token = 4, ok.logprob = -1.5f, ok.num_top = 1, ok.top_ids[0] = 4, ok.top_logprobs[0] = -1.5f;
  const core::SampledToken t = runner::to_sampled_token(ok, a);
  EXPECT_EQ(t.token, 4);
  EXPECT_EQ(t.logprob, -1.5f);
  ASSERT_EQ(t.top.size(), 1u);
  EXPECT_EQ(runner::to_sampled_token(ok, c).logprob, 0.0f);  // no logprobs asked: 0, as on the CPU
}

// Deferred tokens (asynchronous scheduling): exactly the listed entries take the listed rows'
// tokens, only the first *count pairs count, and the rest of token_ids stays as it was.
TEST(GpuSampling, ResolveDeferredTokensWritesOnlyTheListedEntries) {
  std::mt19937_64 gen = rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    const int32_t num_tokens = std::uniform_int_distribution<int32_t>(1, 600)(gen);
    const int32_t num_rows = std::uniform_int_distribution<int32_t>(1, 300)(gen);
    std::vector<int32_t> tokens(static_cast<size_t>(num_tokens));
    for (int32_t& t : tokens) t = std::uniform_int_distribution<int32_t>(0, 1 << 20)(gen);
    std::vector<kc::SampledRow> rows(static_cast<size_t>(num_rows));
    for (kc::SampledRow& r : rows) r.token = std::uniform_int_distribution<int32_t>(0, 151935)(gen);
    // Distinct target entries (as a plan has), random source rows; a tail past the count.
    std::vector<int32_t> targets(static_cast<size_t>(num_tokens));
    std::iota(targets.begin(), targets.end(), 0);
    std::shuffle(targets.begin(), targets.end(), gen);
    const int32_t max_count = std::min(num_tokens, 256);
    const int32_t count = std::uniform_int_distribution<int32_t>(0, max_count)(gen);
    std::vector<int32_t> pairs;
    for (int32_t i = 0; i < max_count; ++i) {
      pairs.push_back(targets[static_cast<size_t>(i)]);
      pairs.push_back(std::uniform_int_distribution<int32_t>(0, num_rows - 1)(gen));
    }
    std::vector<int32_t> expected = tokens;
    for (int32_t i = 0; i < count; ++i) {
      expected[static_cast<size_t>(pairs[2 * i])] = rows[static_cast<size_t>(pairs[2 * i + 1])].token;
    }
    DeviceArray<int32_t> d_tokens = upload(tokens), d_pairs = upload(pairs), d_count = upload(std::vector<int32_t>{count});
    DeviceArray<kc::SampledRow> d_rows = upload(rows);
    kc::resolve_deferred_tokens(d_tokens.data(), d_pairs.data(), d_count.data(), max_count, d_rows.data(), nullptr);
    EXPECT_EQ(d_tokens.download(), expected) << "trial " << trial << ": " << count << " of " << max_count;
  }
}

}  // namespace
}  // namespace tachyon::gpu_test
