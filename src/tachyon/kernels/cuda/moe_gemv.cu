// The grouped expert GEMV of moe.h: moe_grouped_gemm's product for decode-sized steps (every
// expert holds at most M <= 8 pairs), streaming each active expert's weight once at HBM rate.
//
// Why: at T <= 8 tokens an expert has at most T pairs, so the GEMM's 64-row tensor-core tiles
// are nearly all padding and its CTAs walk k serially: on an H200 at DeepSeek-V2-Lite's layer
// (hidden 2048, 64 experts of 1408, top 6), T = 1, it took 43 us (gate_up) and 30 us (down)
// where the 6 active experts' weight bytes (69 MB and 35 MB) give floors of 16.5 and 8.2 us.
// This is gemv.cu's kernel per expert block: a warp owns R weight rows of its block's expert
// (2 for M <= 3, 4 above), its lanes stream 16-byte chunks with ld.global.nc.L1::no_allocate,
// R * U = 8 loads in flight per lane, and the block's M pair rows of `a` (gathered through
// sorted_rows, p / a_row_divisor) are read through L1 and reused R times. Slots past the
// expert's real pair count skip their FMAs (a warp-uniform branch): the weight is the cost.
//
// Geometry (all host-known, graph-capturable): grid (row blocks of n, expert blocks). A block
// of 4 warps reads its expert from block_expert after pdl_wait (the expert id is moe_align's
// output, so unlike gemv no weight load can start before it) and exits on -1; blocks past the
// active ones are the price of not reading the count back. To keep that price small:
//   - grid.y = min(capacity / 64, 16 * M): a step whose experts hold <= M pairs each reaches at
//     most 16 * M experts when M >= T (16 = the routers' top_k limit); a block loops over
//     expert blocks y, y + grid.y, ... until it meets -1, so a smaller grid stays correct;
//   - each warp team streams `groups` row groups of R rows, sized so that 4 active experts
//     already give ~16 warps per SM. At T = 1 (M = 1, R = 2, no k split) on an H200:
//     V2-Lite gate_up (n 2816, k 2048) is grid 176 x 16, 2 groups (16 KB) per warp, 6 x 176
//     blocks working; down (n 2048, k 1408) is grid 256 x 16, 1 group (5.6 KB) per warp.
// SwiGLU epilogue (moe_grouped_gemv_silu, the gate_up product at decode): a warp's R rows are
// R / 2 gate rows and the R / 2 up rows that pair with them (row j and row I + j), so one lane
// holds both sums of an output and writes silu(gate) * up, rounding gate and up to bf16 first
// as silu_and_mul reads them: the activations are bit-identical to this kernel without the
// epilogue followed by silu_and_mul, one launch and one [pairs, 2I] round trip fewer.
// Determinism: a row's sum order is each lane's chunks in k order, the warp's xor tree, then
// the k-split warps' partials in order; the split is chosen from n, k and the SM count only,
// never from M, the groups or the routing, so a pair's output is bit-identical alone or in
// any batch and at any max_pairs_per_expert.
// FP8 experts (moe_grouped_gemv's E4M3 overloads): the same kernel streams 16 E4M3 values per
// 16-byte chunk with one f32 factor per row and 128 columns, applied to each chunk's partial dot,
// as gemv.cu's fp8_gemv does (the formats are gemv_common.cuh's): half the bytes per expert.
// Test: tests/gpu/test_moe_kernels.cpp (gpu_moe_kernels).
#include "tachyon/kernels/cuda/activation.cuh"
#include "tachyon/kernels/cuda/bf16_vec.cuh"
#include "tachyon/kernels/cuda/gemv_common.cuh"
#include "tachyon/kernels/cuda/moe.h"
#include "tachyon/kernels/cuda/pdl.cuh"
#include "tachyon/tensor/cuda/device_buffer.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace tachyon::kernels::cuda {
namespace {

using namespace gemv_detail;

constexpr int kMinActiveExperts = 4;     // a decode step streams >= top_k experts; sizes split and groups
constexpr int kMaxExpertsPerToken = 16;  // moe_topk_softmax / moe_topk_sigmoid_grouped's top_k limit
constexpr int kMaxGroupsPerTeam = 8;

// acc[m][r] += dot(pair m's row, weight row r) over chunk c, for the `count` real pairs.
template <int M, int R>
__device__ __forceinline__ void accumulate(float (&acc)[M][R], const uint4 (&w)[R], const float (&)[R],
                                           const uint4* const (&x)[M], int count, int c, const Bf16Weights&) {
  float wf[R][kChunk];
#pragma unroll
  for (int r = 0; r < R; ++r) unpack8(w[r], wf[r]);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if (m >= count) break;  // warp-uniform: empty slots cost no loads and no FMAs
    float xf[kChunk];
    unpack8(__ldg(x[m] + c), xf);
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int i = 0; i < kChunk; ++i) acc[m][r] = fmaf(xf[i], wf[r][i], acc[m][r]);
    }
  }
}

