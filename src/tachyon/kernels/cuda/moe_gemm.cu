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
// E4M3 experts (kFp8): the raw weight slices stream by cp.async through three stages and each is
// widened to bf16 in shared memory just before its MMAs. (Loaded through registers, as this
// kernel first did, the slice in flight cost 166 registers and one slice of prefetch, and at
// DeepSeek-V3-reduced's batch 32 on an H100 the E4M3 step was 24% slower than the bf16 one.) The
// MMAs of each 128-wide k block (two slices) sum into their own accumulators, which are then
// scaled by each weight row's factor for that block and added to the output's (the factor is
// applied in f32, never rounded into the bf16 operand).
// Why not E4M3 MMAs: mma.sync's m16n8k32 E4M3 form is Ada's; on Hopper (sm_90a) ptxas emulates
// it by widening to f16 for the f16 tensor cores (a variant written here took 238 registers).
// Hopper's FP8 tensor cores are reached through wgmma only, with operands in shared memory:
// moe_gemm_wgmma.cu (with inputs quantized as the dense FP8 products take them) is that kernel.
// Test: tests/gpu/test_moe_kernels.cpp.
#include "tachyon/kernels/cuda/attention_common.cuh"
#include "tachyon/kernels/cuda/fp8_kv.cuh"
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
  const void* w;        // [num_experts, n, k] bf16, or E4M3 (kFp8)
  const float* scale;   // kFp8: [num_experts, n, scale_cols] factors
  const int32_t* sorted_rows;
  const int32_t* block_expert;
  int64_t a_row_divisor;
  int64_t n;
  int64_t k;
  int64_t scale_cols;   // kFp8: ceil(k / 128)
};

