// MoE routing, grouping and combine (moe.h); the grouped GEMM is moe_gemm.cu.
//   topk_softmax: one warp per token; each lane holds experts lane, lane + 32, ... (up to 8),
//     the softmax's max and sum are warp reductions, and the top k are k rounds of a warp argmax
//     (higher probability wins, then the lower id), so the order is deterministic.
//   align: one CTA counts pairs per expert in shared memory, lays the experts out in id order
//     padded to kMoeBlockM, and drops each pair into its expert's next free row (atomics: the
//     order inside an expert is free, and no result depends on it).
//   combine: one thread per 8 hidden values of a token, summing its k expert rows in order.
// Test: tests/gpu/test_moe_kernels.cpp.
#include <cfloat>

#include "tachyon/kernels/cuda/bf16_vec.cuh"
#include "tachyon/kernels/cuda/moe.h"

namespace tachyon::kernels::cuda {
namespace {

constexpr int kMaxPerLane = kMoeMaxExperts / 32;
constexpr int kMaxTopK = 16;
constexpr int kTokensPerBlock = 4;  // warps per CTA of topk_softmax

__global__ void topk_softmax_kernel(int32_t* __restrict__ topk_ids, float* __restrict__ topk_weights,
                                    const float* __restrict__ logits, int64_t tokens, int32_t num_experts,
                                    int32_t top_k, bool renormalize) {
  const int lane = threadIdx.x & 31;
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kTokensPerBlock + (threadIdx.x >> 5);
  if (token >= tokens) return;
  const float* row = logits + token * num_experts;
  float value[kMaxPerLane];
  float max_logit = -INFINITY;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int e = lane + 32 * i;
    value[i] = e < num_experts ? row[e] : -INFINITY;
    max_logit = fmaxf(max_logit, value[i]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) max_logit = fmaxf(max_logit, __shfl_xor_sync(0xffffffffu, max_logit, offset));
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    value[i] = lane + 32 * i < num_experts ? expf(value[i] - max_logit) : 0.0f;
    sum += value[i];
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float inv_sum = 1.0f / sum;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) value[i] = lane + 32 * i < num_experts ? value[i] * inv_sum : -1.0f;

  // k rounds of argmax; a chosen expert's probability becomes -1 (below every real one).
  float chosen_sum = 0.0f;
  float chosen_weight[kMaxTopK];
  int32_t chosen_id[kMaxTopK];
  for (int j = 0; j < top_k; ++j) {
    float best = -2.0f;
    int best_id = INT32_MAX;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int e = lane + 32 * i;
      if (value[i] > best) {  // ids of a lane rise with i, so ">" keeps the lower id on ties
        best = value[i];
        best_id = e;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, best, offset);
      const int other_id = __shfl_xor_sync(0xffffffffu, best_id, offset);
      if (other > best || (other == best && other_id < best_id)) {
        best = other;
        best_id = other_id;
      }
    }
    chosen_id[j] = best_id;
    chosen_weight[j] = best;
    chosen_sum += best;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      if (lane + 32 * i == best_id) value[i] = -1.0f;
    }
  }
  if (lane == 0) {
    const float scale = renormalize ? 1.0f / chosen_sum : 1.0f;
    for (int j = 0; j < top_k; ++j) {
      topk_ids[token * top_k + j] = chosen_id[j];
      topk_weights[token * top_k + j] = chosen_weight[j] * scale;
    }
  }
}

constexpr int kAlignThreads = 1024;

__global__ void __launch_bounds__(kAlignThreads) align_kernel(int32_t* __restrict__ sorted_rows,
                                                              int32_t* __restrict__ block_expert,
                                                              const int32_t* __restrict__ topk_ids, int32_t rows,
                                                              int32_t num_experts, int32_t capacity) {
  __shared__ int32_t count[kMoeMaxExperts];
  __shared__ int32_t begin[kMoeMaxExperts + 1];
  __shared__ int32_t cursor[kMoeMaxExperts];
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < rows; p += blockDim.x) atomicAdd(&count[topk_ids[p]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {  // at most 256 experts: a serial scan is shorter than a parallel one
    int32_t at = 0;
    for (int e = 0; e < num_experts; ++e) {
      begin[e] = at;
      cursor[e] = at;
      at += (count[e] + kMoeBlockM - 1) / kMoeBlockM * kMoeBlockM;
    }
    begin[num_experts] = at;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < capacity; i += blockDim.x) sorted_rows[i] = -1;
  const int32_t used = begin[num_experts];
  for (int b = threadIdx.x; b < capacity / kMoeBlockM; b += blockDim.x) {
    const int32_t row = b * kMoeBlockM;
    int32_t expert = -1;
    if (row < used) {  // the last expert whose range starts at or before this row
      int lo = 0, hi = num_experts - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (begin[mid] <= row) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      expert = lo;
    }
    block_expert[b] = expert;
  }
  __syncthreads();  // the -1 fill is done (and visible to the block) before pairs land
  for (int p = threadIdx.x; p < rows; p += blockDim.x) sorted_rows[atomicAdd(&cursor[topk_ids[p]], 1)] = p;
}

constexpr int kCombineThreads = 128;

__global__ void combine_kernel(bf16* __restrict__ out, const bf16* __restrict__ expert_out,
                               const float* __restrict__ weights, int32_t top_k, int64_t vecs_per_row) {
  const int64_t token = blockIdx.x;
  const int64_t vec = static_cast<int64_t>(blockIdx.y) * kCombineThreads + threadIdx.x;
  if (vec >= vecs_per_row) return;
  float acc[kBf16PerVec] = {};
  for (int j = 0; j < top_k; ++j) {
    const float w = weights[token * top_k + j];
    float v[kBf16PerVec];
    unpack8(reinterpret_cast<const uint4*>(expert_out)[(token * top_k + j) * vecs_per_row + vec], v);
#pragma unroll
    for (int i = 0; i < kBf16PerVec; ++i) acc[i] += w * v[i];
  }
  reinterpret_cast<uint4*>(out)[token * vecs_per_row + vec] = pack8(acc);
}

}  // namespace

