// Decode attention over an FP8 (E4M3) paged KV cache: the bf16 kernel's grid, splits, warp
// tiles and cp.async pipeline (attention_decode.cu's header), but the codes go from shared
// memory straight into tensor-core fragments, with no widened copy of the tile in between.
// Included by attention_decode.cu only. Test: tests/gpu/test_attention_kernels.cpp
// (PagedDecodeAttentionFp8.*).
//
// Why: the kernel this replaces widened each tile into a bf16 tile in shared memory (code *
// factor, rounded) and read it back with ldmatrix, and an FP8 cache's batch-64 step took as long
// as a bf16 cache's, half the bytes at half the rate (bench/results/2026-12-03-fp8-kv-pipeline-h200.json;
// widening into f16 was 4% slower still, bench/results/2026-12-06-prefill-wgmma-fp8-kv-f16-h100.json).
// Here a lane loads the code bytes its fragments need (16-byte shared loads, no bank conflicts
// at head_dim 128 and 256) and converts them with one instruction per two codes; both products
// run in f16, which holds every E4M3 value exactly.
//
// How the fragments line up (attention_common.cuh gives the mma layouts; g = lane / 4, t = lane % 4):
// - S = Q K^T sums over head_dim, so any order of head_dim serves if Q and K share it. K step kk
//   = 4u + i takes, for lane (g, t), the 4 code bytes at 16 (4u + t) + 4i of key g's row: bytes
//   0-1 are its b0 (k 2t, 2t+1), bytes 2-3 its b1 (k 2t+8, 2t+9). So a lane reads 16 contiguous
//   bytes per unit u, and Q's A fragment takes the same head_dim positions of rows g and g + 8.
// - O = P V: lane (g, t) holds V columns g of every n8 output tile, for keys 2t, 2t+1, 2t+8,
//   2t+9. Output column (tile n, column g) is head_dim position 8R (n / R) + R g + n % R with
//   R = min(head_dim / 8, 16), so the lane's columns are R contiguous bytes of each key's row; a
//   byte permute pairs keys 2t and 2t+1 (2t+8 and 2t+9) position by position for the conversion.
//   The accumulators are written back to head_dim order when the warps merge.
// - Factors: K's scale S after the product (with Q's power of two, below); V's scale P before
//   P V, relative to the tile's largest V factor u, so P u^-1 f stays in [0, 1]: the accumulators
//   hold the output in units of the last tile's u (rescaled by the ratio of units in the same
//   multiply as the online softmax's alpha). A key whose V factor is below 2^-14 u of its own
//   16-key tile meets f16's subnormals (fewer bits); a cache row 16,384 times smaller than its
//   neighbour's.
// - Q: each row is scaled by a power of two that puts its largest value in [2^14, 2^15) before it
//   is rounded to f16 (nothing overflows; the scale returns in S's factor), once per warp.
#pragma once

#include <cuda_fp16.h>

#include "tachyon/kernels/cuda/attention_decode_common.cuh"
#include "tachyon/kernels/cuda/bf16_vec.cuh"
#include "tachyon/kernels/cuda/fp8_kv.cuh"
#include "tachyon/kernels/cuda/pdl.cuh"

