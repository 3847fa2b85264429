// Per-head matrix products: the same GEMM over every attention head, each head's operands at a
// fixed stride, in ONE launch (cuBLAS strided-batched GEMM, bf16 in and out, f32 accumulation).
// Why: MLA's absorbed form (model/mla_absorbed.h) multiplies each head's query by that head's
// W_uk and each head's attended latent by its W_uv^T; both weights are row blocks of kv_b_proj,
// and looping over 16-128 heads with one launch each would cost more than the products.
//   q_latent[t, h, :rank] = q[t, h, :nope] @ W_uk_h            (kNone: B_h is [k, n] row-major)
//   out[t, h, :v]         = out_latent[t, h, :rank] @ W_uv_h^T (kTransposed: B_h is [n, k])
// All matrices are row-major: element (i, j) of head h's A sits at a + h * stride_a + i * lda + j.
// Up to 8 rows (decode) run our own kernels (head_gemv.cu), which stream B once, take part in
// programmatic dependent launch and give a row the same bits alone or in a batch; more rows, or
// operands those kernels cannot read in 16-byte chunks, run cuBLAS.
// CPU twin: a loop over heads of kernels::cpu::linear. Test: tests/gpu/test_head_gemm.cpp.
#pragma once

#include <cstdint>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

struct HeadMatrix {
  const bf16* data = nullptr;
  int64_t ld = 0;      // elements between rows
  int64_t stride = 0;  // elements between heads
};

enum class HeadGemmB { kNone, kTransposed };

// HeadGemm::run's product by head_gemv.cu's kernels: m in [1, 8]; B 16-byte aligned with ld and
// stride multiples of 8; kNone: n % 8 == 0; kTransposed: k % 8 == 0 and A aligned as B.
bool head_gemv_supports(const HeadMatrix& a, const HeadMatrix& b, HeadGemmB b_layout, int64_t m, int64_t n, int64_t k,
                        int64_t heads);
void head_gemv(bf16* c, int64_t ldc, int64_t stride_c, const HeadMatrix& a, const HeadMatrix& b, HeadGemmB b_layout,
               int64_t m, int64_t n, int64_t k, int64_t heads, cudaStream_t stream);

class HeadGemm {
 public:
  // Creates the cuBLAS handle and gives it a fixed workspace, so that products can be captured
  // in a CUDA graph (cuBLAS would otherwise allocate during capture).
  HeadGemm();
  ~HeadGemm();
  HeadGemm(const HeadGemm&) = delete;
  HeadGemm& operator=(const HeadGemm&) = delete;

  // For h < heads: C_h[m, n] = A_h[m, k] @ (B_h or B_h^T). c.data is written (bf16, one rounding
  // of the f32 sum); m == 0 launches nothing.
  void run(bf16* c, int64_t ldc, int64_t stride_c, const HeadMatrix& a, const HeadMatrix& b, HeadGemmB b_layout,
           int64_t m, int64_t n, int64_t k, int64_t heads, cudaStream_t stream);

 private:
  void* handle_ = nullptr;  // cublasHandle_t
  void* workspace_ = nullptr;
};

}  // namespace tachyon::kernels::cuda
