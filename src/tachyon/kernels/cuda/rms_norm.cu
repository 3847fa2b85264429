// RMSNorm and the fused residual-add + RMSNorm, one block per row. Each thread loads its share
// of the row as 16-byte vectors (8 bf16) into registers, the block sums the squares (warp
// shuffles, then one shared-memory step across warps), and the thread scales the values it
// still holds: the row is read from memory once and written once. The host picks kVecs, the
// vectors per thread (1, 2, 4 or 8; a template so they stay in registers), as the fewest that
// fit a 512-thread block, so dims up to 4096 hold one vector per thread and few registers, and
// dims up to 512 * 8 * 8 = 32768 are served.
//
// Rounding follows HF's bf16 RMSNorm: f32 math, the normalized value rounded to bf16, then
// multiplied by the bf16 weight and rounded again. add_rms_norm first rounds residual + in to
// bf16 (what HF's bf16 `residual + hidden_states` produces), stores it, and normalizes that.
// Test: tests/gpu/test_elementwise_kernels.cpp (RmsNorm.*, AddRmsNorm.*).
#include "tachyon/kernels/cuda/rms_norm.h"
#include "tachyon/kernels/cuda/bf16_vec.cuh"
#include "tachyon/kernels/cuda/fp8_rows.cuh"
#include "tachyon/kernels/cuda/pdl.cuh"
#include "tachyon/kernels/cuda/row_block.cuh"

#include <cstdint>

namespace tachyon::kernels::cuda {
namespace {

constexpr int kVecElems = kBf16PerVec;

// Writes y = bf16(w * bf16(x * inv_rms)) for the vectors this thread holds, and with kFp8 their
// E4M3 copy (fp8_rows.cuh: every lane takes part, active or not): per 128 columns as each vector
// is written, or (q.per_token) with the row's one factor once the block has the row's amax.
template <int kVecs, bool kFp8>
__device__ inline void scale_and_store(bf16* out_row, const bf16* weight, const uint4 (&x)[kVecs], int vecs,
                                       float inv_rms, const Fp8Rows& q, int64_t row) {
  [[maybe_unused]] uint4 stored[kVecs];
  [[maybe_unused]] float row_amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int vec = threadIdx.x + k * blockDim.x;
    float v[kVecElems] = {};
    if (vec < vecs) {
      float w[kVecElems];
      unpack8(x[k], v);
      unpack8(reinterpret_cast<const uint4*>(weight)[vec], w);
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) v[i] = w[i] * __bfloat162float(__float2bfloat16_rn(v[i] * inv_rms));
      const uint4 y = pack8(v);
      reinterpret_cast<uint4*>(out_row)[vec] = y;
      if constexpr (kFp8) {
        unpack8(y, v);  // the values as stored: what fp8_quantize_rows would read
        if (q.per_token) {
          stored[k] = y;
#pragma unroll
          for (int i = 0; i < kVecElems; ++i) row_amax = fmaxf(row_amax, fabsf(v[i]));
        }
      }
    }
    if constexpr (kFp8) {
      if (!q.per_token) store_fp8_vec8(q, row, vecs, vec, v, vec < vecs);
    }
  }
  if constexpr (kFp8) {
    if (!q.per_token) return;
    store_fp8_row_per_token<kVecs>(q, row, vecs, stored, row_amax);
  }
}

// A zero row of the E4M3 copy past the producer's rows (codes 0, factor 1), as fp8_quantize_rows pads.
template <int kVecs>
__device__ inline void store_fp8_padding_row(const Fp8Rows& q, int64_t row, int vecs) {
  const float zeros[kVecElems] = {};
  if (q.per_token && threadIdx.x == 0) q.scale[row] = 1.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int vec = threadIdx.x + k * blockDim.x;
    if (q.per_token) {
      if (vec < vecs) store_fp8_codes8(q, row, vecs, vec, zeros, 1.0f);
    } else {
      store_fp8_vec8(q, row, vecs, vec, zeros, vec < vecs);
    }
  }
}

