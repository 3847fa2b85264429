// Decode attention over the paged KV cache: one query token per sequence, split-KV
// flash-decoding. Test: tests/gpu/test_attention_kernels.cpp (build/tests/gpu_attention_kernels).
//
// Decode is a stream over K/V bytes, so the design is about reading each K/V row once with
// enough bytes in flight:
// - GQA: one CTA serves every query head of one kv head (up to 16; larger groups take more
//   CTAs per kv head). Those heads are the 16 rows of one tensor-core m16 tile, so the K/V
//   tile read from HBM is used by all of them, and the math (mma.sync m16n8k16) is free next
//   to the bytes; rows past the group are zero queries whose results are dropped.
// - Split-KV: the sequence's visible key range is cut into up to `num_splits` contiguous
//   pieces of >= kSplitTokens keys (grid z); each writes a partial (normalized output, log2-sum-
//   exp) and a second kernel merges them. num_splits is host-known (max_context_len, the batch
//   size, the SM count), capped at kMaxSplits, so a graph captured with a large bound launches
//   a bounded grid; each sequence then divides its own length evenly over the splits it uses,
//   and splits past that exit at once. A sequence that uses one split writes `out` directly.
//   A grid that fills every SM with as many CTAs as it holds at once is not split at all: at
//   batch 64 x 1K keys on the H200 (head_dim 128, 2 CTAs per SM), two splits of 512 keys took
//   94.0 us per layer against 89.4 unsplit, the 8B batch-64 step 7.60 -> 7.44 ms
//   (bench/results/2026-12-04-decode-attention-splits-h200.json); splits pay off only while the
//   grid is short of one wave (batch 16 x 4K keeps its 5).
// - Inside a CTA each of the 4 warps streams its own 16-key tiles (tiles w, w+4, ...) through
//   a private cp.async pipeline of kStages stages (16-byte copies, no block barriers in the
//   loop) with its own online softmax; the 4 partial states are merged in shared memory. Each
//   copy instruction of a warp reads whole rows (whole 128-byte lines), not a slice of 16 rows.
// - FP8 cache: attention_decode_fp8.cuh, the same grid, splits, warp tiles and pipeline over
//   the codes and their factors, with the codes converted straight into tensor-core fragments.
#include <algorithm>
#include <cmath>

#include "tachyon/kernels/cuda/attention.h"
#include "tachyon/kernels/cuda/attention_common.cuh"
#include "tachyon/kernels/cuda/attention_decode_common.cuh"
#include "tachyon/kernels/cuda/attention_decode_fp8.cuh"
#include "tachyon/kernels/cuda/pdl.cuh"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::kernels::cuda {
namespace {

using namespace attention_detail;
using namespace decode_detail;

template <int kHeadDim>
struct DecodeTraits {
  static constexpr int kStages = kHeadDim == 64 ? 4 : 3;
  static constexpr int kStageElems = 2 * kTileTokens * kHeadDim;  // K tile then V tile
  static constexpr bool kQInRegisters = kHeadDim <= 128;          // 256 reloads Q from smem
  static constexpr int kOStride = kHeadDim + 8;                   // f32 row of the merge buffer
  static constexpr size_t kWarpPipeBytes = kStages * kStageElems * sizeof(bf16);  // one warp's stages
  static constexpr size_t kSmemBytes = 16 * kHeadDim * sizeof(bf16) + kWarps * kWarpPipeBytes;
  static_assert(kWarps * 16 * kOStride * sizeof(float) <= kWarps * kWarpPipeBytes,
                "the cross-warp merge buffer reuses the pipeline stages");
  static_assert(kWarpPipeBytes % 16 == 0, "16-byte cp.async destinations");
};

// grid (num_kv_heads * m_tiles, num_seqs, num_splits), kThreads threads, DecodeTraits::kSmemBytes.
template <int kHeadDim>
__global__ void __launch_bounds__(kThreads) paged_decode_kernel(const DecodeArgs a) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  using T = DecodeTraits<kHeadDim>;
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  constexpr int kKSteps = kHeadDim / 16;
  constexpr int kNTiles = kHeadDim / 8;  // n8 tiles of the output
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* s_q = reinterpret_cast<bf16*>(smem_raw);  // [16][kHeadDim] swizzled
  bf16* s_pipe = s_q + 16 * kHeadDim;             // [kWarps][T::kWarpPipeBytes]: stages (see DecodeTraits)
  __shared__ float s_m[kWarps][16], s_l[kWarps][16];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const DecodeCta cta = decode_cta(a);
  const int kv_head = cta.kv_head, seq = cta.seq, ctx = cta.ctx;
  const DecodeSplit& sp = cta.sp;
  if (ctx <= 0) {
    write_empty_rows<kHeadDim>(a, cta);
    return;
  }
  if (cta.split >= sp.n_active) return;
  const int tile_begin = cta.split * sp.tiles_per_split;
  const int tile_end = min(sp.n_tiles, tile_begin + sp.tiles_per_split);

