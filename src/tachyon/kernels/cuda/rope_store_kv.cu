// The attention prologue in one pass: per-head q/k RMSNorm (optional), RoPE (rotate_half) of q
// and k, the write of q, and the write of k and v into their paged-cache rows.
//
// One block per token. Each head is served by kLanes = head_dim / 16 adjacent lanes (4, 8 or 16,
// so 8, 4 or 2 heads share a warp and every lane stays busy); lane g owns elements [8g, 8g + 8)
// and their rotate_half partners [half + 8g, half + 8g + 8), which it loads as two 16-byte
// vectors, so the rotation needs no data from other lanes and the per-head norm is a shuffle
// reduction inside the lane group. The token's cos/sin table (head_dim / 2 angles) is computed
// once per block into shared memory with accurate sincosf of the f32 angle p * inv_freq[i], as
// the CPU reference and HF compute it: positions of 1e5 give angles of 1e5 rad, where the fast
// __sinf loses most of its accuracy.
//
// Rounding: when normed, q/k follow HF's RMSNorm (normalized value rounded to bf16, times the
// bf16 weight, rounded again); the rotation is f32 on those values and rounds once on the
// write. v is copied bit for bit. Test: tests/gpu/test_elementwise_kernels.cpp (RopeStoreKv.*).
//
// FP8 cache (rope_store_kv_fp8): k and v are first rounded to bf16 exactly as above (the row a
// bf16 cache would hold), then each head's row is quantized with its amax found by a shuffle
// inside the lane group (fp8_kv.cuh); lane 0 of the group writes the factor.
#include "tachyon/kernels/cuda/rope_store_kv.h"
#include "tachyon/kernels/cuda/bf16_vec.cuh"
#include "tachyon/kernels/cuda/fp8_kv.cuh"
#include "tachyon/kernels/cuda/pdl.cuh"

#include <algorithm>
#include <cstdint>

namespace tachyon::kernels::cuda {
namespace {

constexpr int kVecElems = kBf16PerVec;
constexpr int kMaxThreads = 1024;


__device__ inline float round_bf16(float value) { return __bfloat162float(__float2bfloat16_rn(value)); }

// v <- bf16(w * bf16(v * inv_rms)) for the 8 values at weight[offset, offset + 8).
__device__ inline void norm8(float (&v)[kVecElems], const bf16* weight, int offset, float inv_rms) {
  float w[kVecElems];
  unpack8(*reinterpret_cast<const uint4*>(weight + offset), w);
#pragma unroll
  for (int i = 0; i < kVecElems; ++i) v[i] = round_bf16(w[i] * round_bf16(v[i] * inv_rms));
}

// Where the kernel writes K and V: bf16 rows (k, v), or with kFp8 the FP8 cache (fp8).
struct KvRowsOut {
  bf16* k = nullptr;
  bf16* v = nullptr;
  Fp8KvRows fp8;
};

// Arguments as in rope_store_kv (header); grid: one block per token; blockDim.x a multiple of 32
// and of kLanes. q_norm and k_norm are both set or both nullptr.
template <int kHeadDim, bool kFp8>
__global__ void rope_store_kv_kernel(bf16* __restrict__ q_out, const KvRowsOut cache, const bf16* __restrict__ qkv, const bf16* __restrict__ q_norm,
                                     const bf16* __restrict__ k_norm, const float* __restrict__ inv_freq,
                                     const int32_t* __restrict__ positions, const int32_t* __restrict__ slot_mapping,
                                     int num_heads, int num_kv_heads, float eps) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  constexpr int kHalf = kHeadDim / 2;
  constexpr int kLanes = kHalf / kVecElems;  // lanes per head, a power of two dividing 32
  __shared__ float cos_table[kHalf], sin_table[kHalf];

  const int64_t token = blockIdx.x;
  const float position = static_cast<float>(positions[token]);
  for (int i = threadIdx.x; i < kHalf; i += blockDim.x) {
    sincosf(position * inv_freq[i], &sin_table[i], &cos_table[i]);
  }
  __syncthreads();

  const int lane = threadIdx.x % kLanes;  // this thread's element block within a head
  const int first = lane * kVecElems;      // elements [first, first + 8) and [kHalf + first, ...)

