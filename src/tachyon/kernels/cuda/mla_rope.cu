// MLA's latent-cache store and query rope (mla_rope.h).
//   store_latent: one warp per token. Each lane holds up to 4 of the c_kv row's 8-bf16 vectors
//     (rank <= 1024) in registers; the sum of squares is a warp reduction, and the lane scales
//     and stores what it holds. Then lane i rotates rope pairs i, i + 32, ..., computing its own
//     cos/sin (DeepSeek's 32 pairs: one per lane), and writes both halves of each pair.
//     The FP8 cache's store is the same kernel: vector lane + 32k lies in quantization group
//     (lane + 32k) / 16, so each half-warp holds one group per k and its amax is a half-warp
//     reduction; the codes quantize the bf16 row the bf16 cache would hold (HF's bf16 numerics,
//     which the CPU's f32 row differs from by those roundings), so a test can recompute them exactly.
//   rope_queries: one block per token; its cos/sin table (rope_dim / 2 angles) is computed once
//     into shared memory, then the block's threads walk the (head, pair) items.
// Angles are the f32 product position * inv_freq[i] with accurate sincosf, as the CPU and HF
// compute them (positions of 1e5 give angles of 1e5 rad, where __sinf fails); the rotation uses
// __fmul_rn / __fadd_rn so nvcc does not fuse it into FMAs the CPU does not use.
// Test: tests/gpu/test_mla_rope.cpp.
#include "tachyon/kernels/cuda/mla_rope.h"
#include "tachyon/kernels/cuda/bf16_vec.cuh"
#include "tachyon/kernels/cuda/fp8_kv.cuh"
#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/kernels/cuda/pdl.cuh"

#include <algorithm>
#include <cstdint>
#include <initializer_list>

namespace tachyon::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;  // tokens per CTA of store_latent
constexpr int kMaxVecsPerLane = 4;
constexpr int kMaxRank = 32 * kMaxVecsPerLane * kBf16PerVec;  // 1024
constexpr int kMaxRopeDim = 512;
constexpr int kQueryThreads = 256;

__device__ __forceinline__ float round_bf16(float value) { return __bfloat162float(__float2bfloat16_rn(value)); }

// The rotate_half pair i of x: rope.h's formula, read from the interleaved or the split layout,
// written to out[i] and out[half + i]. cos_i and sin_i already carry attention_scaling.
__device__ __forceinline__ void rotate_pair(bf16* out, const bf16* x, int i, int half, bool interleave, float cos_i,
                                            float sin_i) {
  const float a = __bfloat162float(interleave ? x[2 * i] : x[i]);
  const float b = __bfloat162float(interleave ? x[2 * i + 1] : x[half + i]);
  out[i] = __float2bfloat16_rn(__fsub_rn(__fmul_rn(a, cos_i), __fmul_rn(b, sin_i)));
  out[half + i] = __float2bfloat16_rn(__fadd_rn(__fmul_rn(b, cos_i), __fmul_rn(a, sin_i)));
}

__device__ __forceinline__ void scaled_sincos(float position, float inv_freq, float attention_scaling, float* sin_i,
                                              float* cos_i) {
  float s, c;
  sincosf(position * inv_freq, &s, &c);
  *sin_i = s * attention_scaling;
  *cos_i = c * attention_scaling;
}

// Where store_latent_kernel writes a token: bf16 rows [c_kv | k_pe], or the FP8 cache's planes.
struct LatentDestination {
  bf16* rows = nullptr;       // bf16: [slots, rank + rope_dim]
  uint8_t* codes = nullptr;   // FP8: [slots, rank]
  float* scales = nullptr;    // FP8: [slots, fp8_latent_scale_stride(rank)]
  bf16* rope = nullptr;       // FP8: [slots, rope_dim]
};