namespace tachyon::kernels::cuda::decode_detail {

template <int kHeadDim>
struct Fp8DecodeTraits {
  static constexpr int kStages = kHeadDim == 256 ? 3 : 4;
  static constexpr int kTileBytes = kTileTokens * kHeadDim;  // one tile's K (or V) codes
  // A stage: K codes, V codes, then K and V factors (f32 per key).
  static constexpr int kStageBytes = 2 * kTileBytes + 2 * kTileTokens * static_cast<int>(sizeof(float));
  static constexpr int kWarpPipeBytes = kStages * kStageBytes;
  static constexpr bool kQInRegisters = kHeadDim <= 128;  // 256 keeps its Q fragments in shared memory
  static constexpr int kQFragBytes = kQInRegisters ? 0 : kHeadDim / 16 * 32 * 16;
  static constexpr int kOStride = kHeadDim + 8;  // f32 row of the merge buffer
  static constexpr size_t kSmemBytes = kQFragBytes + kWarps * kWarpPipeBytes;
  static_assert(kWarps * 16 * kOStride * sizeof(float) <= kWarps * kWarpPipeBytes,
                "the cross-warp merge buffer reuses the pipeline stages");
  static_assert(kStageBytes % 16 == 0 && kQFragBytes % 16 == 0, "16-byte cp.async destinations");
};

// Where 16-byte unit `unit` of key `row`'s codes sits in its tile ([16 keys][head_dim bytes]).
// K: rows g and g + 1 of one 8-lane load phase fall in different halves of the banks; V: the
// four keys 2t (and 2t + 1, ...) that a phase reads, unit g, fall in eight different bank groups.
// At head_dim 64 a row is half the banks and stays in order.
template <int kHeadDim>
__device__ __forceinline__ int k_unit(int row, int unit) {
  return kHeadDim >= 128 ? unit ^ ((row & 1) << 2) : unit;
}
template <int kHeadDim>
__device__ __forceinline__ int v_unit(int row, int unit) {
  return kHeadDim >= 128 ? unit ^ (((row >> 1) & 3) << 1) : unit;
}

// grid (num_kv_heads * m_tiles, num_seqs, num_splits), kThreads threads, Fp8DecodeTraits::kSmemBytes.
template <int kHeadDim>
__global__ void __launch_bounds__(kThreads) paged_decode_fp8_kernel(const DecodeArgs a) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  using namespace attention_detail;
  using T = Fp8DecodeTraits<kHeadDim>;
  constexpr int kKSteps = kHeadDim / 16;
  constexpr int kNTiles = kHeadDim / 8;                    // n8 tiles of the output
  constexpr int kKUnits = kHeadDim / 64;                   // a lane's 16-byte units of a K row: 4u + t
  constexpr int kVRun = kHeadDim / 8 < 16 ? kHeadDim / 8 : 16;  // R: a lane's contiguous V bytes
  constexpr int kVRuns = kHeadDim / 8 / kVRun;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  uint4* s_qf = reinterpret_cast<uint4*>(smem_raw);   // [kKSteps][32] Q fragments (head_dim 256)
  unsigned char* s_pipe = smem_raw + T::kQFragBytes;  // [kWarps][T::kWarpPipeBytes]
  __shared__ float s_m[kWarps][16], s_l[kWarps][16];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  const DecodeCta c = decode_cta(a);
  if (c.ctx <= 0) {
    write_empty_rows<kHeadDim>(a, c);
    return;
  }
  const DecodeSplit& sp = c.sp;
  if (c.split >= sp.n_active) return;
  const int tile_begin = c.split * sp.tiles_per_split;
  const int tile_end = min(sp.n_tiles, tile_begin + sp.tiles_per_split);

