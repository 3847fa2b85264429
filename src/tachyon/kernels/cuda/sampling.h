// Next-token sampling on the GPU, one CTA per row, the whole batch in one launch (two for a
// vocabulary over 4096 ids: the first pass of rows without penalized or masked ids runs split
// over chunks in parallel CTAs first, sampling.cu's row_stats_kernel). The spec is the
// CPU sampler (engine/sampler.h): same order of operations, same stateless draw, same token for
// the same logits and parameters, same raw logprobs and top list. This header knows nothing of
// engine/: the runner turns SamplingParams into SamplingRow (runner/cuda/sampling_inputs.h).
//
// The one non-obvious decision: exact agreement needs the same exp as the CPU. The CPU's filters
// and draw compare sums of std::exp(float) (glibc's expf) against thresholds, and CUDA's expf
// differs from it by an ulp or two often enough that a flat 152k-token row would pick another
// token every few thousand draws. So the device evaluates glibc's own algorithm (sampling_expf,
// the x86-64 FMA variant: table of 32, cubic, in double), bit for bit.
//
// Filters never sort the vocabulary: top-k, top-p and the top-N logprobs find a threshold key by
// radix histograms of counts or masses, verified with exact double sums; ties at the threshold go
// to the lowest ids, as on the CPU; the draw is an id-ascending block scan. Details: sampling.cu.
//
// Tests: tests/gpu/test_sampling.cpp (GPU against kernels::cpu::sample_token; ctest -R gpu.sampling).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

inline constexpr int32_t kMaxSampledLogprobs = 20;  // SamplingParams::logprobs is at most 20

// How one row is sampled: SamplingParams flattened, plus where its token lists are in `tokens`.
// Plain data, copied into the staging buffer as is (8-byte aligned there).
struct SamplingRow {
  float temperature = 1.0f;         // 0: greedy (argmax, ties to the lowest id)
  float top_p = 1.0f;               // (0, 1]; 1 disables
  float min_p = 0.0f;               // [0, 1]; 0 disables
  float repetition_penalty = 1.0f;  // 1 disables
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t top_k = 0;                // 0 disables
  int32_t num_logprobs = -1;        // -1: none; 0..20: the sampled token's raw logprob and the top N
  uint64_t seed = 0;                // the draw's uniform is sampling_uniform(seed, step)
  uint64_t step = 0;                // outputs generated so far
  // tokens[history_begin, + num_prompt_tokens) prompt ids, then num_output_tokens output ids:
  // read only for penalties (empty when none is active; the prompt only for repetition).
  int32_t history_begin = 0;
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  // tokens[masked_begin, + num_masked): ids set to -inf first (min_tokens: stop ids and EOS).
  int32_t masked_begin = 0;
  int32_t num_masked = 0;
  // Structured outputs: allowed[allowed_row * ceil(vocab / 32) ...] is this row's bit-packed mask
  // (bit id % 32 of word id / 32 set: id may be sampled); every other id is -inf before anything
  // else, raw logprobs included, as on the CPU (kernels::cpu::apply_allowed_tokens). -1: none.
  int32_t allowed_row = -1;
};
static_assert(std::is_trivially_copyable_v<SamplingRow> && sizeof(SamplingRow) == 72);

enum SamplingError : int32_t {
  kSamplingOk = 0,
  kSamplingNoFiniteLogit = 1,  // every logit is NaN or -inf after masking (the CPU throws too)
  kSamplingBadTokenId = 2,     // a history or masked id is outside [0, vocab)
};

// One row's result.
struct SampledRow {
  int32_t token = -1;      // -1 when error != kSamplingOk
  int32_t error = kSamplingOk;
  float logprob = 0.0f;    // raw log-softmax at token; 0 when num_logprobs < 0
  int32_t num_top = 0;     // min(num_logprobs, vocab), 0 when num_logprobs <= 0
  int32_t top_ids[kMaxSampledLogprobs];       // [num_top] most likely by raw logit, ties to the lower id
  float top_logprobs[kMaxSampledLogprobs];    // [num_top]
};
static_assert(std::is_trivially_copyable_v<SampledRow>);

// Bytes of workspace sample() needs: an int32 per (row, vocab id) for the penalty counts, then
// the split first pass's partials (24 bytes per row and 4096-id chunk) when vocab > 4096.
size_t sampling_workspace_bytes(int32_t max_rows, int32_t vocab);

// out: [num_rows] SampledRow. logits: [num_rows, vocab] f32, row r sampled with rows[r]; read
// only today, but callers must treat it as scratch. rows: [num_rows] SamplingRow. tokens: int32
// ids that rows point into (may be null when no row has histories or masks). workspace:
// sampling_workspace_bytes(num_rows, vocab) or more, no alignment beyond 4 bytes, no
// initialization. allowed: [rows with allowed_row >= 0, ceil(vocab / 32)] u32 bit-packed masks
// (may be null when no row has one). All device pointers; nothing is read back; vocab <= 1.5M (a
// bit per id in shared memory). num_rows == 0 launches nothing.
void sample(SampledRow* out, float* logits, const SamplingRow* rows, const int32_t* tokens, int32_t num_rows,
            int32_t vocab, void* workspace, size_t workspace_bytes, cudaStream_t stream,
            const uint32_t* allowed = nullptr);

// The draw's uniform number in [0, 1) at `step` of a request with `seed`: the top 53 bits of
// splitmix64(splitmix64(seed) ^ step). Must equal kernels::cpu::uniform_for_step (tested).
__host__ __device__ inline uint64_t sampling_splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__host__ __device__ inline double sampling_uniform(uint64_t seed, uint64_t step) {
  const uint64_t bits = sampling_splitmix64(sampling_splitmix64(seed) ^ step);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// The exp the device sampler uses, evaluated on the host: glibc's expf (FMA variant) bit for bit.
// Tests compare it with std::exp over the whole range the sampler feeds it ([-104, 0]).
float sampling_expf(float x);

// out[i] = sampling_expf(in[i]) computed on the device. out, in: [n] f32. For tests.
void sampling_expf_device(float* out, const float* in, int64_t n, cudaStream_t stream);

// Asynchronous scheduling's deferred tokens (core/step_plan.h): for i < *count,
// token_ids[pairs[2i]] = sampled[pairs[2i + 1]].token, where `sampled` still holds the previous
// step's rows. The count is read on the device, so a CUDA graph that captures this launch
// resolves each replay's own list (max_count bounds the grid).
void resolve_deferred_tokens(int32_t* token_ids, const int32_t* pairs, const int32_t* count, int32_t max_count,
                             const SampledRow* sampled, cudaStream_t stream);

}  // namespace tachyon::kernels::cuda
