// HeadGemm's products for decode-sized steps (m <= 8 rows per head): MLA's query absorption and
// value expansion as our own weight-streaming kernels instead of cuBLAS's strided-batched GEMM.
//
// Why: at batch 1 each product reads 2 MB of kv_b_proj (DeepSeek-V2-Lite: 16 heads x 128 x 512
// bf16), half a microsecond of HBM, but cuBLAS took 4.3 us per launch on an H200 and cannot take
// part in programmatic dependent launch (pdl.cuh); two per layer were ~8% of the batch-1 step.
// These kernels issue their weight loads before waiting for the previous kernel.
//
// kNone (absorption, B_h [k, n] row-major, the sum runs down B's rows): a block takes one head and
// 64 columns; its 128 threads are 16 slices of the k rows times 8 chunks of 8 columns. A thread
// keeps its rows' 16-byte chunks in flight, sums its slice for every one of the m rows of A, and
// the 16 slices' sums meet in shared memory, added in slice order.
// kTransposed (expansion, B_h [n, k]): gemv.cu's layout per head: a warp owns 2 rows of B_h, its
// lanes stream 16-byte chunks along k, then a xor tree.
// Determinism: every sum's order depends on k, n and the lane/slice layout only, never on m, so a
// row's result is bit-identical alone or in any batch.
// Test: tests/gpu/test_head_gemm.cpp (gpu_head_gemm).
#include <algorithm>
#include <cstdint>

#include "tachyon/kernels/cuda/bf16_vec.cuh"
#include "tachyon/kernels/cuda/gemv_common.cuh"
#include "tachyon/kernels/cuda/head_gemm.h"
#include "tachyon/kernels/cuda/pdl.cuh"

namespace tachyon::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kSlices = 16;       // kNone: slices of k per block
constexpr int kChunks = 8;        // kNone: 8-column chunks per block (64 columns)
constexpr int kRowBatch = 8;      // kNone: row chunks a thread has in flight
constexpr int kRowsPerWarp = 2;   // kTransposed
constexpr int kWarps = kThreads / 32;

struct Operands {
  bf16* c;
  int64_t ldc, stride_c;
  const bf16* a;
  int64_t lda, stride_a;
  const bf16* b;
  int64_t ldb, stride_b;
  int n, k;
};

// A weight chunk read once (gemv_common.cuh: no L1 allocation).
__device__ __forceinline__ uint4 load_weight(const bf16* p) {
  return gemv_detail::load_stream(reinterpret_cast<const uint4*>(p));
}

template <int M>
__global__ void __launch_bounds__(kThreads) head_gemv_down_rows_kernel(const Operands g) {
  __shared__ float partial[kSlices][M][kChunks * 8];
  const int head = blockIdx.y;
  const int chunk = threadIdx.x % kChunks, slice = threadIdx.x / kChunks;
  const int column = (blockIdx.x * kChunks + chunk) * 8;
  const bool active = column < g.n;  // n % 8 == 0: a chunk is all in or all out
  const int per_slice = (g.k + kSlices - 1) / kSlices;
  const int first = slice * per_slice, last = min(g.k, first + per_slice);
  const bf16* b = g.b + head * g.stride_b + column;
  const bf16* a = g.a + head * g.stride_a;

  float acc[M][8];
#pragma unroll
  for (int t = 0; t < M; ++t) {
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[t][e] = 0.0f;
  }
  uint4 w[kRowBatch];
  auto load_batch = [&](int i0) {
#pragma unroll
    for (int r = 0; r < kRowBatch; ++r) {
      if (active && i0 + r < last) w[r] = load_weight(b + static_cast<int64_t>(i0 + r) * g.ldb);
    }
  };
  load_batch(first);  // weights are never written by a kernel: in flight before the wait
  pdl_wait();
  pdl_launch_dependents();
  for (int i0 = first; i0 < last; i0 += kRowBatch) {
    if (i0 != first) load_batch(i0);
#pragma unroll
    for (int r = 0; r < kRowBatch; ++r) {
      if (!active || i0 + r >= last) break;
      float wf[8];
      unpack8(w[r], wf);
#pragma unroll
      for (int t = 0; t < M; ++t) {
        const float x = __bfloat162float(a[t * g.lda + i0 + r]);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[t][e] = fmaf(x, wf[e], acc[t][e]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < M; ++t) {
#pragma unroll
    for (int e = 0; e < 8; ++e) partial[slice][t][chunk * 8 + e] = acc[t][e];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < M * kChunks * 8; idx += kThreads) {
    const int t = idx / (kChunks * 8), col = idx % (kChunks * 8);
    const int out_column = blockIdx.x * kChunks * 8 + col;
    if (out_column >= g.n) continue;
    float sum = 0.0f;
    for (int s = 0; s < kSlices; ++s) sum += partial[s][t][col];
    g.c[t * g.ldc + head * g.stride_c + out_column] = __float2bfloat16_rn(sum);
  }
}

template <int M>
__global__ void __launch_bounds__(kThreads) head_gemv_along_rows_kernel(const Operands g) {
  const int head = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * kWarps + warp) * kRowsPerWarp;
  const int k8 = g.k / 8;
  const bf16* b = g.b + head * g.stride_b;
  const bf16* a = g.a + head * g.stride_a;
  const uint4* rows[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    rows[r] = reinterpret_cast<const uint4*>(b + static_cast<int64_t>(min(row0 + r, g.n - 1)) * g.ldb);
  }
  float acc[M][kRowsPerWarp];
#pragma unroll
  for (int t = 0; t < M; ++t) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) acc[t][r] = 0.0f;
  }
  // Two chunks per row and lane in flight (k = 512: every chunk of the row).
  uint4 w[2][kRowsPerWarp];
  auto load_pair = [&](int c) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        if (c + 32 * u < k8) w[u][r] = load_weight(reinterpret_cast<const bf16*>(rows[r] + c + 32 * u));
      }
    }
  };
  load_pair(lane);
  pdl_wait();
  pdl_launch_dependents();
  for (int c = lane; c < k8; c += 64) {
    if (c != lane) load_pair(c);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (c + 32 * u >= k8) break;
      float wf[kRowsPerWarp][8];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) unpack8(w[u][r], wf[r]);
