// SwiGLU gate: out = silu(gate) * up, where one row of gate_up holds [gate | up]. Purely
// elementwise and memory-bound: one thread reads 8 gate and 8 up values (two 16-byte loads),
// computes in f32 and writes 8 outputs with one rounding to bf16 (vLLM's choice; HF rounds
// silu(gate) to bf16 before the product, a difference well inside bf16 tolerance). The grid is
// (rows, chunks of 128 vectors of a row) so neither a single decode row nor a long prefill needs
// a loop. With an E4M3 copy of one factor per row (Fp8Rows::per_token, for the per-row-scaled
// product) the row is one block instead (row_block.cuh): the row's amax must be known before its
// first code is written. Tests: tests/gpu/test_elementwise_kernels.cpp (SiluAndMul.*),
// tests/gpu/test_fp8_producers.cpp (the E4M3 copies).
#include "tachyon/kernels/cuda/activation.h"
#include "tachyon/kernels/cuda/activation.cuh"
#include "tachyon/kernels/cuda/fp8_rows.cuh"
#include "tachyon/kernels/cuda/pdl.cuh"
#include "tachyon/kernels/cuda/row_block.cuh"

#include <cstdint>

namespace tachyon::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kVecElems = 8;  // bf16 per uint4

// The SwiGLU of the 8 values of vector `vec` of `row`, rounded to bf16 as silu_and_mul_kernel rounds them.
__device__ __forceinline__ uint4 silu_and_mul_vec8(const bf16* gate_up, int64_t row, int64_t vecs_per_row,
                                                  int64_t vec) {
  const uint4* gate_row = reinterpret_cast<const uint4*>(gate_up) + row * 2 * vecs_per_row;
  const uint4 gate_bits = gate_row[vec];
  const uint4 up_bits = gate_row[vecs_per_row + vec];
  const __nv_bfloat162* gate = reinterpret_cast<const __nv_bfloat162*>(&gate_bits);
  const __nv_bfloat162* up = reinterpret_cast<const __nv_bfloat162*>(&up_bits);
  uint4 out_bits;
  __nv_bfloat162* result = reinterpret_cast<__nv_bfloat162*>(&out_bits);
#pragma unroll
  for (int i = 0; i < kVecElems / 2; ++i) {
    const float2 g = __bfloat1622float2(gate[i]);
    const float2 u = __bfloat1622float2(up[i]);
    result[i] = __floats2bfloat162_rn(silu_mul(g.x, u.x), silu_mul(g.y, u.y));
  }
  return out_bits;
}

// out: [rows, dim] bf16; gate_up: [rows, 2 * dim] bf16; vecs_per_row = dim / 8. kFp8: the E4M3
// copy `q` too (out may then be null: not written), every lane of a warp kept to the end for its
// shuffles; blocks past `rows` write the copy's padding rows only.
template <bool kFp8>
__global__ void silu_and_mul_kernel(bf16* __restrict__ out, const bf16* __restrict__ gate_up, int64_t vecs_per_row,
                                    Fp8Rows q, int64_t rows) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  const int64_t row = blockIdx.x;
  const int64_t vec = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  const bool active = vec < vecs_per_row;
  if (!kFp8 && !active) return;
  float v[kVecElems] = {};
  if (active && row < rows) {
    const uint4 out_bits = silu_and_mul_vec8(gate_up, row, vecs_per_row, vec);
    if (out != nullptr) reinterpret_cast<uint4*>(out)[row * vecs_per_row + vec] = out_bits;
    if constexpr (kFp8) unpack8(out_bits, v);  // the bf16 values fp8_quantize_rows would read
  }
  if constexpr (kFp8) store_fp8_vec8(q, row, vecs_per_row, vec, v, active);
}

