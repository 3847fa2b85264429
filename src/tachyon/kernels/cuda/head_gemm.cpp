#include "tachyon/kernels/cuda/head_gemm.h"

#include <cublas_v2.h>

namespace tachyon::kernels::cuda {
namespace {

// cuBLAS asks for at least 4 MiB per stream on Hopper; 32 MiB covers its split-K choices.
constexpr size_t kWorkspaceBytes = 32u << 20;

#define TACHYON_HEAD_GEMM_CHECK(call)                                                          \
  do {                                                                                         \
    const cublasStatus_t head_gemm_status = (call);                                            \
    TACHYON_CHECK(head_gemm_status == CUBLAS_STATUS_SUCCESS)                                   \
        << #call << ": " << cublasGetStatusName(head_gemm_status) << " ("                      \
        << cublasGetStatusString(head_gemm_status) << ")";                                     \
  } while (0)

cublasHandle_t as_handle(void* handle) { return static_cast<cublasHandle_t>(handle); }

}  // namespace

HeadGemm::HeadGemm() {
  cublasHandle_t handle = nullptr;
  TACHYON_HEAD_GEMM_CHECK(cublasCreate(&handle));
  handle_ = handle;
  TACHYON_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  TACHYON_HEAD_GEMM_CHECK(cublasSetWorkspace(handle, workspace_, kWorkspaceBytes));
}

HeadGemm::~HeadGemm() {
  if (handle_ != nullptr) cublasDestroy(as_handle(handle_));
  if (workspace_ != nullptr) cudaFree(workspace_);
}

void HeadGemm::run(bf16* c, int64_t ldc, int64_t stride_c, const HeadMatrix& a, const HeadMatrix& b,
                   HeadGemmB b_layout, int64_t m, int64_t n, int64_t k, int64_t heads, cudaStream_t stream) {
  TACHYON_CHECK(m >= 0 && n > 0 && k > 0 && heads > 0) << "HeadGemm: bad shape m " << m << " n " << n << " k " << k
                                                       << " heads " << heads;
  if (m == 0) return;
  if (head_gemv_supports(a, b, b_layout, m, n, k, heads)) {
    head_gemv(c, ldc, stride_c, a, b, b_layout, m, n, k, heads, stream);
    return;
  }
  cublasHandle_t handle = as_handle(handle_);
  TACHYON_HEAD_GEMM_CHECK(cublasSetStream(handle, stream));
  // Row-major C = A op(B) is column-major C^T = op(B)^T A^T: cuBLAS sees C^T [n x m] = B' [n x k]
  // times A^T [k x m], where a row-major [k, n] B is already B' (no transpose) and a row-major
  // [n, k] B is (B')^T.
  const cublasOperation_t op_b = b_layout == HeadGemmB::kNone ? CUBLAS_OP_N : CUBLAS_OP_T;
  const float alpha = 1.0f, beta = 0.0f;
  TACHYON_HEAD_GEMM_CHECK(cublasGemmStridedBatchedEx(
      handle, op_b, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b.data,
      CUDA_R_16BF, static_cast<int>(b.ld), b.stride, a.data, CUDA_R_16BF, static_cast<int>(a.ld), a.stride, &beta, c,
      CUDA_R_16BF, static_cast<int>(ldc), stride_c, static_cast<int>(heads), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace tachyon::kernels::cuda
