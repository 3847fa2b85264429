// What the two paged decode kernels share (attention_decode.cu over a bf16 cache,
// attention_decode_fp8.cuh over an FP8 one): the launch geometry, the arguments, how a
// sequence's keys are split over the grid's z dimension, and the end of a CTA: its warps'
// online-softmax states merged in shared memory and written out (or as a split's partial).
#pragma once

#include <cmath>
#include <cstdint>

#include <cuda_bf16.h>

#include "tachyon/kernels/cuda/attention.h"
#include "tachyon/kernels/cuda/attention_common.cuh"

namespace tachyon::kernels::cuda::decode_detail {

using attention_detail::ceil_div;
using attention_detail::fast_exp2;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileTokens = 16;     // keys per warp tile: two n8 mma tiles, one k16 step of P V
constexpr int kSplitTokens = 256;   // fewest keys worth a split of their own
constexpr int kMaxSplits = 64;      // bounds the grid and the workspace for any max_context_len
constexpr int kCtasPerSmTarget = 4; // a grid short of one wave gets splits until it has this many CTAs per SM

struct DecodeArgs {
  bf16* out;                   // [num_seqs, num_heads, head_dim] bf16
  const bf16* q;               // [num_seqs, num_heads, head_dim] bf16
  PagedKvView kv;
  const int32_t* context_lens; // [num_seqs] int32
  float* part_out;             // [num_seqs, num_heads, num_splits, head_dim] f32, normalized
  float* part_lse;             // [num_seqs, num_heads, num_splits] f32, log2(sum exp2) of each split
  int32_t num_heads;
  int32_t group;               // query heads per kv head
  int32_t m_tiles;             // CTAs per kv head: ceil(group / 16)
  int32_t num_splits;
  int32_t window;
  float scale_log2;            // scale * log2(e)
};

// How one sequence's keys are split: tiles of kTileTokens keys start at `base` (key_lo rounded
// down, so tiles align to 16 absolute positions), split z covers tiles
// [z * tiles_per_split, (z + 1) * tiles_per_split) of n_tiles, for z < n_active.
struct DecodeSplit {
  int key_lo = 0;  // first visible key (sliding window), keys [key_lo, ctx) are attended
  int base = 0;
  int n_tiles = 0;
  int tiles_per_split = 1;
  int n_active = 0;  // 0 for an empty sequence
};

__device__ __forceinline__ DecodeSplit decode_split(int ctx, int window, int num_splits) {
  DecodeSplit sp;
  if (ctx <= 0) return sp;
  sp.key_lo = window > 0 ? max(0, ctx - window) : 0;
  sp.base = sp.key_lo & ~(kTileTokens - 1);
  sp.n_tiles = ceil_div(ctx - sp.base, kTileTokens);
  const int wanted = min(num_splits, ceil_div(ctx - sp.key_lo, kSplitTokens));
  sp.tiles_per_split = ceil_div(sp.n_tiles, wanted);
  sp.n_active = ceil_div(sp.n_tiles, sp.tiles_per_split);
  return sp;
}

// Where a CTA sits: its kv head, its 16 query rows (head0 .. head0 + rows - 1), its sequence
// and split, and that sequence's split of keys.
struct DecodeCta {
  int kv_head, head0, rows, seq, split, ctx;
  DecodeSplit sp;
};

__device__ __forceinline__ DecodeCta decode_cta(const DecodeArgs& a) {
  DecodeCta c;
  c.kv_head = blockIdx.x / a.m_tiles;
  const int m_tile = blockIdx.x % a.m_tiles;
  c.head0 = c.kv_head * a.group + m_tile * 16;
  c.rows = min(16, a.group - m_tile * 16);
  c.seq = blockIdx.y;
  c.split = blockIdx.z;
  c.ctx = a.context_lens[c.seq];
  c.sp = decode_split(c.ctx, a.window, a.num_splits);
  return c;
}

// Graph padding (a sequence of no keys): its rows are zeros, written once (by split 0).
template <int kHeadDim>
__device__ __forceinline__ void write_empty_rows(const DecodeArgs& a, const DecodeCta& c) {
  if (c.split != 0) return;
  bf16* dst = a.out + (static_cast<size_t>(c.seq) * a.num_heads + c.head0) * kHeadDim;
  for (int i = threadIdx.x; i < c.rows * kHeadDim; i += kThreads) dst[i] = __float2bfloat16(0.0f);
}

// The online softmax over one warp tile (16 rows x 16 keys, S in the m16n8 C layout: s[n][e] is
// row g = lane / 4 for e < 2, g + 8 for e >= 2): scores times `scale` are log2-domain logits; the
// running max and sum of both rows move on, s becomes P, and the accumulators are multiplied by
// alpha times `o_rescale`. Every tile holds at least one visible key, so the max is finite.
template <int kNTiles>
__device__ __forceinline__ void online_softmax_tile(float (&s)[2][4], float (&m_run)[2], float (&l_run)[2],
                                                    float (&o)[kNTiles][4], float scale, float o_rescale) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]), fmaxf(s[1][2 * h], s[1][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m_run[h], mx * scale);
    const float alpha = fast_exp2(m_run[h] - m_new);
    m_run[h] = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        s[n][e] = fast_exp2(fmaf(s[n][e], scale, -m_new));
        sum += s[n][e];
      }
    }
    l_run[h] = l_run[h] * alpha + sum;
    const float o_scale = alpha * o_rescale;
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      o[n][2 * h] *= o_scale;
      o[n][2 * h + 1] *= o_scale;
    }
  }
}

