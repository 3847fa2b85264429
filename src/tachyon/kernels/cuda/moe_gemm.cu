// The grouped expert GEMM of moe.h: one launch for every expert. The grid is (n tiles, blocks
// of sorted_rows); a CTA reads its block's expert from block_expert (-1: past the end, exit),
// gathers its 64 pairs' input rows (a padding row, -1, loads zeros and is not written), and
// multiplies them by 64 rows of that expert's weight on the tensor cores (mma.sync m16n8k16 bf16
// -> f32, operands through ldmatrix from swizzled shared memory, as the attention kernels do),
// with the next 64-wide k slice streaming in by cp.async while the current one is multiplied.
// 4 warps in a 2 x 2 grid, each owning 32 x 32 of the 64 x 64 output tile.
// Decode steps (a few pairs per expert) waste most of each 64-row tile and do not stream the
// weights at HBM bandwidth (2.6-3.7x the byte floor at DeepSeek-V2-Lite's batch 1 on an H200):
// steps of up to 8 tokens take moe_grouped_gemv (moe_gemv.cu) instead.
// Test: tests/gpu/test_moe_kernels.cpp.
#include "tachyon/kernels/cuda/attention_common.cuh"
#include "tachyon/kernels/cuda/moe.h"

namespace tachyon::kernels::cuda {
namespace {

using namespace attention_detail;

constexpr int kBlockN = 64;
constexpr int kBlockK = 64;  // 8 chunks of 16 bytes per row: the swizzle of attention_common
constexpr int kThreads = 128;
constexpr int kTileElems = kMoeBlockM * kBlockK;  // == kBlockN * kBlockK

struct GroupedGemmArgs {
  bf16* out;
  const bf16* a;
  const bf16* w;
  const int32_t* sorted_rows;
  const int32_t* block_expert;
  int64_t a_row_divisor;
  int64_t n;
  int64_t k;
};

__global__ void __launch_bounds__(kThreads) grouped_gemm_kernel(const GroupedGemmArgs g) {
  const int expert = g.block_expert[blockIdx.y];
  if (expert < 0) return;
  __shared__ __align__(128) bf16 s_a[2][kTileElems];
  __shared__ __align__(128) bf16 s_b[2][kTileElems];
  __shared__ int32_t s_rows[kMoeBlockM];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid < kMoeBlockM) s_rows[tid] = g.sorted_rows[static_cast<int64_t>(blockIdx.y) * kMoeBlockM + tid];
  __syncthreads();
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBlockN;
  const bf16* w = g.w + static_cast<int64_t>(expert) * g.n * g.k;
  const int k_tiles = static_cast<int>((g.k + kBlockK - 1) / kBlockK);

  // One k slice: 64 rows x 8 chunks for A and for B, 4 chunks of each per thread.
  auto load = [&](int buffer, int tile) {
    const int64_t k0 = static_cast<int64_t>(tile) * kBlockK;
#pragma unroll
    for (int i = 0; i < kMoeBlockM * 8 / kThreads; ++i) {
      const int idx = tid + i * kThreads;
      const int r = idx >> 3, c = idx & 7;
      const int64_t kk = k0 + c * 8;
      const int32_t pair = s_rows[r];
      const bool a_valid = pair >= 0 && kk < g.k;
      const bf16* a_src = g.a + (a_valid ? (pair / g.a_row_divisor) * g.k + kk : 0);
      cp_async_16(smem_u32(&s_a[buffer][swizzled<kBlockK>(r, c)]), a_src, a_valid);
      const bool b_valid = n0 + r < g.n && kk < g.k;
      const bf16* b_src = w + (b_valid ? (n0 + r) * g.k + kk : 0);
      cp_async_16(smem_u32(&s_b[buffer][swizzled<kBlockK>(r, c)]), b_src, b_valid);
    }
  };

  const int mat = lane >> 3, r8 = lane & 7;
  const int warp_m = (warp >> 1) * 32, warp_n = (warp & 1) * 32;
  float acc[2][4][4] = {};
  load(0, 0);
  cp_async_commit();
  for (int tile = 0; tile < k_tiles; ++tile) {
    const int buffer = tile & 1;
    if (tile + 1 < k_tiles) load(buffer ^ 1, tile + 1);
    cp_async_commit();
    cp_async_wait<1>();  // this tile's group has landed; the next one may still be in flight
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kBlockK / 16; ++ks) {
      uint32_t a_frag[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        ldmatrix_x4(a_frag[mt],
                    smem_u32(&s_a[buffer][swizzled<kBlockK>(warp_m + mt * 16 + (mat & 1) * 8 + r8, 2 * ks + (mat >> 1))]));
      }
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_u32(&s_b[buffer][swizzled<kBlockK>(warp_n + np * 16 + (mat >> 1) * 8 + r8, 2 * ks + (mat & 1))]));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_bf16_16816(acc[mt][2 * np], a_frag[mt], b[0], b[1]);
          mma_bf16_16816(acc[mt][2 * np + 1], a_frag[mt], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this buffer before the next iteration refills it
  }

  // C fragment: rows g and g + 8 of each m16 tile, columns 2c and 2c + 1 of each n8 tile.
  const int gr = lane >> 2, c2 = 2 * (lane & 3);
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int32_t pair = s_rows[warp_m + mt * 16 + gr + half * 8];
      if (pair < 0) continue;
      bf16* out_row = g.out + static_cast<int64_t>(pair) * g.n;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int64_t col = n0 + warp_n + nt * 8 + c2;
        if (col >= g.n) continue;
        *reinterpret_cast<uint32_t*>(out_row + col) = pack_bf16(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
      }
    }
  }
}

}  // namespace

void moe_grouped_gemm(bf16* out, const bf16* a, const bf16* w, const int32_t* sorted_rows,
                      const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k,
                      cudaStream_t stream) {
  TACHYON_CHECK(n > 0 && n % 8 == 0 && k > 0 && k % 8 == 0)
      << "moe_grouped_gemm: n " << n << " and k " << k << " must be positive multiples of 8";
  TACHYON_CHECK(a_row_divisor >= 1) << "moe_grouped_gemm: a_row_divisor " << a_row_divisor;
  TACHYON_CHECK(capacity >= 0 && capacity % kMoeBlockM == 0 && capacity / kMoeBlockM <= 65535)
      << "moe_grouped_gemm: capacity " << capacity << " must be a multiple of " << kMoeBlockM << " (moe_sorted_capacity)";
  for (const void* p : {static_cast<const void*>(out), static_cast<const void*>(a), static_cast<const void*>(w)}) {
    TACHYON_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0) << "moe_grouped_gemm: out, a and w must be 16-byte aligned";
  }
  if (capacity == 0) return;
  const dim3 grid(static_cast<unsigned>((n + kBlockN - 1) / kBlockN), static_cast<unsigned>(capacity / kMoeBlockM));
  grouped_gemm_kernel<<<grid, kThreads, 0, stream>>>(
      GroupedGemmArgs{out, a, w, sorted_rows, block_expert, a_row_divisor, n, k});
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