// 16 E4M3 values to 16 bf16 (exact: every E4M3 value is a bf16 value), as two 16-byte chunks.
__device__ __forceinline__ void widen_e4m3(const uint4& bits, uint4& lo, uint4& hi) {
  const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
  uint32_t out[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 pair = e4m3x2_to_float2(words[i], h);
      out[2 * i + h] = pack_bf16(pair.x, pair.y);
    }
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

// Occupancy floors: the bf16 form at 5 CTAs per SM (96 registers, no spills; left free, ptxas
// took 116 for the precomputed sources below), the E4M3 form at 4 (its 45 KB of shared memory).
template <bool kFp8>
__global__ void __launch_bounds__(kThreads, kFp8 ? 4 : 5) grouped_gemm_kernel(const GroupedGemmArgs g) {
  const int expert = g.block_expert[blockIdx.y];
  if (expert < 0) return;
  // bf16 B: each stage's weight slice lands in its own swizzled tile, read by ldmatrix. E4M3 B:
  // the raw slice (64 rows x 64 bytes) lands in its stage, and is widened into the one bf16 tile
  // just before its MMAs. Three stages keep two raw slices in flight while a tile is awaited and
  // multiplied (the weights are the HBM stream; 44 KB of static shared memory).
  constexpr int kStages = kFp8 ? 3 : 2;
  constexpr int kBTiles = kFp8 ? 1 : kStages;
  constexpr int kRawBytes = kFp8 ? kBlockN * kBlockK : 16;  // E4M3: one byte per value
  __shared__ __align__(128) bf16 s_a[kStages][kTileElems];
  __shared__ __align__(128) bf16 s_b[kBTiles][kTileElems];
  __shared__ __align__(128) uint8_t s_b8[kFp8 ? kStages : 1][kRawBytes];
  __shared__ int32_t s_rows[kMoeBlockM];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t my_row = tid < kMoeBlockM ? g.sorted_rows[static_cast<int64_t>(blockIdx.y) * kMoeBlockM + tid] : -1;
  if (tid < kMoeBlockM) s_rows[tid] = my_row;
  // A block's pairs are a prefix of its 64 slots (moe_align pads with -1): m16 tiles past them
  // are padding, whose MMAs would only fill rows nobody writes. A decode batch holds a few pairs
  // per expert, so skipping them is most of the tensor-core work (bit-identical: a real row's
  // sums never read a padding row). At 4 pairs and E4M3 weights the MMAs of all 64 rows took as
  // long as the slice's bytes take to arrive.
  const int rows_used = __syncthreads_count(my_row >= 0);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBlockN;
  const int64_t expert_offset = static_cast<int64_t>(expert) * g.n * g.k;
  const bf16* w = static_cast<const bf16*>(g.w) + expert_offset;          // bf16
  const uint8_t* w8 = static_cast<const uint8_t*>(g.w) + expert_offset;   // E4M3
  const int k_tiles = static_cast<int>((g.k + kBlockK - 1) / kBlockK);

  // One k slice into `stage`: 64 rows x 8 chunks for A (and for bf16 B), 4 chunks of each per
  // thread; E4M3 B is 64 rows x 4 chunks of 16 values, 2 per thread. A thread copies the same
  // rows and chunk column of every slice, so their sources are worked out once: a pair's input
  // row is a division by a_row_divisor (64-bit), which per chunk and slice cost more instructions
  // than the slice's MMAs. Rows past the live m16 tiles are not copied at all (nothing reads them).
  constexpr int kAChunks = kMoeBlockM * 8 / kThreads;
  constexpr int kB8Chunks = kBlockN * (kBlockK / 16) / kThreads;
  const int live_rows = (rows_used + 15) / 16 * 16;
  const bf16* a_row[kAChunks];  // this thread's chunk column of its A rows; null: padding
  const void* b_row[kFp8 ? kB8Chunks : kAChunks];  // its chunk column of its weight rows; null: past n
#pragma unroll
  for (int i = 0; i < kAChunks; ++i) {
    const int r = (tid >> 3) + i * (kThreads / 8);
    const int32_t pair = s_rows[r];
    a_row[i] = pair >= 0 ? g.a + (pair / g.a_row_divisor) * g.k + (tid & 7) * 8 : nullptr;
    if constexpr (!kFp8) b_row[i] = n0 + r < g.n ? w + (n0 + r) * g.k + (tid & 7) * 8 : nullptr;
  }
  if constexpr (kFp8) {
#pragma unroll
    for (int i = 0; i < kB8Chunks; ++i) {
      const int r = (tid >> 2) + i * (kThreads / 4);
      b_row[i] = n0 + r < g.n ? w8 + (n0 + r) * g.k + (tid & 3) * 16 : nullptr;
    }
  }
  auto load = [&](int stage, int tile) {
    const int64_t k0 = static_cast<int64_t>(tile) * kBlockK;
    const bool a_in_k = k0 + (tid & 7) * 8 < g.k;  // also bf16 B's chunk
#pragma unroll
    for (int i = 0; i < kAChunks; ++i) {
      const int r = (tid >> 3) + i * (kThreads / 8);
      const int c = tid & 7;
      if (r < live_rows) {
        const bool a_valid = a_row[i] != nullptr && a_in_k;
        cp_async_16(smem_u32(&s_a[stage][swizzled<kBlockK>(r, c)]), a_valid ? a_row[i] + k0 : g.a, a_valid);
      }
      if constexpr (!kFp8) {
        const bf16* b = static_cast<const bf16*>(b_row[i]);
        const bool b_valid = b != nullptr && a_in_k;
        cp_async_16(smem_u32(&s_b[stage][swizzled<kBlockK>(r, c)]), b_valid ? b + k0 : w, b_valid);
      }
    }
    if constexpr (kFp8) {
      const bool in_k = k0 + (tid & 3) * 16 < g.k;  // k % 16 == 0: a chunk is all in or all out
#pragma unroll
      for (int i = 0; i < kB8Chunks; ++i) {
        const uint8_t* b = static_cast<const uint8_t*>(b_row[i]);
        const bool valid = b != nullptr && in_k;
        cp_async_16(smem_u32(&s_b8[stage][(tid + i * kThreads) * 16]), valid ? b + k0 : w8, valid);
      }
    }
  };
  // E4M3: the stage's raw slice widened into the bf16 tile, each thread the chunks it copied.
  auto widen_b8 = [&](int stage) {
#pragma unroll
    for (int i = 0; i < kB8Chunks; ++i) {
      const int idx = tid + i * kThreads;
      const int r = idx >> 2, c = idx & 3;
      uint4 lo, hi;
      widen_e4m3(*reinterpret_cast<const uint4*>(&s_b8[stage][idx * 16]), lo, hi);
      *reinterpret_cast<uint4*>(&s_b[0][swizzled<kBlockK>(r, 2 * c)]) = lo;
      *reinterpret_cast<uint4*>(&s_b[0][swizzled<kBlockK>(r, 2 * c + 1)]) = hi;
    }
  };

  const int mat = lane >> 3, r8 = lane & 7;
  const int warp_m = (warp >> 1) * 32, warp_n = (warp & 1) * 32;
  // C fragment: rows g and g + 8 of each m16 tile, columns 2c and 2c + 1 of each n8 tile.
  const int gr = lane >> 2, c2 = 2 * (lane & 3);
  const bool live[2] = {warp_m < rows_used, warp_m + 16 < rows_used};  // warp-uniform: the m16 tiles with pairs
  float acc[2][4][4] = {};
  float block_acc[2][4][4] = {};  // kFp8: the current 128-wide k block's sums
  float (&mma_acc)[2][4][4] = kFp8 ? block_acc : acc;
  // kFp8: the block's sums times each column's (weight row's) factor for k block `kb`, into acc.
  auto promote = [&](int64_t kb) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int64_t col = n0 + warp_n + nt * 8 + c2 + j;
        const float factor = col < g.n ? __ldg(g.scale + (static_cast<int64_t>(expert) * g.n + col) * g.scale_cols + kb)
                                       : 0.0f;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            acc[mt][nt][2 * half + j] = fmaf(block_acc[mt][nt][2 * half + j], factor, acc[mt][nt][2 * half + j]);
            block_acc[mt][nt][2 * half + j] = 0.0f;
          }
        }
      }
    }
  };

  // The first kStages - 1 slices in flight; one commit group per slice (empty past the end), so
  // "all but the kStages - 1 newest groups have landed" always means "this tile has landed".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load(s, s);
    cp_async_commit();
  }
  for (int tile = 0; tile < k_tiles; ++tile) {
    const int stage = tile % kStages;
    // The stage refilled here was read by the previous tile, which ended with a barrier.
    const int next = tile + kStages - 1;
    if (next < k_tiles) load(next % kStages, next);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncthreads();
    if constexpr (kFp8) {
      widen_b8(stage);  // the bf16 tile's last readers, the previous tile's MMAs, are past a barrier
      __syncthreads();
    }
    const bf16* b_tile = s_b[kFp8 ? 0 : stage];
    if (live[0]) {  // a warp whose tiles are all padding only meets the barriers
#pragma unroll
      for (int ks = 0; ks < kBlockK / 16; ++ks) {
        uint32_t a_frag[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          if (!live[mt]) continue;
          const int row = warp_m + mt * 16 + (mat & 1) * 8 + r8;
          ldmatrix_x4(a_frag[mt], smem_u32(&s_a[stage][swizzled<kBlockK>(row, 2 * ks + (mat >> 1))]));
        }
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          uint32_t b[4];
          const int row = warp_n + np * 16 + (mat >> 1) * 8 + r8;
          ldmatrix_x4(b, smem_u32(&b_tile[swizzled<kBlockK>(row, 2 * ks + (mat & 1))]));
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            if (!live[mt]) continue;
            mma_bf16_16816(mma_acc[mt][2 * np], a_frag[mt], b[0], b[1]);
            mma_bf16_16816(mma_acc[mt][2 * np + 1], a_frag[mt], b[2], b[3]);
          }
        }
      }
    }
    if constexpr (kFp8) {
      // Two 64-wide slices make a 128-wide factor block; the last block may be shorter.
      if (tile % 2 == 1 || tile + 1 == k_tiles) promote(tile / 2);
    }
    __syncthreads();  // every warp is done with this stage (and the bf16 tile) before they are refilled
  }

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