// The E4M3 chunk c covers input chunks 2c and 2c + 1; s: the R rows' factors for it.
template <int M, int R>
__device__ __forceinline__ void accumulate(float (&acc)[M][R], const uint4 (&w)[R], const float (&s)[R],
                                           const uint4* const (&x)[M], int count, int c, const Fp8Weights&) {
  float wf[R][16];
#pragma unroll
  for (int r = 0; r < R; ++r) unpack16_fp8(w[r], wf[r]);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if (m >= count) break;
    add_fp8_chunk<R>(acc[m], wf, s, x[m] + 2 * c);
  }
}

struct MoeGemvArgs {
  bf16* out;                   // [rows, n]
  const bf16* a;               // [rows / a_row_divisor, k]
  const void* w;               // [num_experts, n, k] bf16 or E4M3
  const float* scale;          // E4M3: [num_experts, n, scale_cols] factors; bf16: null
  const int32_t* sorted_rows;  // [expert_blocks * kMoeBlockM]
  const int32_t* block_expert; // [expert_blocks]
  int64_t a_row_divisor;
  int n, k8;                   // k8 = 16-byte weight chunks per row (k / 8 bf16, k / 16 E4M3)
  int kx;                      // 16-byte input chunks per row (k / 8)
  int scale_cols;              // E4M3: ceil(k / 128)
  int expert_blocks;
  int split;                   // warps of a team, sharing R rows, taking interleaved 512-byte slices of k
  int groups;                  // row groups of R rows a team takes per expert block
};

// The weight row a warp's r-th row is, in row group `group`: R consecutive rows, or with the
// SwiGLU epilogue R / 2 gate rows and their up rows (n / 2 further on).
template <int R, bool kSilu>
__device__ __forceinline__ int64_t weight_row(int64_t group, int r, int n) {
  if constexpr (kSilu) {
    constexpr int kHalf = R / 2;
    return r < kHalf ? group * kHalf + r : n / 2 + group * kHalf + (r - kHalf);
  } else {
    return group * R + r;
  }
}

// Writes output value `i` of the warp's row group for pair `pair` from the row sums: row i of
// the group, or with the SwiGLU epilogue output i (sums i and i + R / 2 as gate and up).
template <int R, bool kSilu>
__device__ __forceinline__ void store_output(const MoeGemvArgs& g, int32_t pair, int64_t group, int i, float first,
                                             float second) {
  if constexpr (kSilu) {
    constexpr int kHalf = R / 2;
    const float gate = __bfloat162float(__float2bfloat16_rn(first));
    const float up = __bfloat162float(__float2bfloat16_rn(second));
    g.out[static_cast<int64_t>(pair) * (g.n / 2) + group * kHalf + i] = __float2bfloat16_rn(silu_mul(gate, up));
  } else {
    (void)second;
    g.out[static_cast<int64_t>(pair) * g.n + group * R + i] = __float2bfloat16_rn(first);
  }
}

