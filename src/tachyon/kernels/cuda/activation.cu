// SwiGLU gate: out = silu(gate) * up, where one row of gate_up holds [gate | up]. Purely
// elementwise and memory-bound: one thread reads 8 gate and 8 up values (two 16-byte loads),
// computes in f32 and writes 8 outputs with one rounding to bf16 (vLLM's choice; HF rounds
// silu(gate) to bf16 before the product, a difference well inside bf16 tolerance). The grid is
// (rows, chunks of 128 vectors of a row) so neither a single decode row nor a long prefill needs
// a loop. Test: tests/gpu/test_elementwise_kernels.cpp (SiluAndMul.*).
#include "tachyon/kernels/cuda/activation.h"
#include "tachyon/kernels/cuda/activation.cuh"
#include "tachyon/kernels/cuda/fp8_rows.cuh"
#include "tachyon/kernels/cuda/pdl.cuh"

#include <cstdint>

namespace tachyon::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kVecElems = 8;  // bf16 per uint4

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
    if (out != nullptr) reinterpret_cast<uint4*>(out)[row * vecs_per_row + vec] = out_bits;
    if constexpr (kFp8) unpack8(out_bits, v);  // the bf16 values fp8_quantize_rows would read
  }
  if constexpr (kFp8) store_fp8_vec8(q, row, vecs_per_row, vec, v, active);
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
  TACHYON_CHECK(fp8.empty() || (!fp8.per_token && dim % 128 == 0 && fp8.padded_rows >= rows &&
                                fp8.padded_rows <= INT32_MAX &&
                                fp8.scale != nullptr && reinterpret_cast<uintptr_t>(fp8.values) % 16 == 0))
      << "silu_and_mul: an E4M3 copy needs factors per 128 columns (not per token), dim % 128 == 0 (dim " << dim
      << "), padded_rows >= rows and 16-byte aligned codes";
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
