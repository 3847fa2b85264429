// MTP drafting's small kernels (mtp_draft.h). None is on a hot path of its own: they move a few
// ints per row, or normalize one [rows, dim] input, so each is the plainest form that is exact.
#include "tachyon/kernels/cuda/mtp_draft.h"

#include <cfloat>

namespace tachyon::kernels::cuda {
namespace {

// The key runner/draft_acceptance.cpp gives forced acceptance's draw (another key than the
// sampler's, so the accept draw and the token draw of a row are independent).
constexpr uint64_t kForcedAcceptanceKey = 0x5bd1e9955bd1e995ull;

__global__ void mtp_accept_kernel(int32_t* emitted, int32_t* last_row, const SampledRow* sampled,
                                  const int32_t* token_ids, const int32_t* logits_rows, const MtpSequence* sequences,
                                  int32_t num_sequences, float forced_acceptance) {
  const int32_t s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= num_sequences) return;
  const MtpSequence seq = sequences[s];
  if (seq.first_row < 0) {  // padding (a graph's fixed count of sequences): row 0, never read
    last_row[s] = 0;
    return;
  }
  int32_t end = seq.num_drafts;
  for (int32_t i = 0; i <= seq.num_drafts; ++i) {
    const int32_t row = seq.first_row + i;
    emitted[row] = sampled[row].token;
  }
  for (int32_t i = 0; i < seq.num_drafts; ++i) {
    const int32_t row = seq.first_row + i;
    const int32_t draft = token_ids[logits_rows[row + 1]];
    const bool accept =
        forced_acceptance < 0.0f
            ? sampled[row].token == draft
            : sampling_uniform(seq.seed ^ kForcedAcceptanceKey, static_cast<uint64_t>(seq.num_output_tokens + i)) <
                  static_cast<double>(forced_acceptance);
    if (!accept) {
      end = i;
      break;
    }
    emitted[row] = draft;
  }
  last_row[s] = logits_rows[seq.first_row + end];
}

__global__ void mtp_module_rows_kernel(int32_t* tokens, int32_t* rope_positions, const int32_t* next_known,
                                       const int32_t* emitted, const int32_t* positions, int32_t num_tokens) {
  const int32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_tokens) return;
  const int32_t known = next_known[t];
  const int32_t token = known >= 0 ? known : emitted[-known - 1];
  tokens[t] = token >= 0 ? token : 0;  // a row the sampler failed (-1) embeds token 0: never a draft's source
  rope_positions[t] = positions[t] + 1;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
__device__ float block_sum(float value) {
  __shared__ float warp_sums[32];
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // warp_sums may still be read by the previous call
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  value = lane < static_cast<int>(blockDim.x / 32) ? warp_sums[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// out[0, dim) = bf16(w * bf16(x * inv_rms(x))) for one row x, as rms_norm.cu rounds.
__device__ void norm_row(bf16* out, const bf16* x, const bf16* weight, int32_t dim, float eps) {
  float squares = 0.0f;
  for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = __bfloat162float(x[i]);
    squares += v * v;
  }
  const float inv_rms = rsqrtf(block_sum(squares) / static_cast<float>(dim) + eps);
  for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float normalized = __bfloat162float(__float2bfloat16_rn(__bfloat162float(x[i]) * inv_rms));
    out[i] = __float2bfloat16_rn(__bfloat162float(weight[i]) * normalized);
  }
}

__global__ void mtp_front_kernel(bf16* out, const int32_t* tokens, const bf16* embed, const bf16* enorm,
                                 const bf16* hidden, const int32_t* hidden_rows, const bf16* hnorm, int32_t dim,
                                 float eps) {
  const int64_t r = blockIdx.x;
  bf16* row = out + r * 2 * dim;
  norm_row(row, embed + static_cast<int64_t>(tokens[r]) * dim, enorm, dim, eps);
  const int64_t h = hidden_rows != nullptr ? hidden_rows[r] : r;
  norm_row(row + dim, hidden + h * dim, hnorm, dim, eps);
}

__global__ void mtp_chain_rows_kernel(MtpChainRows out, int32_t j, const MtpSequence* sequences,
                                      int32_t num_sequences, const int32_t* last_row, const int32_t* positions,
                                      const int32_t* step_tables, int32_t table_stride, int32_t block_size,
                                      const int32_t* drafts, int32_t drafts_stride) {
  const int32_t s = blockIdx.x;
  const MtpSequence seq = sequences[s];
  const int32_t q = positions[last_row[s]] + j;
  const int32_t previous = drafts[s * drafts_stride + j - 1];
  const bool real = seq.first_row >= 0 && previous >= 0 && q < seq.capacity;
  const int32_t* table = step_tables + static_cast<int64_t>(seq.table_seq) * table_stride;
  // The first pass copies the blocks every pass of the step reads (positions up to the last
  // pass's, within the sequence's blocks); the later passes' rows only move within them.
  const int32_t last_q = min(q + drafts_stride - 2, seq.capacity - 1);
  const int32_t blocks = real && j == 1 ? last_q / block_size + 1 : 0;
  for (int32_t b = threadIdx.x; b < blocks; b += blockDim.x) {
    out.block_tables[static_cast<int64_t>(s) * table_stride + b] = table[b];
  }
  if (threadIdx.x != 0) return;
  out.tokens[s] = real ? previous : 0;
  out.rope_positions[s] = q + 1;
  out.slots[s] = real ? table[q / block_size] * block_size + q % block_size : -1;
  out.context_lens[s] = real ? q + 1 : 0;
  out.query_starts[s] = s;
  out.logits_rows[s] = s;
  if (s == num_sequences - 1) out.query_starts[num_sequences] = num_sequences;
}

constexpr int kArgmaxThreads = 512;

__global__ void argmax_rows_kernel(int32_t* out, int32_t out_stride, const float* logits, int32_t vocab,
                                   const int32_t* slots) {
  const int64_t r = blockIdx.x;
  if (slots != nullptr && slots[r] < 0) {
    if (threadIdx.x == 0) out[r * out_stride] = -1;
    return;
  }
  const float* row = logits + r * vocab;
  float best = -FLT_MAX;
  int32_t best_id = INT32_MAX;
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = row[i];
    if (v > best) {  // strictly greater: a thread's ids ascend, so ties keep the lower id
      best = v;
      best_id = i;
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, best, offset);
    const int32_t other_id = __shfl_xor_sync(0xffffffffu, best_id, offset);
    if (other > best || (other == best && other_id < best_id)) {
      best = other;
      best_id = other_id;
    }
  }
  __shared__ float warp_best[kArgmaxThreads / 32];
  __shared__ int32_t warp_id[kArgmaxThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    warp_best[warp] = best;
    warp_id[warp] = best_id;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kArgmaxThreads / 32; ++w) {
    if (warp_best[w] > best || (warp_best[w] == best && warp_id[w] < best_id)) {
      best = warp_best[w];
      best_id = warp_id[w];
    }
  }
  // A row with no finite value (NaN everywhere) keeps INT32_MAX: no draft.
  out[r * out_stride] = best_id == INT32_MAX ? -1 : best_id;
}

}  // namespace