template <int M, bool kSilu, typename Format>
__global__ void __launch_bounds__(kThreads) moe_gemv_kernel(const MoeGemvArgs g) {
  constexpr int R = rows_per_warp<M>();
  constexpr int U = unroll<M>();
  constexpr int kOutputs = kSilu ? R / 2 : R;  // outputs per pair and row group
  constexpr bool kFp8 = std::is_same_v<Format, Fp8Weights>;
  __shared__ float partial[kWarps][M * R];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int split = g.split;
  const int slice = warp % split;
  const int teams = kWarps / split;
  const int stride = 32 * split;  // chunks between one lane's consecutive chunks
  const int row_groups = g.n / R;
  const int first_group = static_cast<int>(blockIdx.x) * teams + warp / split;
  const int group_step = static_cast<int>(gridDim.x) * teams;

  // block_expert and sorted_rows are moe_align's output, `a` the previous kernel's.
  // No early pdl_launch_dependents: the next kernel (down, or the combine) launches as this grid
  // exits. Triggered early, its thousands of CTAs sat waiting in SM slots that the side stream's
  // shared expert needed, and a batch-1 V2-Lite step took 2.38 ms instead of 2.26.
  pdl_wait();
  for (int eb = blockIdx.y; eb < g.expert_blocks; eb += gridDim.y) {
    // Both loads in flight together; the -1 blocks are a suffix, so the first one ends the loop.
    const int expert = g.block_expert[eb];
    const int32_t slot_pair = lane < M ? g.sorted_rows[static_cast<int64_t>(eb) * kMoeBlockM + lane] : -1;
    if (expert < 0) break;  // block-uniform
    // Pairs listed before the first -1 (at most M by the caller's promise).
    const int count = __ffs(__ballot_sync(0xffffffffu, slot_pair < 0)) - 1;
    const uint4* x[M];
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const int32_t pair = __shfl_sync(0xffffffffu, slot_pair, m);
      // bf16: the input's chunks are the weight's (k8 == kx), one value fewer to hold.
      x[m] = reinterpret_cast<const uint4*>(g.a) + (pair >= 0 ? pair / g.a_row_divisor : 0) * (kFp8 ? g.kx : g.k8);
    }
    // Lane j < count * kOutputs writes pair j / kOutputs's output j % kOutputs of the group.
    const int32_t out_pair = __shfl_sync(0xffffffffu, slot_pair, lane / kOutputs);
    const uint4* w_expert = reinterpret_cast<const uint4*>(g.w) + static_cast<int64_t>(expert) * g.n * g.k8;
    const int64_t scale_expert = static_cast<int64_t>(expert) * g.n * g.scale_cols;  // E4M3: its first factor
    const Format format{g.scale};

    for (int i = 0; i < g.groups; ++i) {
      const int group = first_group + i * group_step;
      const bool active = group < row_groups;  // team-uniform; inactive teams still meet the barriers
      float acc[M][R];
#pragma unroll
      for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
      }
      if (active) {
        const uint4* w_rows[R];
        int64_t scale_row[R] = {};  // E4M3: the first factor of each row
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int64_t row = weight_row<R, kSilu>(group, r, g.n);
          w_rows[r] = w_expert + row * g.k8;
          if constexpr (kFp8) scale_row[r] = scale_expert + row * g.scale_cols;
        }
        // Full trips (every lane's U chunks in range), all R * U loads issued before any FMA,
        // then one predicated trip for the last < U chunks of each lane. A lane adds its chunks
        // in k order either way, so the trip shape (U, R) never changes a sum.
        uint4 w[U][R];
        float f[U][R] = {};  // E4M3: the chunks' factors, loaded with them
        int first = slice * 32;
        for (; first + (U - 1) * stride + 31 < g.k8; first += U * stride) {
#pragma unroll
          for (int u = 0; u < U; ++u) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
              w[u][r] = load_stream(w_rows[r] + first + lane + u * stride);
              if constexpr (kFp8) f[u][r] = load_factor(format, scale_row[r], first + lane + u * stride);
            }
          }
#pragma unroll
          for (int u = 0; u < U; ++u) accumulate<M, R>(acc, w[u], f[u], x, count, first + lane + u * stride, format);
        }
        if (first < g.k8) {
#pragma unroll
          for (int u = 0; u < U; ++u) {
            if (first + lane + u * stride < g.k8) {
#pragma unroll
              for (int r = 0; r < R; ++r) {
                w[u][r] = load_stream(w_rows[r] + first + lane + u * stride);
                if constexpr (kFp8) f[u][r] = load_factor(format, scale_row[r], first + lane + u * stride);
              }
            }
          }
#pragma unroll
          for (int u = 0; u < U; ++u) {
            if (first + lane + u * stride < g.k8) {
              accumulate<M, R>(acc, w[u], f[u], x, count, first + lane + u * stride, format);
            }
          }
        }