// Arguments as mla_store_latent (header); blockDim.x = 32 * kWarpsPerBlock.
template <bool kFp8>
__global__ void store_latent_kernel(const LatentDestination dst, const bf16* __restrict__ kv_a,
                                    const bf16* __restrict__ norm_weight, float eps, const float* __restrict__ inv_freq,
                                    float attention_scaling, bool interleave, const int32_t* __restrict__ positions,
                                    const int32_t* __restrict__ slots, int64_t num_tokens, int rank, int rope_dim) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (token >= num_tokens) return;
  const int64_t slot = slots[token];
  if (slot < 0) return;  // padding: nothing goes to the cache
  const int row_width = rank + rope_dim;
  const bf16* in_row = kv_a + token * row_width;

  // c_kv: RMSNorm over the rank values.
  const int vecs = rank / kBf16PerVec;
  uint4 x[kMaxVecsPerLane];
  float sum_squares = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxVecsPerLane; ++k) {
    const int vec = lane + 32 * k;
    if (vec < vecs) {
      x[k] = reinterpret_cast<const uint4*>(in_row)[vec];
      float v[kBf16PerVec];
      unpack8(x[k], v);
#pragma unroll
      for (int i = 0; i < kBf16PerVec; ++i) sum_squares += v[i] * v[i];
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum_squares += __shfl_xor_sync(0xffffffffu, sum_squares, offset);
  const float inv_rms = rsqrtf(sum_squares / static_cast<float>(rank) + eps);
#pragma unroll
  for (int k = 0; k < kMaxVecsPerLane; ++k) {
    const int vec = lane + 32 * k;
    if (32 * k >= vecs) break;  // warp-uniform: the half-warp reductions below need every lane
    float v[kBf16PerVec];
    if (vec < vecs) {
      float w[kBf16PerVec];
      unpack8(x[k], v);
      unpack8(reinterpret_cast<const uint4*>(norm_weight)[vec], w);
#pragma unroll
      for (int i = 0; i < kBf16PerVec; ++i) v[i] = w[i] * round_bf16(v[i] * inv_rms);
    }
    if constexpr (kFp8) {
      static_assert(kFp8LatentGroup == 16 * kBf16PerVec, "a half-warp's 16 vectors are one group");
      float amax = 0.0f;
      if (vec < vecs) {
#pragma unroll
        for (int i = 0; i < kBf16PerVec; ++i) {
          v[i] = round_bf16(v[i]);
          amax = fmaxf(amax, fabsf(v[i]));
        }
      }
#pragma unroll
      for (int offset = 8; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
      if (vec < vecs) {
        const float factor = fp8_kv_factor(amax);
        const uint2 codes = make_uint2(fp8_encode4(v, factor), fp8_encode4(v + 4, factor));
        reinterpret_cast<uint2*>(dst.codes + slot * rank)[vec] = codes;
        if (vec % 16 == 0) dst.scales[slot * fp8_latent_scale_stride(rank) + vec / 16] = factor;
      }
    } else {
      if (vec < vecs) reinterpret_cast<uint4*>(dst.rows + slot * row_width)[vec] = pack8(v);
    }
  }

  // k_pe: rotated into the rotate_half layout.
  bf16* rope_out = kFp8 ? dst.rope + slot * rope_dim : dst.rows + slot * row_width + rank;
  const int half = rope_dim / 2;
  const float position = static_cast<float>(positions[token]);
  for (int i = lane; i < half; i += 32) {
    float sin_i, cos_i;
    scaled_sincos(position, inv_freq[i], attention_scaling, &sin_i, &cos_i);
    rotate_pair(rope_out, in_row + rank, i, half, interleave, cos_i, sin_i);
  }
}

// Arguments as mla_rope_queries (header); grid: one block per token.
__global__ void rope_queries_kernel(bf16* __restrict__ q_absorbed, const bf16* __restrict__ q,
                                    const float* __restrict__ inv_freq, float attention_scaling, bool interleave,
                                    const int32_t* __restrict__ positions, int num_heads, int nope, int rank,
                                    int rope_dim) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  __shared__ float cos_table[kMaxRopeDim / 2], sin_table[kMaxRopeDim / 2];
  const int64_t token = blockIdx.x;
  const int half = rope_dim / 2;
  const float position = static_cast<float>(positions[token]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    scaled_sincos(position, inv_freq[i], attention_scaling, &sin_table[i], &cos_table[i]);
  }
  __syncthreads();
  for (int item = threadIdx.x; item < num_heads * half; item += blockDim.x) {
    const int head = item / half, i = item % half;
    const bf16* x = q + (token * num_heads + head) * (nope + rope_dim) + nope;
    bf16* out = q_absorbed + (token * num_heads + head) * (rank + rope_dim) + rank;
    rotate_pair(out, x, i, half, interleave, cos_table[i], sin_table[i]);
  }
}

}  // namespace