#pragma unroll
      for (int t = 0; t < M; ++t) {
        float xf[8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(a + t * g.lda) + c + 32 * u), xf);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[t][r] = fmaf(xf[e], wf[r][e], acc[t][r]);
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < M; ++t) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) acc[t][r] += __shfl_xor_sync(0xffffffffu, acc[t][r], offset);
    }
  }
  float mine = 0.0f;
#pragma unroll
  for (int t = 0; t < M; ++t) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      if (lane == t * kRowsPerWarp + r) mine = acc[t][r];
    }
  }
  if (lane < M * kRowsPerWarp) {
    const int t = lane / kRowsPerWarp, row = row0 + lane % kRowsPerWarp;
    if (row < g.n) g.c[t * g.ldc + head * g.stride_c + row] = __float2bfloat16_rn(mine);
  }
}

template <int M>
void launch(const Operands& g, HeadGemmB layout, int64_t heads, cudaStream_t stream) {
  if (layout == HeadGemmB::kNone) {
    const unsigned column_blocks = static_cast<unsigned>((g.n + kChunks * 8 - 1) / (kChunks * 8));
    launch_pdl(head_gemv_down_rows_kernel<M>, dim3(column_blocks, static_cast<unsigned>(heads)), dim3(kThreads), 0,
               stream, g);
  } else {
    const unsigned row_blocks = static_cast<unsigned>((g.n + kWarps * kRowsPerWarp - 1) / (kWarps * kRowsPerWarp));
    launch_pdl(head_gemv_along_rows_kernel<M>, dim3(row_blocks, static_cast<unsigned>(heads)), dim3(kThreads), 0,
               stream, g);
  }
  TACHYON_CUDA_CHECK_LAUNCH();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool head_gemv_supports(const HeadMatrix& a, const HeadMatrix& b, HeadGemmB b_layout, int64_t m, int64_t n, int64_t k,
                        int64_t heads) {
  if (m < 1 || m > 8 || n < 1 || k < 1 || heads < 1 || heads > 65535) return false;
  if (n > (int64_t{1} << 24) || k > (int64_t{1} << 24)) return false;
  // B is read in 16-byte chunks: its rows and heads start on 16-byte boundaries.
  if (!aligned16(b.data) || b.ld % 8 != 0 || b.stride % 8 != 0) return false;
  if (b_layout == HeadGemmB::kNone) return n % 8 == 0;
  // kTransposed reads A in 16-byte chunks too.
  return k % 8 == 0 && aligned16(a.data) && a.ld % 8 == 0 && a.stride % 8 == 0;
}

void head_gemv(bf16* c, int64_t ldc, int64_t stride_c, const HeadMatrix& a, const HeadMatrix& b, HeadGemmB b_layout,
               int64_t m, int64_t n, int64_t k, int64_t heads, cudaStream_t stream) {
  TACHYON_CHECK(head_gemv_supports(a, b, b_layout, m, n, k, heads))
      << "head_gemv: unsupported m " << m << " n " << n << " k " << k << " heads " << heads
      << " (m <= 8; B 16-byte aligned with ld and stride multiples of 8; kNone: n % 8 == 0; kTransposed: k % 8 == 0 "
         "and A aligned likewise)";
  const Operands g{c, ldc, stride_c, a.data, a.ld, a.stride, b.data, b.ld, b.stride, static_cast<int>(n),
                   static_cast<int>(k)};
  switch (m) {
    case 1: return launch<1>(g, b_layout, heads, stream);
    case 2: return launch<2>(g, b_layout, heads, stream);
    case 3: return launch<3>(g, b_layout, heads, stream);
    case 4: return launch<4>(g, b_layout, heads, stream);
    case 5: return launch<5>(g, b_layout, heads, stream);
    case 6: return launch<6>(g, b_layout, heads, stream);
    case 7: return launch<7>(g, b_layout, heads, stream);
    default: return launch<8>(g, b_layout, heads, stream);
  }
}

}  // namespace tachyon::kernels::cuda