#pragma unroll
        for (int m = 0; m < M; ++m) {
          if (m >= count) break;
#pragma unroll
          for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int offset = 16; offset > 0; offset /= 2) acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], offset);
          }
        }
      }

      if (split == 1) {  // the warp's sums are the rows' sums
        float first = 0.0f, second = 0.0f;
#pragma unroll
        for (int m = 0; m < M; ++m) {
#pragma unroll
          for (int i = 0; i < kOutputs; ++i) {
            if (lane == m * kOutputs + i) {
              first = acc[m][i];
              second = acc[m][kSilu ? i + R / 2 : i];
            }
          }
        }
        if (active && lane < count * kOutputs) store_output<R, kSilu>(g, out_pair, group, lane % kOutputs, first, second);
        continue;
      }
      // The split warps' partials through shared memory, added in slice order by slice 0.
      if (active && lane == 0) {
#pragma unroll
        for (int m = 0; m < M; ++m) {
#pragma unroll
          for (int r = 0; r < R; ++r) partial[warp][m * R + r] = acc[m][r];
        }
      }
      __syncthreads();
      if (active && slice == 0 && lane < count * kOutputs) {
        // Output j of pair m reads row sums m * R + j (and + R / 2 for the up row).
        const int first_row = lane / kOutputs * R + lane % kOutputs;
        float first = 0.0f, second = 0.0f;
        for (int s = 0; s < split; ++s) {
          first += partial[warp + s][first_row];
          if (kSilu) second += partial[warp + s][first_row + R / 2];
        }
        store_output<R, kSilu>(g, out_pair, group, lane % kOutputs, first, second);
      }
      __syncthreads();  // partial is refilled by the next group
    }
  }
}

// Warps sharing a row's k: from n, k and the SM count only (never M), so that sums keep their
// order across batch sizes. It assumes R = 4 (the fewer warps) and kMinActiveExperts experts,
// and keeps >= 4 chunks per lane and row.
int choose_split(int64_t n, int64_t k8) {
  const int64_t target = static_cast<int64_t>(tachyon::cuda::multiprocessor_count()) * kTargetWarpsPerSm;
  const int64_t warps = n / 4 * kMinActiveExperts;
  int split = 1;
  while (split < kWarps && warps * split < target && k8 >= int64_t{32} * 4 * split * 2) split *= 2;
  return split;
}

template <int M, bool kSilu, typename Format>
void launch(MoeGemvArgs args, int64_t n, cudaStream_t stream) {
  constexpr int R = rows_per_warp<M>();
  const int64_t teams_per_block = kWarps / args.split;
  const int64_t row_groups = n / R;
  // Team work per expert block: as many groups as keep kMinActiveExperts experts at the target.
  const int64_t target = static_cast<int64_t>(tachyon::cuda::multiprocessor_count()) * kTargetWarpsPerSm;
  const int64_t teams_wanted = std::max<int64_t>(1, target / (int64_t{kMinActiveExperts} * args.split));
  const int64_t groups = std::clamp<int64_t>(row_groups / teams_wanted, 1, kMaxGroupsPerTeam);
  const int64_t blocks_x = (row_groups + teams_per_block * groups - 1) / (teams_per_block * groups);
  args.groups = static_cast<int>((row_groups + teams_per_block * blocks_x - 1) / (teams_per_block * blocks_x));
  const int64_t blocks_y = std::min<int64_t>(args.expert_blocks, int64_t{kMaxExpertsPerToken} * M);
  launch_pdl(moe_gemv_kernel<M, kSilu, Format>,
             dim3(static_cast<unsigned>(blocks_x), static_cast<unsigned>(blocks_y)), dim3(kThreads), 0, stream, args);
  TACHYON_CUDA_CHECK_LAUNCH();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The product of moe.h's grouped GEMVs; `scale` null: bf16 weights, else E4M3 with these factors.
template <bool kSilu>
void run(const char* name, bf16* out, const bf16* a, const void* w, const float* scale, const int32_t* sorted_rows,
         const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k,
         int32_t max_pairs_per_expert, cudaStream_t stream) {
  const int64_t k_multiple = scale == nullptr ? 8 : 16;
  TACHYON_CHECK(n > 0 && n % 8 == 0 && k > 0 && k % k_multiple == 0)
      << name << ": n " << n << " must be a positive multiple of 8 and k " << k << " of " << k_multiple;
  TACHYON_CHECK(n <= (int64_t{1} << 28) && k <= (int64_t{1} << 24))
      << name << ": n " << n << " or k " << k << " too large (n <= 2^28, k <= 2^24)";
  TACHYON_CHECK(a_row_divisor >= 1) << name << ": a_row_divisor " << a_row_divisor << " must be >= 1";
  TACHYON_CHECK(capacity >= 0 && capacity % kMoeBlockM == 0 && capacity / kMoeBlockM <= (int64_t{1} << 24))
      << name << ": capacity " << capacity << " must be a multiple of " << kMoeBlockM << " (moe_sorted_capacity)";
  TACHYON_CHECK(max_pairs_per_expert >= 1 && max_pairs_per_expert <= 8)
      << name << ": max_pairs_per_expert " << max_pairs_per_expert
      << " must be in [1, 8] (the step's token count; use moe_grouped_gemm for steps of more than 8 tokens)";
  TACHYON_CHECK(aligned16(out) && aligned16(a) && aligned16(w))
      << name << ": out (" << out << "), a (" << a << ") and w (" << w << ") must be 16-byte aligned";
  if (capacity == 0) return;
  const int64_t k8 = k / (scale == nullptr ? Bf16Weights::kValues : Fp8Weights::kValues);
  MoeGemvArgs args{out,
                   a,
                   w,
                   scale,
                   sorted_rows,
                   block_expert,
                   a_row_divisor,
                   static_cast<int>(n),
                   static_cast<int>(k8),
                   static_cast<int>(k / kChunk),
                   static_cast<int>((k + 127) / 128),
                   static_cast<int>(capacity / kMoeBlockM),
                   choose_split(n, k8),
                   0};
  auto go = [&](auto format) {
    using Format = decltype(format);
    switch (max_pairs_per_expert) {
      case 1: return launch<1, kSilu, Format>(args, n, stream);
      case 2: return launch<2, kSilu, Format>(args, n, stream);
      case 3: return launch<3, kSilu, Format>(args, n, stream);
      case 4: return launch<4, kSilu, Format>(args, n, stream);
      case 5: return launch<5, kSilu, Format>(args, n, stream);
      case 6: return launch<6, kSilu, Format>(args, n, stream);
      case 7: return launch<7, kSilu, Format>(args, n, stream);
      default: return launch<8, kSilu, Format>(args, n, stream);
    }
  };
  if (scale == nullptr) {
    go(Bf16Weights{});
  } else {
    go(Fp8Weights{});
  }
}

void check_silu_intermediate(const char* name, int64_t intermediate) {
  TACHYON_CHECK(intermediate > 0 && intermediate % 4 == 0)
      << name << ": intermediate " << intermediate << " must be a positive multiple of 4";
}

}  // namespace