  // This warp's tiles: tile_begin + warp + i * kWarps for i < my_tiles, each copied whole rows
  // at a time as the bf16 kernel copies them (a row's lanes take its consecutive 16-byte units;
  // the slot of each row shuffled from the lane that looked it up). Keys past the context copy
  // zeros, codes and factors.
  unsigned char* w_pipe = s_pipe + warp * T::kWarpPipeBytes;
  const int my_tiles = max(0, ceil_div(tile_end - tile_begin - warp, kWarps));
  const int32_t* table = a.kv.block_tables + static_cast<size_t>(c.seq) * a.kv.block_table_stride;
  auto issue = [&](int i) {
    const int token = sp.base + (tile_begin + warp + i * kWarps) * kTileTokens + (lane & 15);
    int64_t slot = -1;
    if (token < c.ctx) {
      slot = static_cast<int64_t>(__ldg(table + token / a.kv.block_size)) * a.kv.block_size + token % a.kv.block_size;
    }
    constexpr int kRowUnits = kHeadDim / 16;
    constexpr int kLanesPerRow = kRowUnits < 32 ? kRowUnits : 32;
    constexpr int kRowsPerCopy = 32 / kLanesPerRow;
    const int unit = lane % kLanesPerRow;
    unsigned char* stage = w_pipe + (i % T::kStages) * T::kStageBytes;
#pragma unroll
    for (int j = 0; j < kTileTokens / kRowsPerCopy; ++j) {
      const int row = lane / kLanesPerRow + j * kRowsPerCopy;
      const int64_t row_slot = __shfl_sync(0xffffffffu, slot, row);
      const size_t src = (static_cast<size_t>(max(row_slot, int64_t{0})) * a.kv.num_kv_heads + c.kv_head) * kHeadDim +
                         unit * 16;
      cp_async_16(smem_u32(stage + row * kHeadDim + k_unit<kHeadDim>(row, unit) * 16), a.kv.fp8.k + src,
                  row_slot >= 0);
      cp_async_16(smem_u32(stage + T::kTileBytes + row * kHeadDim + v_unit<kHeadDim>(row, unit) * 16),
                  a.kv.fp8.v + src, row_slot >= 0);
    }
    // The factors: K's of key l for lanes 0-15, V's of key l - 16 for lanes 16-31.
    const size_t head_row = static_cast<size_t>(max(slot, int64_t{0})) * a.kv.num_kv_heads + c.kv_head;
    float* factors = reinterpret_cast<float*>(stage + 2 * T::kTileBytes);  // [K, V][16]
    cp_async_4(smem_u32(factors + lane), (lane < 16 ? a.kv.fp8.k_scale : a.kv.fp8.v_scale) + head_row, slot >= 0);
  };
#pragma unroll
  for (int i = 0; i < T::kStages - 1; ++i) {
    if (i < my_tiles) issue(i);
    cp_async_commit();
  }

  // Q fragments (while the first tiles are in flight): lane (g, t) reads head_dim positions
  // [16 (4u + t), +16) of rows g and g + 8 (rows past the group are zero), u < kKUnits.
  uint32_t q_frag[T::kQInRegisters ? kKSteps : 1][4];
  float row_mult[2];  // S's factor per row: the softmax scale (log2 domain) times Q's power of two
  {
    uint4 raw[2][kKUnits][2];
    float amax[2] = {0.0f, 0.0f};
    const bf16* q_rows = a.q + (static_cast<size_t>(c.seq) * a.num_heads + c.head0) * kHeadDim;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = g + 8 * h;
#pragma unroll
      for (int u = 0; u < kKUnits; ++u) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          raw[h][u][half] = row < c.rows ? __ldg(reinterpret_cast<const uint4*>(q_rows + row * kHeadDim) +
                                                 2 * (4 * u + t) + half)
                                         : make_uint4(0, 0, 0, 0);
          float v[kBf16PerVec];
          unpack8(raw[h][u][half], v);
#pragma unroll
          for (int e = 0; e < kBf16PerVec; ++e) amax[h] = fmaxf(amax[h], fabsf(v[e]));
        }
      }
    }
    float scale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 1));
      amax[h] = fmaxf(amax[h], __shfl_xor_sync(0xffffffffu, amax[h], 2));  // the row's 4 lanes
      const int e2 = amax[h] > 0.0f && amax[h] <= 3.0e38f ? max(-120, min(ilogbf(amax[h]) - 14, 120)) : 0;
      scale[h] = ldexpf(1.0f, -e2);
      row_mult[h] = a.scale_log2 * ldexpf(1.0f, e2);
    }