namespace {

void check_store_latent(const char* kernel, const bf16* kv_a, const bf16* norm_weight, int64_t num_tokens, int32_t rank,
                        int32_t rope_dim, std::initializer_list<const void*> destinations) {
  TACHYON_CHECK(rank >= kBf16PerVec && rank <= kMaxRank && rank % kBf16PerVec == 0)
      << kernel << ": rank " << rank << " must be a multiple of 8 in [8, " << kMaxRank << "]";
  TACHYON_CHECK(rope_dim >= kBf16PerVec && rope_dim <= kMaxRopeDim && rope_dim % kBf16PerVec == 0)
      << kernel << ": rope_dim " << rope_dim << " must be a multiple of 8 in [8, " << kMaxRopeDim << "]";
  TACHYON_CHECK(num_tokens >= 0 && num_tokens <= INT32_MAX) << kernel << ": num_tokens " << num_tokens;
  TACHYON_CHECK(reinterpret_cast<uintptr_t>(kv_a) % 16 == 0 && reinterpret_cast<uintptr_t>(norm_weight) % 16 == 0)
      << kernel << ": kv_a and norm_weight must be 16-byte aligned";
  for (const void* p : destinations) {
    TACHYON_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0) << kernel << ": every cache plane must be 16-byte aligned";
  }
}

template <bool kFp8>
void launch_store_latent(const LatentDestination& dst, const bf16* kv_a, const bf16* norm_weight, float eps,
                         const float* inv_freq, float attention_scaling, bool interleave, const int32_t* positions,
                         const int32_t* slots, int64_t num_tokens, int32_t rank, int32_t rope_dim,
                         cudaStream_t stream) {
  if (num_tokens == 0) return;
  const auto blocks = static_cast<unsigned>((num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
  launch_pdl(store_latent_kernel<kFp8>, dim3(blocks), dim3(32 * kWarpsPerBlock), 0, stream, dst, kv_a, norm_weight,
             eps, inv_freq, attention_scaling, interleave, positions, slots, num_tokens, static_cast<int>(rank),
             static_cast<int>(rope_dim));
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void mla_store_latent(bf16* cache, const bf16* kv_a, const bf16* norm_weight, float eps, const float* inv_freq,
                      float attention_scaling, bool interleave, const int32_t* positions, const int32_t* slots,
                      int64_t num_tokens, int32_t rank, int32_t rope_dim, cudaStream_t stream) {
  check_store_latent("mla_store_latent", kv_a, norm_weight, num_tokens, rank, rope_dim, {cache});
  launch_store_latent<false>({.rows = cache}, kv_a, norm_weight, eps, inv_freq, attention_scaling, interleave,
                             positions, slots, num_tokens, rank, rope_dim, stream);
}

void mla_store_latent_fp8(uint8_t* codes, float* scales, bf16* rope, const bf16* kv_a, const bf16* norm_weight,
                          float eps, const float* inv_freq, float attention_scaling, bool interleave,
                          const int32_t* positions, const int32_t* slots, int64_t num_tokens, int32_t rank,
                          int32_t rope_dim, cudaStream_t stream) {
  check_store_latent("mla_store_latent_fp8", kv_a, norm_weight, num_tokens, rank, rope_dim, {codes, scales, rope});
  TACHYON_CHECK(rank % 16 == 0) << "mla_store_latent_fp8: rank " << rank
                                << " must be a multiple of 16 (each token's codes start 16-byte aligned)";
  launch_store_latent<true>({.codes = codes, .scales = scales, .rope = rope}, kv_a, norm_weight, eps, inv_freq,
                            attention_scaling, interleave, positions, slots, num_tokens, rank, rope_dim, stream);
}

void mla_rope_queries(bf16* q_absorbed, const bf16* q, const float* inv_freq, float attention_scaling, bool interleave,
                      const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t nope, int32_t rank,
                      int32_t rope_dim, cudaStream_t stream) {
  TACHYON_CHECK(rope_dim >= 2 && rope_dim <= kMaxRopeDim && rope_dim % 2 == 0)
      << "mla_rope_queries: rope_dim " << rope_dim << " must be even and at most " << kMaxRopeDim;
  TACHYON_CHECK(num_heads >= 1 && nope >= 0 && rank >= 0)
      << "mla_rope_queries: num_heads " << num_heads << ", nope " << nope << ", rank " << rank;
  TACHYON_CHECK(num_tokens >= 0 && num_tokens <= INT32_MAX) << "mla_rope_queries: num_tokens " << num_tokens;
  if (num_tokens == 0) return;
  const int items = num_heads * (rope_dim / 2);
  const int threads = std::min(kQueryThreads, (items + 31) / 32 * 32);
  launch_pdl(rope_queries_kernel, dim3(static_cast<unsigned>(num_tokens)), dim3(threads), 0, stream, q_absorbed, q,
             inv_freq, attention_scaling, interleave, positions, static_cast<int>(num_heads), static_cast<int>(nope),
             static_cast<int>(rank), static_cast<int>(rope_dim));
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