  const int heads_total = num_heads + 2 * num_kv_heads;  // q heads, then k heads, then v heads
  const int64_t slot = slot_mapping[token];
  const bf16* qkv_row = qkv + token * heads_total * kHeadDim;
  const int heads_per_pass = blockDim.x / kLanes;
  // Every thread runs the same number of passes, so the shuffles below see full warps.
  for (int pass_head = 0; pass_head < heads_total; pass_head += heads_per_pass) {
    const int head = pass_head + static_cast<int>(threadIdx.x) / kLanes;
    const bool active = head < heads_total;
    uint4 lo_bits = make_uint4(0, 0, 0, 0), hi_bits = lo_bits;
    if (active) {
      lo_bits = *reinterpret_cast<const uint4*>(qkv_row + head * kHeadDim + first);
      hi_bits = *reinterpret_cast<const uint4*>(qkv_row + head * kHeadDim + kHalf + first);
    }
    float lo[kVecElems], hi[kVecElems];  // the two rotate_half partner blocks
    unpack8(lo_bits, lo);
    unpack8(hi_bits, hi);
    const bool is_q = head < num_heads;
    const bool is_k = !is_q && head < num_heads + num_kv_heads;
    if (q_norm != nullptr) {
      float sum_squares = 0.0f;
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) sum_squares += lo[i] * lo[i] + hi[i] * hi[i];
#pragma unroll
      for (int offset = kLanes / 2; offset > 0; offset /= 2) {
        sum_squares += __shfl_xor_sync(0xffffffffu, sum_squares, offset);
      }
      const float inv_rms = rsqrtf(sum_squares / static_cast<float>(kHeadDim) + eps);
      if (is_q || is_k) {
        const bf16* weight = is_q ? q_norm : k_norm;
        norm8(lo, weight, first, inv_rms);
        norm8(hi, weight, kHalf + first, inv_rms);
      }
    }
    if (is_q || is_k) {
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) {
        const float a = lo[i], b = hi[i];
        const float c = cos_table[first + i], s = sin_table[first + i];
        lo[i] = a * c - b * s;
        hi[i] = b * c + a * s;
      }
    }
    float factor = 1.0f;
    if constexpr (kFp8) {  // every lane shuffles (inactive ones hold zeros), as for the norm
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) {
        lo[i] = round_bf16(lo[i]);
        hi[i] = round_bf16(hi[i]);
        amax = fmaxf(amax, fmaxf(fabsf(lo[i]), fabsf(hi[i])));
      }
#pragma unroll
      for (int offset = kLanes / 2; offset > 0; offset /= 2) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
      }
      factor = fp8_kv_factor(amax);
    }
    if (!active) continue;  // only in the last pass, so no later shuffle misses this lane
    if (kFp8 && !is_q) {
      if (slot < 0) continue;  // padding token: nothing goes to the cache
      const int64_t row = slot * num_kv_heads + (is_k ? head - num_heads : head - num_heads - num_kv_heads);
      uint8_t* codes = (is_k ? cache.fp8.k : cache.fp8.v) + row * kHeadDim;
      *reinterpret_cast<uint2*>(codes + first) = make_uint2(fp8_encode4(lo, factor), fp8_encode4(lo + 4, factor));
      *reinterpret_cast<uint2*>(codes + kHalf + first) =
          make_uint2(fp8_encode4(hi, factor), fp8_encode4(hi + 4, factor));
      if (lane == 0) (is_k ? cache.fp8.k_scale : cache.fp8.v_scale)[row] = factor;
      continue;
    }
    bf16* dst;
    if (is_q) {
      dst = q_out + (token * num_heads + head) * kHeadDim;
    } else if (slot < 0) {
      continue;  // padding token: nothing goes to the cache
    } else if (is_k) {
      dst = cache.k + (slot * num_kv_heads + (head - num_heads)) * kHeadDim;
    } else {
      dst = cache.v + (slot * num_kv_heads + (head - num_heads - num_kv_heads)) * kHeadDim;
    }
    *reinterpret_cast<uint4*>(dst + first) = pack8(lo);
    *reinterpret_cast<uint4*>(dst + kHalf + first) = pack8(hi);
  }
}