  // Q rows of this CTA's heads (rows past the group are zero).
  const bf16* q_src = a.q + (static_cast<size_t>(seq) * a.num_heads + cta.head0) * kHeadDim;
  for (int i = threadIdx.x; i < 16 * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    cp_async_16(smem_u32(s_q + swizzled<kHeadDim>(r, c)), q_src + (r < cta.rows ? r : 0) * kHeadDim + c * 8,
                r < cta.rows);
  }
  cp_async_commit();

  // This warp's tiles: tile_begin + warp + i * kWarps for i < my_tiles. Lane l copies key
  // (l % 16) of a tile, chunks (l / 16) + 2j: per instruction 16 rows x 32 contiguous bytes.
  bf16* w_pipe = reinterpret_cast<bf16*>(reinterpret_cast<unsigned char*>(s_pipe) + warp * T::kWarpPipeBytes);
  const int my_tiles = max(0, ceil_div(tile_end - tile_begin - warp, kWarps));
  const int32_t* table = a.kv.block_tables + static_cast<size_t>(seq) * a.kv.block_table_stride;
  const size_t row_stride = static_cast<size_t>(a.kv.num_kv_heads) * kHeadDim;
  // Copies tile i into its stage. Lane l looks up key (l % 16)'s slot; each copy instruction then
  // reads whole rows, a row's lanes taking its consecutive 16-byte chunks (one key's K or V row of
  // this head is contiguous), the slot of each row shuffled from the lane that looked it up. So a
  // warp's request covers whole 128-byte lines: lanes that took 32 bytes of each of 16 rows made
  // the 8B shape's batch-64 step 7% slower and its 32K-context batch-1 step 5% slower (H100,
  // bench/results/2026-12-05-decode-attention-row-copies-h100.json). Keys past the context copy
  // zeros.
  auto issue = [&](int i) {
    const int token = sp.base + (tile_begin + warp + i * kWarps) * kTileTokens + (lane & 15);
    int64_t slot = -1;
    if (token < ctx) {
      slot = static_cast<int64_t>(__ldg(table + token / a.kv.block_size)) * a.kv.block_size + token % a.kv.block_size;
    }
    // One row is kChunks 16-byte chunks.
    constexpr int kLanesPerRow = kChunks < 32 ? kChunks : 32;
    constexpr int kRowsPerCopy = 32 / kLanesPerRow;
    const int chunk = lane % kLanesPerRow;
    bf16* s_k = w_pipe + (i % T::kStages) * T::kStageElems;
    bf16* s_v = s_k + kTileTokens * kHeadDim;
#pragma unroll
    for (int j = 0; j < kTileTokens / kRowsPerCopy; ++j) {
      const int row = lane / kLanesPerRow + j * kRowsPerCopy;
      const int64_t row_slot = __shfl_sync(0xffffffffu, slot, row);
      const size_t offset =
          static_cast<size_t>(kv_head) * kHeadDim + static_cast<size_t>(max(row_slot, int64_t{0})) * row_stride;
      const int at = swizzled<kHeadDim>(row, chunk);
      cp_async_16(smem_u32(s_k + at), a.kv.k_cache + offset + chunk * 8, row_slot >= 0);
      cp_async_16(smem_u32(s_v + at), a.kv.v_cache + offset + chunk * 8, row_slot >= 0);
    }
  };
#pragma unroll
  for (int i = 0; i < T::kStages - 1; ++i) {
    if (i < my_tiles) issue(i);
    cp_async_commit();
  }
  cp_async_wait<T::kStages - 1>();  // the Q group, committed first, has landed
  __syncthreads();