// out, in: [rows, dim] bf16 (may alias: each thread rewrites only what it read); weight: [dim] bf16.
// kFp8: also the rows' E4M3 copy `q`; blocks past `rows` write its padding rows only.
template <int kVecs, bool kFp8>
__global__ void rms_norm_kernel(bf16* out, const bf16* in, const bf16* __restrict__ weight, int vecs, float eps,
                                Fp8Rows q, int64_t rows) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  const int64_t row = blockIdx.x;
  if (kFp8 && row >= rows) {
    store_fp8_padding_row<kVecs>(q, row, vecs);
    return;
  }
  const uint4* in_row = reinterpret_cast<const uint4*>(in) + row * vecs;
  uint4 x[kVecs];
  float sum_squares = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int vec = threadIdx.x + k * blockDim.x;
    if (vec < vecs) {
      x[k] = in_row[vec];
      float v[kVecElems];
      unpack8(x[k], v);
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) sum_squares += v[i] * v[i];
    }
  }
  const float inv_rms = rsqrtf(block_sum(sum_squares) / static_cast<float>(vecs * kVecElems) + eps);
  scale_and_store<kVecs, kFp8>(out + row * vecs * kVecElems, weight, x, vecs, inv_rms, q, row);
}

// residual <- bf16(residual + in); out = rms_norm(residual) * weight.
// out, residual, in: [rows, dim] bf16, pairwise distinct; weight: [dim] bf16.
// kFp8 and `q`, `rows`: as rms_norm_kernel.
template <int kVecs, bool kFp8>
__global__ void add_rms_norm_kernel(bf16* __restrict__ out, bf16* __restrict__ residual, const bf16* __restrict__ in,
                                    const bf16* __restrict__ weight, int vecs, float eps, Fp8Rows q, int64_t rows) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  const int64_t row = blockIdx.x;
  if (kFp8 && row >= rows) {
    store_fp8_padding_row<kVecs>(q, row, vecs);
    return;
  }
  uint4* residual_row = reinterpret_cast<uint4*>(residual) + row * vecs;
  const uint4* in_row = reinterpret_cast<const uint4*>(in) + row * vecs;
  uint4 x[kVecs], addend[kVecs];
  // All loads first: a store to residual between them would keep the compiler from batching them.
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int vec = threadIdx.x + k * blockDim.x;
    if (vec < vecs) {
      x[k] = residual_row[vec];
      addend[k] = in_row[vec];
    }
  }
  float sum_squares = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int vec = threadIdx.x + k * blockDim.x;
    if (vec < vecs) {
      float r[kVecElems], a[kVecElems];
      unpack8(x[k], r);
      unpack8(addend[k], a);
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) r[i] += a[i];
      x[k] = pack8(r);  // the bf16 sum: stored, and the value that is normalized
      residual_row[vec] = x[k];
      unpack8(x[k], r);
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) sum_squares += r[i] * r[i];
    }
  }
  const float inv_rms = rsqrtf(block_sum(sum_squares) / static_cast<float>(vecs * kVecElems) + eps);
  scale_and_store<kVecs, kFp8>(out + row * vecs * kVecElems, weight, x, vecs, inv_rms, q, row);
}

void check_shape(const char* op, int64_t rows, int64_t dim, const void* a, const void* b, const void* c) {
  TACHYON_CHECK(rows >= 0 && rows <= INT32_MAX) << op << ": rows " << rows << " out of range";
  TACHYON_CHECK(dim > 0 && dim % kVecElems == 0 && dim <= int64_t{kRowMaxThreads} * kRowMaxVecs * kVecElems)
      << op << ": dim " << dim << " must be a multiple of 8 in [8, 32768]";
  for (const void* p : {a, b, c}) {
    TACHYON_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0) << op << ": pointers must be 16-byte aligned";
  }
}