// A warp's softmax state once its last tile is done: the row sums completed over the four lanes
// of each row, and both rows' max and sum published to s_m / s_l for the merge below.
__device__ __forceinline__ void publish_warp_state(float (&m_run)[2], float (&l_run)[2], float (&s_m)[kWarps][16],
                                                   float (&s_l)[kWarps][16], int warp, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
  }
  if ((lane & 3) == 0) {
    const int g = lane >> 2;
    s_m[warp][g] = m_run[0];
    s_m[warp][g + 8] = m_run[1];
    s_l[warp][g] = l_run[0];
    s_l[warp][g + 8] = l_run[1];
  }
}

// The end of a CTA, after every warp wrote its unnormalized output rows to s_o
// ([kWarps][16][o_stride] f32, head_dim columns in order), its running max (log2 domain) to
// s_m and its sum of exp2 to s_l, and a __syncthreads: the warps' states merged, normalized, and
// written to `out` (a sequence of one split) or to the split's partial and log2-sum-exp.
template <int kHeadDim>
__device__ __forceinline__ void merge_warps_and_store(const DecodeArgs& a, const DecodeCta& c, const float* s_o,
                                                      int o_stride, const float (&s_m)[kWarps][16],
                                                      const float (&s_l)[kWarps][16]) {
  for (int idx = threadIdx.x; idx < c.rows * (kHeadDim / 4); idx += kThreads) {
    const int r = idx / (kHeadDim / 4), d = (idx % (kHeadDim / 4)) * 4;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w][r]);
    float sum = 0.0f;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float weight = fast_exp2(s_m[w][r] - mx);  // 0 for a warp that had no tile
      const float4 part = *reinterpret_cast<const float4*>(s_o + (w * 16 + r) * o_stride + d);
      sum += weight * s_l[w][r];
      acc.x += weight * part.x;
      acc.y += weight * part.y;
      acc.z += weight * part.z;
      acc.w += weight * part.w;
    }
    const float inv = 1.0f / sum;
    const size_t head_row = static_cast<size_t>(c.seq) * a.num_heads + c.head0 + r;
    if (c.sp.n_active == 1) {
      __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(a.out + head_row * kHeadDim + d);
      dst[0] = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
      dst[1] = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
    } else {
      const size_t part_row = head_row * a.num_splits + c.split;
      *reinterpret_cast<float4*>(a.part_out + part_row * kHeadDim + d) =
          make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
      if (d == 0) a.part_lse[part_row] = mx + log2f(sum);
    }
  }
}

}  // namespace tachyon::kernels::cuda::decode_detail