  // ldmatrix lane roles: A (Q) reads rows (m&1)*8 + r8 at chunk 2k + (m>>1); B (K) reads keys
  // (m>>1)*8 + r8 at chunk 2k + (m&1); B^T (V, .trans) reads keys (m&1)*8 + r8 at chunk 2k + (m>>1).
  const int mat = lane >> 3, r8 = lane & 7;
  uint32_t q_frag[T::kQInRegisters ? kKSteps : 1][4];
  if constexpr (T::kQInRegisters) {
#pragma unroll
    for (int k = 0; k < kKSteps; ++k)
      ldmatrix_x4(q_frag[k], smem_u32(s_q + swizzled<kHeadDim>((mat & 1) * 8 + r8, 2 * k + (mat >> 1))));
  }

  float o[kNTiles][4];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // rows g and g + 8

  for (int i = 0; i < my_tiles; ++i) {
    __syncwarp();  // every lane is done with the stage refilled next (read in iteration i - 1)
    const bool refill = i + T::kStages - 1 < my_tiles;
    if (refill) issue(i + T::kStages - 1);
    cp_async_commit();
    cp_async_wait<T::kStages - 1>();
    __syncwarp();
    const bf16* s_k = w_pipe + (i % T::kStages) * T::kStageElems;
    const bf16* s_v = s_k + kTileTokens * kHeadDim;

    // S = Q K^T for 16 heads x 16 keys.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int k = 0; k < kKSteps; ++k) {
      uint32_t qa[4];
      if constexpr (T::kQInRegisters) {
#pragma unroll
        for (int e = 0; e < 4; ++e) qa[e] = q_frag[k][e];
      } else {
        ldmatrix_x4(qa, smem_u32(s_q + swizzled<kHeadDim>((mat & 1) * 8 + r8, 2 * k + (mat >> 1))));
      }
      uint32_t b[4];
      ldmatrix_x4(b, smem_u32(s_k + swizzled<kHeadDim>((mat >> 1) * 8 + r8, 2 * k + (mat & 1))));
      mma_bf16_16816(s[0], qa, b[0], b[1]);
      mma_bf16_16816(s[1], qa, b[2], b[3]);
    }

    // Keys outside [key_lo, ctx) (window start, tail past the context) are masked.
    const int key0 = sp.base + (tile_begin + warp + i * kWarps) * kTileTokens + 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + n * 8 + (e & 1);
        if (key < sp.key_lo || key >= ctx) s[n][e] = -INFINITY;
      }
    }

    online_softmax_tile(s, m_run, l_run, o, a.scale_log2, 1.0f);

    // O += P V, P straight from the S registers.
    const uint32_t pa[4] = {pack_bf16(s[0][0], s[0][1]), pack_bf16(s[0][2], s[0][3]), pack_bf16(s[1][0], s[1][1]),
                            pack_bf16(s[1][2], s[1][3])};
#pragma unroll
    for (int d = 0; d < kHeadDim / 16; ++d) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, smem_u32(s_v + swizzled<kHeadDim>((mat & 1) * 8 + r8, 2 * d + (mat >> 1))));
      mma_bf16_16816(o[2 * d], pa, b[0], b[1]);
      mma_bf16_16816(o[2 * d + 1], pa, b[2], b[3]);
    }
  }
  // Merge the 4 warps' states in shared memory (the pipeline stages are free now).
  cp_async_wait<0>();
  __syncthreads();
  float* s_o = reinterpret_cast<float*>(s_pipe);  // [kWarps][16][kOStride] f32, unnormalized
  const int g = lane >> 2, c2 = 2 * (lane & 3);
  float* w_o = s_o + warp * 16 * T::kOStride;
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) {
    *reinterpret_cast<float2*>(w_o + g * T::kOStride + n * 8 + c2) = make_float2(o[n][0], o[n][1]);
    *reinterpret_cast<float2*>(w_o + (g + 8) * T::kOStride + n * 8 + c2) = make_float2(o[n][2], o[n][3]);
  }
  publish_warp_state(m_run, l_run, s_m, s_l, warp, lane);
  __syncthreads();
  merge_warps_and_store<kHeadDim>(a, cta, s_o, T::kOStride, s_m, s_l);
}