template <bool kFp8>
void launch_rope_store_kv(bf16* q_out, const KvRowsOut& cache, const bf16* qkv, const bf16* q_norm, const bf16* k_norm,
                          const float* inv_freq, const int32_t* positions, const int32_t* slot_mapping,
                          const RopeStoreKvShape& shape, cudaStream_t stream) {
  const int head_dim = shape.head_dim;
  TACHYON_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256)
      << "rope_store_kv: head_dim " << head_dim << " is not 64, 128 or 256";
  TACHYON_CHECK(shape.num_tokens >= 0 && shape.num_tokens <= INT32_MAX)
      << "rope_store_kv: num_tokens " << shape.num_tokens << " out of range";
  TACHYON_CHECK(shape.num_heads > 0 && shape.num_kv_heads > 0)
      << "rope_store_kv: num_heads " << shape.num_heads << ", num_kv_heads " << shape.num_kv_heads;
  TACHYON_CHECK((q_norm == nullptr) == (k_norm == nullptr)) << "rope_store_kv: q_norm and k_norm come together";
  for (const void* p : {static_cast<const void*>(q_out), static_cast<const void*>(cache.k),
                        static_cast<const void*>(cache.v), static_cast<const void*>(qkv),
                        static_cast<const void*>(q_norm), static_cast<const void*>(k_norm)}) {
    TACHYON_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0) << "rope_store_kv: bf16 pointers must be 16-byte aligned";
  }
  if constexpr (kFp8) {
    const Fp8KvRows& f = cache.fp8;
    TACHYON_CHECK(f.k != nullptr && f.v != nullptr && f.k_scale != nullptr && f.v_scale != nullptr)
        << "rope_store_kv_fp8: the codes and factors of K and V are all needed";
    TACHYON_CHECK(reinterpret_cast<uintptr_t>(f.k) % 8 == 0 && reinterpret_cast<uintptr_t>(f.v) % 8 == 0)
        << "rope_store_kv_fp8: the codes must be 8-byte aligned";
  }
  if (shape.num_tokens == 0) return;

  const int lanes = head_dim / 16;
  const int heads_total = shape.num_heads + 2 * shape.num_kv_heads;
  const int threads = std::min(kMaxThreads, (heads_total * lanes + 31) / 32 * 32);
  const auto grid = static_cast<unsigned>(shape.num_tokens);
  const int h = shape.num_heads, kv = shape.num_kv_heads;
  switch (head_dim) {
    case 64:
      launch_pdl(rope_store_kv_kernel<64, kFp8>, dim3(grid), dim3(threads), 0, stream, q_out, cache, qkv, q_norm, k_norm,
                 inv_freq, positions, slot_mapping, h, kv, shape.eps);
      break;
    case 128:
      launch_pdl(rope_store_kv_kernel<128, kFp8>, dim3(grid), dim3(threads), 0, stream, q_out, cache, qkv, q_norm, k_norm,
                 inv_freq, positions, slot_mapping, h, kv, shape.eps);
      break;
    default:
      launch_pdl(rope_store_kv_kernel<256, kFp8>, dim3(grid), dim3(threads), 0, stream, q_out, cache, qkv, q_norm, k_norm,
                 inv_freq, positions, slot_mapping, h, kv, shape.eps);
      break;
  }
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_store_kv(bf16* q_out, bf16* k_cache, bf16* v_cache, const bf16* qkv, const bf16* q_norm,
                   const bf16* k_norm, const float* inv_freq, const int32_t* positions,
                   const int32_t* slot_mapping, const RopeStoreKvShape& shape, cudaStream_t stream) {
  launch_rope_store_kv<false>(q_out, KvRowsOut{.k = k_cache, .v = v_cache}, qkv, q_norm, k_norm, inv_freq, positions,
                              slot_mapping, shape, stream);
}

void rope_store_kv_fp8(bf16* q_out, const Fp8KvRows& cache, const bf16* qkv, const bf16* q_norm, const bf16* k_norm,
                       const float* inv_freq, const int32_t* positions, const int32_t* slot_mapping,
                       const RopeStoreKvShape& shape, cudaStream_t stream) {
  launch_rope_store_kv<true>(q_out, KvRowsOut{.fp8 = cache}, qkv, q_norm, k_norm, inv_freq, positions, slot_mapping,
                             shape, stream);
}

}  // namespace tachyon::kernels::cuda