#pragma unroll
    for (int u = 0; u < kKUnits; ++u) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t frag[4];  // a0 = (g, positions 4i, 4i+1), a1 = (g + 8, same), a2 / a3 = positions 4i+2, 4i+3
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint4& bits = raw[h][u][i / 2];
          const uint32_t w0 = (i % 2) ? bits.z : bits.x, w1 = (i % 2) ? bits.w : bits.y;
          const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w0));
          const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w1));
          frag[h] = pack_f16(lo.x * scale[h], lo.y * scale[h]);
          frag[2 + h] = pack_f16(hi.x * scale[h], hi.y * scale[h]);
        }
        if constexpr (T::kQInRegisters) {
#pragma unroll
          for (int e = 0; e < 4; ++e) q_frag[4 * u + i][e] = frag[e];
        } else if (warp == 0) {
          s_qf[(4 * u + i) * 32 + lane] = make_uint4(frag[0], frag[1], frag[2], frag[3]);
        }
      }
    }
  }
  if constexpr (!T::kQInRegisters) __syncthreads();

  float o[kNTiles][4];
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // rows g and g + 8
  float unit = 1.0f;  // o holds the output in units of the last tile's largest V factor

  for (int i = 0; i < my_tiles; ++i) {
    __syncwarp();  // every lane is done with the stage refilled next (read in iteration i - 1)
    if (i + T::kStages - 1 < my_tiles) issue(i + T::kStages - 1);
    cp_async_commit();
    cp_async_wait<T::kStages - 1>();
    __syncwarp();
    const unsigned char* s_kc = w_pipe + (i % T::kStages) * T::kStageBytes;
    const unsigned char* s_vc = s_kc + T::kTileBytes;
    const float* factors = reinterpret_cast<const float*>(s_kc + 2 * T::kTileBytes);

    // S = Q K^T for 16 heads x 16 keys (n8 tile j holds keys 8j .. 8j + 7; this lane's B is key 8j + g).
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int u = 0; u < kKUnits; ++u) {
      uint4 kw[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int row = 8 * j + g;
        kw[j] = *reinterpret_cast<const uint4*>(s_kc + row * kHeadDim + k_unit<kHeadDim>(row, 4 * u + t) * 16);
      }
#pragma unroll
      for (int i4 = 0; i4 < 4; ++i4) {
        uint32_t qa[4];
        if constexpr (T::kQInRegisters) {
#pragma unroll
          for (int e = 0; e < 4; ++e) qa[e] = q_frag[4 * u + i4][e];
        } else {
          const uint4 f = s_qf[(4 * u + i4) * 32 + lane];
          qa[0] = f.x, qa[1] = f.y, qa[2] = f.z, qa[3] = f.w;
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint32_t word = i4 == 0 ? kw[j].x : i4 == 1 ? kw[j].y : i4 == 2 ? kw[j].z : kw[j].w;
          const uint2 b = e4m3x4_to_f16x4(word);
          mma_f16_16816(s[j], qa, b.x, b.y);
        }
      }
    }

    // This lane's S and P columns are keys 8j + 2t + (e % 2): their factors; keys outside
    // [key_lo, ctx) (window start, tail past the context) are masked.
    const float2 k_factor[2] = {*reinterpret_cast<const float2*>(factors + 2 * t),
                                *reinterpret_cast<const float2*>(factors + 8 + 2 * t)};
    const float2 v_factor[2] = {*reinterpret_cast<const float2*>(factors + kTileTokens + 2 * t),
                                *reinterpret_cast<const float2*>(factors + kTileTokens + 8 + 2 * t)};
    const int key0 = sp.base + (tile_begin + warp + i * kWarps) * kTileTokens + 2 * t;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + 8 * j + (e & 1);
        const float f = (e & 1) ? k_factor[j].y : k_factor[j].x;
        s[j][e] = key < sp.key_lo || key >= c.ctx ? -INFINITY : s[j][e] * row_mult[e >> 1] * f;
      }
    }
    float f_max = fmaxf(fmaxf(v_factor[0].x, v_factor[0].y), fmaxf(v_factor[1].x, v_factor[1].y));
    f_max = fmaxf(f_max, __shfl_xor_sync(0xffffffffu, f_max, 1));
    f_max = fmaxf(f_max, __shfl_xor_sync(0xffffffffu, f_max, 2));  // the row's 4 lanes hold all 16 keys
    const float tile_unit = fmaxf(f_max, 0x1p-60f);  // a floor keeps the ratio of units finite
    const float unit_ratio = unit / tile_unit, inv_unit = 1.0f / tile_unit;
    unit = tile_unit;

    online_softmax_tile(s, m_run, l_run, o, 1.0f, unit_ratio);  // S is in the log2 domain already

    // O += P' V with P' = P f / u (A fragment straight from the S registers) and V's codes.
    const float2 v_rel[2] = {make_float2(v_factor[0].x * inv_unit, v_factor[0].y * inv_unit),
                             make_float2(v_factor[1].x * inv_unit, v_factor[1].y * inv_unit)};
    const uint32_t pa[4] = {pack_f16(s[0][0] * v_rel[0].x, s[0][1] * v_rel[0].y),
                            pack_f16(s[0][2] * v_rel[0].x, s[0][3] * v_rel[0].y),
                            pack_f16(s[1][0] * v_rel[1].x, s[1][1] * v_rel[1].y),
                            pack_f16(s[1][2] * v_rel[1].x, s[1][3] * v_rel[1].y)};