// One block per row (rows past `rows`: the copy's padding, zero codes of factor 1), kVecs vectors
// per thread held as the bf16 values silu_and_mul_kernel writes; the block's amax of them gives
// the row's factor (fp8_quantize_rows_per_token's rounding, bit for bit), then the codes.
template <int kVecs>
__global__ void silu_and_mul_per_token_kernel(bf16* __restrict__ out, const bf16* __restrict__ gate_up,
                                              int vecs_per_row, Fp8Rows q, int64_t rows) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  const int64_t row = blockIdx.x;
  const bool real = row < rows;
  uint4 y[kVecs];
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int vec = threadIdx.x + k * blockDim.x;
    y[k] = make_uint4(0, 0, 0, 0);
    if (real && vec < vecs_per_row) {
      y[k] = silu_and_mul_vec8(gate_up, row, vecs_per_row, vec);
      if (out != nullptr) reinterpret_cast<uint4*>(out)[row * vecs_per_row + vec] = y[k];
      float v[kVecElems];
      unpack8(y[k], v);
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) amax = fmaxf(amax, fabsf(v[i]));
    }
  }
  store_fp8_row_per_token<kVecs>(q, row, vecs_per_row, y, amax);  // a padding row: factor 1, as the separate launch
}

void launch_per_token(bf16* out, const bf16* gate_up, int vecs_per_row, const Fp8Rows& q, int64_t rows,
                      cudaStream_t stream) {
  const RowLaunch launch = row_launch(vecs_per_row);
  const dim3 grid(static_cast<unsigned>(q.padded_rows)), block(launch.threads);
  with_row_vecs(launch.vecs_per_thread, [&]<int kVecs>() {
    launch_pdl(silu_and_mul_per_token_kernel<kVecs>, grid, block, 0, stream, out, gate_up, vecs_per_row, q, rows);
  });
}

}  // namespace

void silu_and_mul(bf16* out, const bf16* gate_up, int64_t rows, int64_t dim, cudaStream_t stream, Fp8Rows fp8) {
  TACHYON_CHECK(rows >= 0 && rows <= INT32_MAX) << "silu_and_mul: rows " << rows << " out of range";
  TACHYON_CHECK(dim > 0 && dim % kVecElems == 0) << "silu_and_mul: dim " << dim << " must be a positive multiple of 8";
  TACHYON_CHECK((rows == 0 || out != nullptr || !fp8.empty()) && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(gate_up) % 16 == 0)
      << "silu_and_mul: out (null only with an E4M3 copy) and gate_up must be 16-byte aligned";
  const int64_t vecs_per_row = dim / kVecElems;
  TACHYON_CHECK((vecs_per_row + kThreads - 1) / kThreads <= 65535) << "silu_and_mul: dim " << dim << " too large";
  TACHYON_CHECK(fp8.empty() || (fp8.padded_rows >= rows && fp8.padded_rows <= INT32_MAX && fp8.scale != nullptr &&
                                reinterpret_cast<uintptr_t>(fp8.values) % 16 == 0))
      << "silu_and_mul: an E4M3 copy needs padded_rows >= rows, factors and 16-byte aligned codes";
  if (fp8.per_token) {
    TACHYON_CHECK(dim % 16 == 0 && dim <= int64_t{kRowMaxThreads} * kRowMaxVecs * kVecElems)
        << "silu_and_mul: an E4M3 copy of one factor per row needs dim % 16 == 0 and dim <= 32768 (dim " << dim << ")";
    if (fp8.padded_rows == 0) return;
    launch_per_token(out, gate_up, static_cast<int>(vecs_per_row), fp8, rows, stream);
    TACHYON_CUDA_CHECK_LAUNCH();
    return;
  }
  TACHYON_CHECK(fp8.empty() || dim % 128 == 0)
      << "silu_and_mul: an E4M3 copy of factors per 128 columns needs dim % 128 == 0 (dim " << dim << ")";
  const int64_t grid_rows = fp8.empty() ? rows : fp8.padded_rows;
  if (grid_rows == 0) return;
  const dim3 grid(static_cast<unsigned>(grid_rows), static_cast<unsigned>((vecs_per_row + kThreads - 1) / kThreads));
  if (fp8.empty()) {
    launch_pdl(silu_and_mul_kernel<false>, grid, dim3(kThreads), 0, stream, out, gate_up, vecs_per_row, fp8, rows);
  } else {
    launch_pdl(silu_and_mul_kernel<true>, grid, dim3(kThreads), 0, stream, out, gate_up, vecs_per_row, fp8, rows);
  }
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