// The E4M3 copy's checks (fp8_rows.h), and the grid: the padded rows when there is a copy.
unsigned norm_grid(const char* op, int64_t rows, int64_t dim, const Fp8Rows& q) {
  if (q.empty()) return static_cast<unsigned>(rows);
  TACHYON_CHECK((q.per_token || dim % 128 == 0) && q.padded_rows >= rows && q.padded_rows <= INT32_MAX &&
                q.scale != nullptr && reinterpret_cast<uintptr_t>(q.values) % 16 == 0)
      << op << ": an E4M3 copy needs dim % 128 == 0 (factors per 128 columns; dim " << dim
      << "), padded_rows >= rows (" << q.padded_rows << " < " << rows << ") and 16-byte aligned codes";
  return static_cast<unsigned>(q.padded_rows);
}

// One launch of `Launch<kVecs, kFp8>` for the row shape: kVecs the fewest vectors per thread that
// fit (row_launch), kFp8 whether there is an E4M3 copy.
template <template <int, bool> class Launch, bool kFp8, typename... Args>
void launch_norm_vecs(int vecs_per_thread, unsigned grid, dim3 block, cudaStream_t stream, Args... args) {
  with_row_vecs(vecs_per_thread, [&]<int kVecs>() { Launch<kVecs, kFp8>::run(grid, block, stream, args...); });
}

template <template <int, bool> class Launch, typename... Args>
void launch_norm(int vecs, unsigned grid, bool fp8, cudaStream_t stream, Args... args) {
  const RowLaunch launch = row_launch(vecs);
  const dim3 block(launch.threads);
  if (fp8) {
    launch_norm_vecs<Launch, true>(launch.vecs_per_thread, grid, block, stream, args...);
  } else {
    launch_norm_vecs<Launch, false>(launch.vecs_per_thread, grid, block, stream, args...);
  }
  TACHYON_CUDA_CHECK_LAUNCH();
}

template <int kVecs, bool kFp8>
struct RmsNormLaunch {
  static void run(unsigned grid, dim3 block, cudaStream_t stream, bf16* out, const bf16* in, const bf16* weight,
                  int vecs, float eps, Fp8Rows q, int64_t rows) {
    launch_pdl(rms_norm_kernel<kVecs, kFp8>, grid, block, 0, stream, out, in, weight, vecs, eps, q, rows);
  }
};

template <int kVecs, bool kFp8>
struct AddRmsNormLaunch {
  static void run(unsigned grid, dim3 block, cudaStream_t stream, bf16* out, bf16* residual, const bf16* in,
                  const bf16* weight, int vecs, float eps, Fp8Rows q, int64_t rows) {
    launch_pdl(add_rms_norm_kernel<kVecs, kFp8>, grid, block, 0, stream, out, residual, in, weight, vecs, eps, q,
               rows);
  }
};

}  // namespace

void rms_norm(bf16* out, const bf16* in, const bf16* weight, int64_t rows, int64_t dim, float eps,
              cudaStream_t stream, Fp8Rows fp8) {
  check_shape("rms_norm", rows, dim, out, in, weight);
  const unsigned grid = norm_grid("rms_norm", rows, dim, fp8);
  if (grid == 0) return;
  launch_norm<RmsNormLaunch>(static_cast<int>(dim / kVecElems), grid, !fp8.empty(), stream, out, in, weight,
                             static_cast<int>(dim / kVecElems), eps, fp8, rows);
}

void add_rms_norm(bf16* out, bf16* residual, const bf16* in, const bf16* weight, int64_t rows, int64_t dim,
                  float eps, cudaStream_t stream, Fp8Rows fp8) {
  check_shape("add_rms_norm", rows, dim, out, residual, in);
  check_shape("add_rms_norm", rows, dim, weight, weight, weight);
  TACHYON_CHECK(rows == 0 || (out != residual && out != in && residual != static_cast<const bf16*>(in)))
      << "add_rms_norm: out, residual and in must be distinct";
  const unsigned grid = norm_grid("add_rms_norm", rows, dim, fp8);
  if (grid == 0) return;
  launch_norm<AddRmsNormLaunch>(static_cast<int>(dim / kVecElems), grid, !fp8.empty(), stream, out, residual, in,
                                weight, static_cast<int>(dim / kVecElems), eps, fp8, rows);
}

}  // namespace tachyon::kernels::cuda