void moe_grouped_gemv(bf16* out, const bf16* a, const bf16* w, const int32_t* sorted_rows,
                      const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k,
                      int32_t max_pairs_per_expert, cudaStream_t stream) {
  run<false>("moe_grouped_gemv", out, a, w, nullptr, sorted_rows, block_expert, capacity, a_row_divisor, n, k,
             max_pairs_per_expert, stream);
}

void moe_grouped_gemv(bf16* out, const bf16* a, const uint8_t* w, const float* w_scale, const int32_t* sorted_rows,
                      const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k,
                      int32_t max_pairs_per_expert, cudaStream_t stream) {
  TACHYON_CHECK(w_scale != nullptr) << "moe_grouped_gemv: no factors for the E4M3 experts";
  run<false>("moe_grouped_gemv (E4M3)", out, a, w, w_scale, sorted_rows, block_expert, capacity, a_row_divisor, n, k,
             max_pairs_per_expert, stream);
}

void moe_grouped_gemv_silu(bf16* act, const bf16* a, const bf16* w_gate_up, const int32_t* sorted_rows,
                           const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor,
                           int64_t intermediate, int64_t k, int32_t max_pairs_per_expert, cudaStream_t stream) {
  check_silu_intermediate("moe_grouped_gemv_silu", intermediate);
  run<true>("moe_grouped_gemv_silu", act, a, w_gate_up, nullptr, sorted_rows, block_expert, capacity, a_row_divisor,
            2 * intermediate, k, max_pairs_per_expert, stream);
}

void moe_grouped_gemv_silu(bf16* act, const bf16* a, const uint8_t* w_gate_up, const float* w_scale,
                           const int32_t* sorted_rows, const int32_t* block_expert, int64_t capacity,
                           int64_t a_row_divisor, int64_t intermediate, int64_t k, int32_t max_pairs_per_expert,
                           cudaStream_t stream) {
  check_silu_intermediate("moe_grouped_gemv_silu (E4M3)", intermediate);
  TACHYON_CHECK(w_scale != nullptr) << "moe_grouped_gemv_silu: no factors for the E4M3 experts";
  run<true>("moe_grouped_gemv_silu (E4M3)", act, a, w_gate_up, w_scale, sorted_rows, block_expert, capacity,
            a_row_divisor, 2 * intermediate, k, max_pairs_per_expert, stream);
}

}  // namespace tachyon::kernels::cuda