void mtp_accept(int32_t* emitted, int32_t* last_row, const SampledRow* sampled, const int32_t* token_ids,
                const int32_t* logits_rows, const MtpSequence* sequences, int32_t num_sequences,
                float forced_acceptance, cudaStream_t stream) {
  if (num_sequences == 0) return;
  mtp_accept_kernel<<<(num_sequences + 127) / 128, 128, 0, stream>>>(emitted, last_row, sampled, token_ids,
                                                                    logits_rows, sequences, num_sequences,
                                                                    forced_acceptance);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void mtp_module_rows(int32_t* tokens, int32_t* rope_positions, const int32_t* next_known, const int32_t* emitted,
                     const int32_t* positions, int32_t num_tokens, cudaStream_t stream) {
  if (num_tokens == 0) return;
  mtp_module_rows_kernel<<<(num_tokens + 255) / 256, 256, 0, stream>>>(tokens, rope_positions, next_known, emitted,
                                                                      positions, num_tokens);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void mtp_front(bf16* out, const int32_t* tokens, const bf16* embed, const bf16* enorm, const bf16* hidden,
               const int32_t* hidden_rows, const bf16* hnorm, int32_t rows, int32_t dim, float eps,
               cudaStream_t stream) {
  if (rows == 0) return;
  mtp_front_kernel<<<rows, 256, 0, stream>>>(out, tokens, embed, enorm, hidden, hidden_rows, hnorm, dim, eps);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void mtp_chain_rows(const MtpChainRows& out, int32_t j, const MtpSequence* sequences, int32_t num_sequences,
                    const int32_t* last_row, const int32_t* positions, const int32_t* step_tables,
                    int32_t table_stride, int32_t block_size, const int32_t* drafts, int32_t drafts_stride,
                    cudaStream_t stream) {
  TACHYON_CHECK(j >= 1 && j < drafts_stride) << "mtp_chain_rows: pass " << j << " of " << drafts_stride << " drafts";
  if (num_sequences == 0) return;
  mtp_chain_rows_kernel<<<num_sequences, 128, 0, stream>>>(out, j, sequences, num_sequences, last_row, positions,
                                                           step_tables, table_stride, block_size, drafts,
                                                           drafts_stride);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void argmax_rows(int32_t* out, int32_t out_stride, const float* logits, int32_t rows, int32_t vocab,
                 const int32_t* slots, cudaStream_t stream) {
  if (rows == 0) return;
  argmax_rows_kernel<<<rows, kArgmaxThreads, 0, stream>>>(out, out_stride, logits, vocab, slots);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