int64_t moe_sorted_capacity(int64_t rows, int32_t num_experts) {
  const int64_t padded = rows + static_cast<int64_t>(num_experts) * (kMoeBlockM - 1);
  return (padded + kMoeBlockM - 1) / kMoeBlockM * kMoeBlockM;
}

void moe_topk_softmax(int32_t* topk_ids, float* topk_weights, const float* router_logits, int64_t tokens,
                      int32_t num_experts, int32_t top_k, bool renormalize, cudaStream_t stream) {
  TACHYON_CHECK(num_experts >= 1 && num_experts <= kMoeMaxExperts)
      << "moe_topk_softmax: " << num_experts << " experts (1.." << kMoeMaxExperts << " supported)";
  TACHYON_CHECK(top_k >= 1 && top_k <= kMaxTopK && top_k <= num_experts)
      << "moe_topk_softmax: top_k " << top_k << " must be in [1, min(" << kMaxTopK << ", experts " << num_experts << ")]";
  TACHYON_CHECK(tokens >= 0 && tokens <= INT32_MAX) << "moe_topk_softmax: tokens " << tokens << " out of range";
  if (tokens == 0) return;
  const unsigned blocks = static_cast<unsigned>((tokens + kTokensPerBlock - 1) / kTokensPerBlock);
  topk_softmax_kernel<<<blocks, 32 * kTokensPerBlock, 0, stream>>>(topk_ids, topk_weights, router_logits, tokens,
                                                                    num_experts, top_k, renormalize);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void moe_align(int32_t* sorted_rows, int32_t* block_expert, const int32_t* topk_ids, int64_t rows,
               int32_t num_experts, int64_t capacity, cudaStream_t stream) {
  TACHYON_CHECK(num_experts >= 1 && num_experts <= kMoeMaxExperts)
      << "moe_align: " << num_experts << " experts (1.." << kMoeMaxExperts << " supported)";
  TACHYON_CHECK(rows >= 0 && rows <= (int64_t{1} << 24)) << "moe_align: " << rows << " pairs out of range";
  TACHYON_CHECK(capacity == moe_sorted_capacity(rows, num_experts))
      << "moe_align: capacity " << capacity << " must be moe_sorted_capacity(rows, experts) = "
      << moe_sorted_capacity(rows, num_experts);
  align_kernel<<<1, kAlignThreads, 0, stream>>>(sorted_rows, block_expert, topk_ids, static_cast<int32_t>(rows),
                                                num_experts, static_cast<int32_t>(capacity));
  TACHYON_CUDA_CHECK_LAUNCH();
}

void moe_combine(bf16* out, const bf16* expert_out, const float* topk_weights, int64_t tokens, int32_t top_k,
                 int64_t hidden, cudaStream_t stream) {
  TACHYON_CHECK(hidden > 0 && hidden % kBf16PerVec == 0) << "moe_combine: hidden " << hidden << " must be a multiple of 8";
  TACHYON_CHECK(top_k >= 1) << "moe_combine: top_k " << top_k;
  TACHYON_CHECK(reinterpret_cast<uintptr_t>(out) % 16 == 0 && reinterpret_cast<uintptr_t>(expert_out) % 16 == 0)
      << "moe_combine: out and expert_out must be 16-byte aligned";
  TACHYON_CHECK(tokens >= 0 && tokens <= INT32_MAX) << "moe_combine: tokens " << tokens << " out of range";
  if (tokens == 0) return;
  const int64_t vecs = hidden / kBf16PerVec;
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((vecs + kCombineThreads - 1) / kCombineThreads));
  combine_kernel<<<grid, kCombineThreads, 0, stream>>>(out, expert_out, topk_weights, top_k, vecs);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