// Combines the splits of each (sequence, head): out = sum_z 2^(lse_z - max) o_z / sum_z 2^(lse_z - max).
// grid (num_heads, num_seqs), kHeadDim / 4 threads, each owning 4 dims. Sequences that used
// one split (or none) were written by the split kernel.
template <int kHeadDim>
__global__ void __launch_bounds__(kHeadDim / 4) merge_splits_kernel(const DecodeArgs a) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  const int head = blockIdx.x, seq = blockIdx.y;
  const DecodeSplit sp = decode_split(a.context_lens[seq], a.window, a.num_splits);
  if (sp.n_active <= 1) return;
  const size_t head_row = static_cast<size_t>(seq) * a.num_heads + head;
  const float* lse = a.part_lse + head_row * a.num_splits;
  float mx = -INFINITY;
  for (int z = 0; z < sp.n_active; ++z) mx = fmaxf(mx, lse[z]);
  float sum = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const int d = threadIdx.x * 4;
  for (int z = 0; z < sp.n_active; ++z) {
    const float weight = fast_exp2(lse[z] - mx);
    const float4 part = *reinterpret_cast<const float4*>(a.part_out + (head_row * a.num_splits + z) * kHeadDim + d);
    sum += weight;
    acc.x += weight * part.x;
    acc.y += weight * part.y;
    acc.z += weight * part.z;
    acc.w += weight * part.w;
  }
  const float inv = 1.0f / sum;
  __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(a.out + head_row * kHeadDim + d);
  dst[0] = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
  dst[1] = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
}

// Splits allowed by the longest visible range, before the occupancy rule.
int splits_for_length(int32_t max_context_len, int32_t window) {
  const int visible = window > 0 ? std::min(max_context_len, window) : max_context_len;
  return std::clamp(ceil_div(std::max(visible, 1), kSplitTokens), 1, kMaxSplits);
}

// The step's share of the launch that only the kernel instance knows: how many KV splits (its
// resident CTAs per SM decide when one split already fills the GPU) and where the partials go.
struct SplitRequest {
  int32_t max_context_len = 0;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// kFp8: the cache is FP8 (PagedKvView::fp8), read by attention_decode_fp8.cuh's kernel.
template <int kHeadDim, bool kFp8>
void launch_decode_cache(DecodeArgs a, int num_seqs, const SplitRequest& request, cudaStream_t stream) {
  constexpr auto kernel = kFp8 ? &paged_decode_fp8_kernel<kHeadDim> : &paged_decode_kernel<kHeadDim>;
  const size_t smem = kFp8 ? Fp8DecodeTraits<kHeadDim>::kSmemBytes : DecodeTraits<kHeadDim>::kSmemBytes;
  static std::atomic<uint64_t> smem_raised{0};
  raise_smem_limit_once(kernel, smem, smem_raised);
  static std::atomic<int> resident{0};  // CTAs one SM holds at once (registers and shared memory); 0: not asked yet
  if (resident.load(std::memory_order_relaxed) == 0) {
    int n = 0;
    TACHYON_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, smem));
    resident.store(std::max(n, 1), std::memory_order_relaxed);
  }
  const int sms = tachyon::cuda::multiprocessor_count();
  const int ctas_per_split = a.kv.num_kv_heads * a.m_tiles * num_seqs;
  const int by_occupancy = ctas_per_split >= resident.load(std::memory_order_relaxed) * sms
                               ? 1
                               : ceil_div(kCtasPerSmTarget * sms, ctas_per_split);
  a.num_splits = std::max(1, std::min(splits_for_length(request.max_context_len, a.window), by_occupancy));
  if (a.num_splits > 1) {
    const size_t part_rows = static_cast<size_t>(num_seqs) * a.num_heads * a.num_splits;
    const size_t needed = part_rows * (kHeadDim + 1) * sizeof(float);
    TACHYON_CHECK(request.workspace != nullptr && request.workspace_bytes >= needed)
        << "decode workspace of " << request.workspace_bytes << " bytes, " << needed << " needed";
    a.part_out = static_cast<float*>(request.workspace);
    a.part_lse = a.part_out + part_rows * kHeadDim;
  }
  const dim3 grid(a.kv.num_kv_heads * a.m_tiles, num_seqs, a.num_splits);
  launch_pdl(kernel, grid, dim3(kThreads), smem, stream, a);
  TACHYON_CUDA_CHECK_LAUNCH();
  if (a.num_splits > 1) {
    launch_pdl(merge_splits_kernel<kHeadDim>, dim3(a.num_heads, num_seqs), dim3(kHeadDim / 4), 0, stream, a);
    TACHYON_CUDA_CHECK_LAUNCH();
  }
}