#pragma unroll
    for (int r = 0; r < kVRuns; ++r) {
      // Keys 2t, 2t + 1 (pair 0) and 2t + 8, 2t + 9 (pair 1): R bytes each, run r.
      uint32_t vw[2][2][kVRun / 4];
#pragma unroll
      for (int p = 0; p < 2; ++p) {
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const int row = 8 * p + 2 * t + k;
          if constexpr (kVRun == 16) {
            const uint4 w = *reinterpret_cast<const uint4*>(s_vc + row * kHeadDim +
                                                            v_unit<kHeadDim>(row, g + 8 * r) * 16);
            vw[p][k][0] = w.x, vw[p][k][1] = w.y, vw[p][k][2] = w.z, vw[p][k][3] = w.w;
          } else {
            const uint2 w = *reinterpret_cast<const uint2*>(s_vc + row * kHeadDim + g * kVRun);
            vw[p][k][0] = w.x, vw[p][k][1] = w.y;
          }
        }
      }
#pragma unroll
      for (int w = 0; w < kVRun / 4; ++w) {
        uint32_t b[2][4];  // [pair][position 4w + q]: the two keys' codes at one position, as f16
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          const uint2 lo = e4m3x4_to_f16x4(__byte_perm(vw[p][0][w], vw[p][1][w], 0x5140));
          const uint2 hi = e4m3x4_to_f16x4(__byte_perm(vw[p][0][w], vw[p][1][w], 0x7362));
          b[p][0] = lo.x, b[p][1] = lo.y, b[p][2] = hi.x, b[p][3] = hi.y;
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) mma_f16_16816(o[r * kVRun + 4 * w + q], pa, b[0][q], b[1][q]);
      }
    }
  }
  // Merge the 4 warps' states in shared memory (the pipeline stages are free now), the
  // accumulators back in head_dim order and units.
  cp_async_wait<0>();
  __syncthreads();
  float* s_o = reinterpret_cast<float*>(s_pipe);  // [kWarps][16][kOStride] f32, unnormalized
  float* w_o = s_o + warp * 16 * T::kOStride;
#pragma unroll
  for (int n = 0; n < kNTiles; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int column = 8 * kVRun * (n / kVRun) + kVRun * (2 * t + (e & 1)) + n % kVRun;
      w_o[(g + 8 * (e >> 1)) * T::kOStride + column] = o[n][e] * unit;
    }
  }
  publish_warp_state(m_run, l_run, s_m, s_l, warp, lane);
  __syncthreads();
  merge_warps_and_store<kHeadDim>(a, c, s_o, T::kOStride, s_m, s_l);
}

}  // namespace tachyon::kernels::cuda::decode_detail