void check_and_launch(const char* name, const GroupedGemmArgs& args, int64_t capacity, cudaStream_t stream) {
  const int64_t k_multiple = args.scale == nullptr ? 8 : 16;
  TACHYON_CHECK(args.n > 0 && args.n % 8 == 0 && args.k > 0 && args.k % k_multiple == 0)
      << name << ": n " << args.n << " must be a positive multiple of 8 and k " << args.k << " of " << k_multiple;
  TACHYON_CHECK(args.a_row_divisor >= 1) << name << ": a_row_divisor " << args.a_row_divisor;
  TACHYON_CHECK(capacity >= 0 && capacity % kMoeBlockM == 0 && capacity / kMoeBlockM <= 65535)
      << name << ": capacity " << capacity << " must be a multiple of " << kMoeBlockM << " (moe_sorted_capacity)";
  for (const void* p : {static_cast<const void*>(args.out), static_cast<const void*>(args.a), args.w}) {
    TACHYON_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0) << name << ": out, a and w must be 16-byte aligned";
  }
  if (capacity == 0) return;
  const dim3 grid(static_cast<unsigned>((args.n + kBlockN - 1) / kBlockN),
                  static_cast<unsigned>(capacity / kMoeBlockM));
  if (args.scale == nullptr) {
    grouped_gemm_kernel<false><<<grid, kThreads, 0, stream>>>(args);
  } else {
    grouped_gemm_kernel<true><<<grid, kThreads, 0, stream>>>(args);
  }
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void moe_grouped_gemm(bf16* out, const bf16* a, const bf16* w, const int32_t* sorted_rows,
                      const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k,
                      cudaStream_t stream) {
  check_and_launch("moe_grouped_gemm",
                   GroupedGemmArgs{out, a, w, nullptr, sorted_rows, block_expert, a_row_divisor, n, k, 0}, capacity,
                   stream);
}

void moe_grouped_gemm(bf16* out, const bf16* a, const uint8_t* w, const float* w_scale, const int32_t* sorted_rows,
                      const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k,
                      cudaStream_t stream) {
  TACHYON_CHECK(w_scale != nullptr) << "moe_grouped_gemm: no factors for the E4M3 experts";
  check_and_launch("moe_grouped_gemm (E4M3)",
                   GroupedGemmArgs{out, a, w, w_scale, sorted_rows, block_expert, a_row_divisor, n, k, (k + 127) / 128},
                   capacity, stream);
}

}  // namespace tachyon::kernels::cuda