template <int kHeadDim>
void launch_decode(const DecodeArgs& a, int num_seqs, const SplitRequest& request, cudaStream_t stream) {
  if (a.kv.fp8.k != nullptr) {
    launch_decode_cache<kHeadDim, true>(a, num_seqs, request, stream);
  } else {
    launch_decode_cache<kHeadDim, false>(a, num_seqs, request, stream);
  }
}

}  // namespace

void check_fp8_kv_view(const PagedKvView& kv) {
  const auto& f = kv.fp8;
  if (f.k == nullptr && f.v == nullptr && f.k_scale == nullptr && f.v_scale == nullptr) return;
  TACHYON_CHECK(f.k != nullptr && f.v != nullptr && f.k_scale != nullptr && f.v_scale != nullptr)
      << "an FP8 KV view needs its codes and factors for both K and V";
  // The decode kernel copies codes 16 bytes at a time and factors 4 (cp.async).
  TACHYON_CHECK(reinterpret_cast<uintptr_t>(f.k) % 16 == 0 && reinterpret_cast<uintptr_t>(f.v) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(f.k_scale) % 4 == 0 && reinterpret_cast<uintptr_t>(f.v_scale) % 4 == 0)
      << "FP8 KV codes must be 16-byte aligned and their factors 4-byte aligned";
}

size_t paged_decode_workspace_bytes(int32_t max_seqs, int32_t num_heads, int32_t head_dim, int32_t max_context_len) {
  const int splits = splits_for_length(max_context_len, 0);
  if (splits <= 1) return 0;
  return static_cast<size_t>(max_seqs) * num_heads * splits * (head_dim + 1) * sizeof(float);
}

void paged_decode_attention(bf16* out, const bf16* q, const PagedKvView& kv, const int32_t* context_lens,
                            int32_t num_seqs, int32_t max_context_len, const AttentionParams& params,
                            void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  TACHYON_CHECK(kv.head_dim == 64 || kv.head_dim == 128 || kv.head_dim == 256)
      << "decode attention supports head_dim 64, 128 and 256, not " << kv.head_dim;
  TACHYON_CHECK(kv.num_kv_heads > 0 && params.num_heads % kv.num_kv_heads == 0)
      << params.num_heads << " query heads over " << kv.num_kv_heads << " kv heads";
  TACHYON_CHECK(kv.block_size > 0 && max_context_len >= 0 && num_seqs >= 0)
      << "block_size " << kv.block_size << " max_context_len " << max_context_len << " num_seqs " << num_seqs;
  check_fp8_kv_view(kv);
  if (num_seqs == 0) return;
  DecodeArgs a{};
  a.out = out;
  a.q = q;
  a.kv = kv;
  a.context_lens = context_lens;
  a.num_heads = params.num_heads;
  a.group = params.num_heads / kv.num_kv_heads;
  a.m_tiles = ceil_div(a.group, 16);
  a.window = params.sliding_window;
  a.scale_log2 = params.scale * kLog2e;
  const SplitRequest request{max_context_len, workspace, workspace_bytes};
  switch (kv.head_dim) {
    case 64: launch_decode<64>(a, num_seqs, request, stream); break;
    case 128: launch_decode<128>(a, num_seqs, request, stream); break;
    default: launch_decode<256>(a, num_seqs, request, stream); break;
  }
}

}  // namespace tachyon::kernels::cuda
