// The CTA body shared by the MLA latent-attention kernels (mla_attention.h): decode, prefill and
// sparse differ only in which query rows a CTA takes, which key indices it walks and which of
// them each row may see, so they share this one loop and choose those with `MlaMode`.
//
// One CTA = kRows = 16 * kMTiles rows of the flattened q/out ([tokens, heads] -> token * H +
// head: every head of a token for decode and sparse, consecutive (token, head) pairs of one
// sequence for prefill) against tiles of kBlockN = 64 latent rows. Per tile, with W warps (4,
// or 8 for decode at rank 512, which halves each warp's accumulator and doubles the warps that
// hide the tensor-core and shared-memory latency of the one tile):
// - the tile is gathered from the paged cache by cp.async into one of two swizzled stages
//   (warp w copies keys 64/W * w .. + 64/W - 1, 32/(64/W) lanes per key; columns past the row
//   width and keys that do not exist are zero-filled, so NaN in unused slots never reaches the
//   math); the block-table entry (and the kept-list entry) of the next tile is loaded before
//   the wait for this one, so its latency is not paid between two tiles;
// - S = Q K^T: warp w computes the scores of its 64/W keys (one or two n8 tiles) for all kRows
//   rows (mma.sync m16n8k16, K = the whole 576-wide row; Q stays in shared memory); with one n8
//   tile per warp, even and odd k steps go to two accumulators (half the dependent-MMA chain);
// - online softmax across the warps: each warp publishes its row maxima, every warp derives the
//   same running max (so all agree on the rescale), writes its bf16 probabilities to s_p and
//   keeps the row sums of its own keys;
// - O += P V: warp w owns output columns [w * kVDim / W, +kVDim / W) for all rows and all 64
//   keys, V being the tile's first kv_lora_rank columns (c_kv).
// The next tile streams in during all of this (two stages, three block barriers per tile).
// Shapes are compile-time only where registers need them: kMTiles (1 or 2), kVDim (64 or 512,
// the instantiated value width >= kv_lora_rank) and W; the key width is a runtime k-loop.
// An FP8 cache (kFp8, PagedLatentView::fp8): cp.async brings a tile's raw bytes (codes, k_pe,
// factors: 656 of them per key at 512 + 64) into one of two raw stages, and at the top of each
// tile the CTA expands the landed one into a single bf16 stage (code * factor, rounded once to
// bf16) behind one more barrier; the MMAs then run as for a bf16 cache. The raw stages keep
// the HBM stream as deep as the bf16 path's two stages, in about the same shared memory.
#pragma once

#include <algorithm>
#include <cmath>

#include "tachyon/kernels/cuda/attention_common.cuh"
#include "tachyon/kernels/cuda/fp8_kv.cuh"
#include "tachyon/kernels/cuda/mla_attention.h"

namespace tachyon::kernels::cuda::mla_detail {

using namespace attention_detail;

constexpr int kWarps = 4;               // warps of a prefill or sparse CTA (the default W)
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockN = 64;              // latent rows (keys) per tile
constexpr int kMaxRank = 512;
constexpr int kMaxRope = 64;

enum class MlaMode { kDecode, kPrefill, kSparse };

template <int kMTiles, int kVDim, int kCtaWarps = kWarps, bool kFp8 = false>
struct MlaTraits {
  static constexpr int kWarps = kCtaWarps;
  static constexpr int kThreads = 32 * kCtaWarps;
  static constexpr int kRows = 16 * kMTiles;
  static constexpr int kRowElems = kVDim + kMaxRope;  // smem row [c_kv | k_pe | zeros]
  static constexpr int kRowChunks = kRowElems / 8;
  static constexpr int kWarpKeys = kBlockN / kCtaWarps;  // keys of S per warp
  static constexpr int kNTilesS = kWarpKeys / 8;          // n8 tiles of S per warp (2 or 1)
  static constexpr int kKeyLanes = 32 / kWarpKeys;        // lanes that copy one key's row
  static constexpr int kWarpCols = kVDim / kCtaWarps;     // output columns per warp
  static constexpr int kNTilesO = kWarpCols / 8;
  static constexpr int kStageElems = kBlockN * kRowElems;
  static constexpr int kStages = kFp8 ? 1 : 2;  // bf16 stages (FP8: the raw stages double-buffer)
  // FP8: one key's raw bytes in a raw stage: [codes (kVDim) | k_pe (kMaxRope bf16) | 4 factors].
  static constexpr int kRawRopeOffset = kVDim;
  static constexpr int kRawScaleOffset = kVDim + 2 * kMaxRope;
  static constexpr int kRawKeyBytes = kRawScaleOffset + 16;
  static constexpr int kRawChunks = kRawKeyBytes / 16;
  static constexpr int kRawStageBytes = kFp8 ? kBlockN * kRawKeyBytes : 0;
  static constexpr size_t kSmemBytes =
      static_cast<size_t>(kRows * kRowElems + kStages * kStageElems + kRows * kBlockN) * sizeof(bf16) +
      2 * kCtaWarps * kRows * sizeof(float) + 2 * static_cast<size_t>(kRawStageBytes);
  static_assert(kCtaWarps == 4 || kCtaWarps == 8, "a warp takes 16 or 8 keys of S");
  static_assert(kRowChunks % 8 == 0, "the swizzle permutes chunks within groups of 8");
  static_assert(kRowChunks % kKeyLanes == 0, "the lanes of a key split its chunks evenly");
  static_assert(kWarpCols % 16 == 0, "ldmatrix.trans reads 16 columns at a time");
  static_assert(fp8_latent_scale_stride(kVDim) == 4, "a key's factors are one 16-byte chunk");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an SM has");
};

// The instantiated value width that holds kv_lora_rank (and then the whole row: rank + rope
// fits kVDim + 64 for every rank <= kVDim, rope <= 64).
inline int vdim_for_rank(int32_t kv_lora_rank) { return kv_lora_rank <= 64 ? 64 : 512; }

struct MlaArgs {
  bf16* out;                    // [rows, kv_lora_rank] bf16, rows = token * num_heads + head
  const bf16* q;                // [rows, kv_lora_rank + rope_dim] bf16
  PagedLatentView cache;
  const int32_t* context_lens;  // [num_seqs] int32 (decode, prefill)
  const int32_t* query_starts;  // [num_seqs + 1] int32 (prefill, sparse)
  const int32_t* kept;          // [num_query_tokens, kept_width] int32 (sparse)
  int32_t kept_width;
  // Split launches (decode, sparse; mla_attention_splits.cuh), items = sequences or query tokens:
  float* part_out;              // [items, num_heads, num_splits, kv_lora_rank] f32, normalized
  float* part_lse;              // [items, num_heads, num_splits] f32, log2(sum exp2) of each split
  int32_t num_seqs;
  int32_t num_heads;
  int32_t num_splits;           // decode, sparse: splits per item (1: no partials)
  float scale_log2;             // scale * log2(e)
  DcpLayout dcp;                // this rank's share of the cache (MlaAttentionParams::dcp)
  float* lse;                   // optional [rows] f32 natural-log sum-exp (MlaAttentionParams::lse)
};

constexpr float kLn2 = 0.693147180559945309f;

// The global position of local key `key` (itself without DCP: no division on the common path).
__device__ __forceinline__ int key_position(const DcpLayout& dcp, int key) {
  return dcp.size == 1 ? key : static_cast<int>(dcp.global_position(key));
}
// The local keys of a sequence whose first `length` global positions are cached.
__device__ __forceinline__ int local_keys(const DcpLayout& dcp, int length) {
  return dcp.size == 1 ? length : static_cast<int>(dcp.local_count(length));
}

// FP8 cache: the raw tile `raw` ([kBlockN][kRawKeyBytes]) into the bf16 stage `stage`, as the
// bf16 path lays it out: [c_kv = code * factor | k_pe | zeros], swizzled. Keys that do not exist
// were zero-filled (codes and factors 0), so they expand to zeros like the bf16 path's.
template <typename T>
__device__ __forceinline__ void expand_fp8_tile(bf16* stage, const unsigned char* raw, int rank, int width_chunks) {
  const int code_chunks = rank / 8;  // 8 codes -> one 16-byte bf16 chunk
  for (int i = threadIdx.x; i < kBlockN * T::kRowChunks; i += T::kThreads) {
    const int key = i / T::kRowChunks, c = i % T::kRowChunks;
    const unsigned char* key_raw = raw + key * T::kRawKeyBytes;
    uint4 chunk = make_uint4(0, 0, 0, 0);
    if (c < code_chunks) {
      const float factor = reinterpret_cast<const float*>(key_raw + T::kRawScaleOffset)[c * 8 / kFp8LatentGroup];
      chunk = fp8x8_to_bf16x8(*reinterpret_cast<const uint2*>(key_raw + c * 8), factor);
    } else if (c < width_chunks) {
      chunk = *reinterpret_cast<const uint4*>(key_raw + T::kRawRopeOffset + (c - code_chunks) * 16);
    }
    *reinterpret_cast<uint4*>(stage + swizzled<T::kRowElems>(key, c)) = chunk;
  }
}

// What one CTA computes: flattened rows [row0, row0 + rows) against key indices
// [tile_begin * kBlockN, tile_end * kBlockN) of sequence `seq`.
struct MlaJob {
  int seq = 0;
  int row0 = 0;
  int rows = 0;
  int tile_begin = 0;
  int tile_end = 0;
  int ctx = 0;                    // decode, prefill: keys >= ctx are not in the cache
  int first_pos = 0;              // prefill: sequence row m (flattened) sits at first_pos + m / num_heads
  int m0 = 0;                     // prefill: the sequence-relative flattened index of row0
  const int32_t* kept = nullptr;  // sparse: this token's kept list, [kept_width]
  int split = 0;                  // decode, sparse: which partial this CTA writes
  bool partial = false;           // decode, sparse: write part_out / part_lse instead of out
};

template <MlaMode kMode, int kMTiles, int kVDim, int kCtaWarps = kWarps, bool kFp8 = false>
__device__ __forceinline__ void mla_attend(const MlaArgs& a, const MlaJob& job) {
  using T = MlaTraits<kMTiles, kVDim, kCtaWarps, kFp8>;
  constexpr int kRows = T::kRows, kRowElems = T::kRowElems, kRowChunks = T::kRowChunks;
  constexpr int kWarps = T::kWarps, kThreads = T::kThreads, kWarpKeys = T::kWarpKeys, kNTilesS = T::kNTilesS;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* s_q = reinterpret_cast<bf16*>(smem_raw);           // [kRows][kRowElems] swizzled
  bf16* s_kv = s_q + kRows * kRowElems;                     // [kStages][kBlockN][kRowElems] swizzled
  bf16* s_p = s_kv + T::kStages * T::kStageElems;           // [kRows][kBlockN] swizzled probabilities
  float* s_max = reinterpret_cast<float*>(s_p + kRows * kBlockN);  // [kWarps][kRows]
  float* s_sum = s_max + kWarps * kRows;                            // [kWarps][kRows]
  unsigned char* s_raw = reinterpret_cast<unsigned char*>(s_sum + kWarps * kRows);  // FP8: [2][kBlockN][kRawKeyBytes]

  const int rank = a.cache.kv_lora_rank;
  const int width = rank + a.cache.rope_dim;
  const int width_chunks = width / 8;
  const int k_steps = ceil_div(width, 16);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // ldmatrix lane roles: A (Q, P) rows (m&1)*8 + r8 at chunk 2k + (m>>1); B (K) keys (m>>1)*8 +
  // r8 at chunk 2k + (m&1); B^T (V, .trans) keys (m&1)*8 + r8 at chunk 2d + (m>>1).
  const int mat = lane >> 3, r8 = lane & 7, g = lane >> 2, c2 = 2 * (lane & 3);

  const bf16* q_src = a.q + static_cast<size_t>(job.row0) * width;
  for (int i = threadIdx.x; i < kRows * kRowChunks; i += kThreads) {
    const int r = i / kRowChunks, c = i % kRowChunks;
    const bool valid = r < job.rows && c < width_chunks;
    cp_async_16(smem_u32(s_q + swizzled<kRowElems>(r, c)), valid ? q_src + static_cast<size_t>(r) * width + c * 8 : a.q,
                valid);
  }
  cp_async_commit();

  const int32_t* table = a.cache.block_tables + static_cast<size_t>(job.seq) * a.cache.block_table_stride;
  // Each thread copies part of one key of every tile: key kWarpKeys * warp + lane % kWarpKeys,
  // chunks lane / kWarpKeys + kKeyLanes * j (lanes of one key take consecutive chunks).
  const int copy_row = warp * kWarpKeys + lane % kWarpKeys;
  const int copy_chunk0 = lane / kWarpKeys;
  // The cache slot of this thread's key in `tile`, or -1 when the key does not exist.
  auto slot_of = [&](int tile) -> int64_t {
    const int key = tile * kBlockN + copy_row;
    int token = key;
    bool valid = false;
    if constexpr (kMode == MlaMode::kSparse) {
      token = key < a.kept_width ? __ldg(job.kept + key) : -1;  // a global position
      valid = token >= 0 && (a.dcp.size == 1 || a.dcp.owns(token));
      if (valid && a.dcp.size > 1) token = static_cast<int>(a.dcp.local_index(token));
    } else {
      valid = key < job.ctx;
    }
    if (!valid) return -1;
    return static_cast<int64_t>(__ldg(table + token / a.cache.block_size)) * a.cache.block_size +
           token % a.cache.block_size;
  };
  // Gathers this thread's part of the tile whose slot is `slot` into `stage`.
  auto issue = [&](int64_t slot, int stage) {
    const bool valid = slot >= 0;
    if constexpr (kFp8) {  // the raw bytes: codes, then k_pe, then the factors
      unsigned char* dst = s_raw + stage * T::kRawStageBytes + copy_row * T::kRawKeyBytes;
      const int code_chunks = rank / 16, rope_chunks = a.cache.rope_dim / 8;
#pragma unroll
      for (int j = 0; j < (T::kRawChunks + T::kKeyLanes - 1) / T::kKeyLanes; ++j) {
        const int c = copy_chunk0 + T::kKeyLanes * j;
        if (c >= T::kRawChunks) break;
        const void* src = a.cache.codes;
        bool chunk_valid = false;
        if (c < kVDim / 16) {
          chunk_valid = valid && c < code_chunks;
          if (chunk_valid) src = a.cache.codes + slot * rank + c * 16;
        } else if (c < T::kRawScaleOffset / 16) {
          chunk_valid = valid && c - kVDim / 16 < rope_chunks;
          if (chunk_valid) src = a.cache.rope + slot * a.cache.rope_dim + (c - kVDim / 16) * 8;
        } else {
          chunk_valid = valid;
          if (chunk_valid) src = a.cache.scales + slot * fp8_latent_scale_stride(rank);
        }
        cp_async_16(smem_u32(dst + c * 16), src, chunk_valid);
      }
      return;
    }
    const bf16* src = a.cache.cache + (valid ? slot * width : 0);
    bf16* dst = s_kv + stage * T::kStageElems;
#pragma unroll
    for (int j = 0; j < kRowChunks / T::kKeyLanes; ++j) {
      const int c = copy_chunk0 + T::kKeyLanes * j;
      const bool chunk_valid = valid && c < width_chunks;
      cp_async_16(smem_u32(dst + swizzled<kRowElems>(copy_row, c)), chunk_valid ? src + c * 8 : a.cache.cache,
                  chunk_valid);
    }
  };
  if (job.tile_begin < job.tile_end) issue(slot_of(job.tile_begin), 0);
  cp_async_commit();

  // Prefill: the position of each of this thread's rows (rows past job.rows copy the last one).
  int row_pos[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = min(mt * 16 + g + 8 * h, job.rows - 1);
      row_pos[mt][h] = kMode == MlaMode::kPrefill ? job.first_pos + (job.m0 + r) / a.num_heads : 0;
    }
  }

  float o[kMTiles][T::kNTilesO][4];
  float m_run[kMTiles][2], l_run[kMTiles][2];  // rows g and g + 8 of each m tile; l: this warp's keys only
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int n = 0; n < T::kNTilesO; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
    m_run[mt][0] = m_run[mt][1] = -INFINITY;
    l_run[mt][0] = l_run[mt][1] = 0.0f;
  }
  const int col_chunk0 = warp * (T::kWarpCols / 8);  // this warp's first output column / 8
  const bool warp_has_cols = warp * T::kWarpCols < rank;

  for (int tile = job.tile_begin, it = 0; tile < job.tile_end; ++tile, ++it) {
    const int stage = it & 1;
    // The next tile's slot is looked up before the wait, so the lookup overlaps it.
    const int64_t next_slot = tile + 1 < job.tile_end ? slot_of(tile + 1) : -1;
    cp_async_wait<0>();
    __syncthreads();  // tile (and Q) landed; every warp is done with the other stage, s_max and s_p
    if (tile + 1 < job.tile_end) issue(next_slot, stage ^ 1);
    cp_async_commit();
    const bf16* s_tile = s_kv + stage * T::kStageElems;
    if constexpr (kFp8) {
      expand_fp8_tile<T>(s_kv, s_raw + stage * T::kRawStageBytes, rank, width_chunks);
      __syncthreads();  // the bf16 stage is whole
      s_tile = s_kv;
    }

    // S = Q K^T: all rows x this warp's kWarpKeys keys.
    float s[kMTiles][kNTilesS][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int n = 0; n < kNTilesS; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
    }
    if constexpr (kNTilesS == 2) {
#pragma unroll 4
      for (int k = 0; k < k_steps; ++k) {
        uint32_t b[4];
        ldmatrix_x4(b,
                    smem_u32(s_tile + swizzled<kRowElems>(warp * kWarpKeys + (mat >> 1) * 8 + r8, 2 * k + (mat & 1))));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          uint32_t qa[4];
          ldmatrix_x4(qa, smem_u32(s_q + swizzled<kRowElems>(mt * 16 + (mat & 1) * 8 + r8, 2 * k + (mat >> 1))));
          mma_bf16_16816(s[mt][0], qa, b[0], b[1]);
          mma_bf16_16816(s[mt][1], qa, b[2], b[3]);
        }
      }
    } else {
      // One n8 tile: one ldmatrix_x4 brings k steps k and k + 1 of its 8 keys (chunks 2k ..
      // 2k + 3), accumulated apart. A k step past k_steps reads zero-filled chunks (Q's and
      // K's chunks past the row width are zeros, and 4 * ceil(k_steps / 2) <= kRowChunks).
      float s_odd[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) s_odd[mt][0] = s_odd[mt][1] = s_odd[mt][2] = s_odd[mt][3] = 0.0f;
#pragma unroll 2
      for (int k = 0; k < k_steps; k += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_u32(s_tile + swizzled<kRowElems>(warp * kWarpKeys + r8, 2 * k + mat)));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          uint32_t qa[4], qb[4];
          ldmatrix_x4(qa, smem_u32(s_q + swizzled<kRowElems>(mt * 16 + (mat & 1) * 8 + r8, 2 * k + (mat >> 1))));
          ldmatrix_x4(qb, smem_u32(s_q + swizzled<kRowElems>(mt * 16 + (mat & 1) * 8 + r8, 2 * k + 2 + (mat >> 1))));
          mma_bf16_16816(s[mt][0], qa, b[0], b[1]);
          mma_bf16_16816(s_odd[mt], qb, b[2], b[3]);
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][0][e] += s_odd[mt][e];
      }
    }

    // Which of this thread's keys each row may see.
    const int key0 = tile * kBlockN + warp * kWarpKeys + c2;
#pragma unroll
    for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
      for (int odd = 0; odd < 2; ++odd) {
        const int key = key0 + n * 8 + odd;
        bool exists = true;
        int key_pos = key;  // prefill: the key's global position
        if constexpr (kMode == MlaMode::kDecode) exists = key < job.ctx;
        if constexpr (kMode == MlaMode::kSparse) {
          const int position = key < a.kept_width ? __ldg(job.kept + key) : -1;
          exists = position >= 0 && (a.dcp.size == 1 || a.dcp.owns(position));
        }
        if constexpr (kMode == MlaMode::kPrefill) key_pos = key_position(a.dcp, key);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const bool visible = kMode == MlaMode::kPrefill ? key_pos <= row_pos[mt][h] : exists;
            if (!visible) s[mt][n][2 * h + odd] = -INFINITY;
          }
        }
      }
    }

    // Row maxima of this warp's keys, published for the others.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = fmaxf(s[mt][0][2 * h], s[mt][0][2 * h + 1]);
#pragma unroll
        for (int n = 1; n < kNTilesS; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * h], s[mt][n][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        if ((lane & 3) == 0) s_max[warp * kRows + mt * 16 + g + 8 * h] = mx;
      }
    }
    __syncthreads();

    // Online softmax: every warp computes the same running max from the same maxima. A row that
    // sees no key yet keeps max -inf; its exponent base falls back to 0 so nothing turns NaN.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = mt * 16 + g + 8 * h;
        float mx = s_max[row];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) mx = fmaxf(mx, s_max[w * kRows + row]);
        const float m_new = fmaxf(m_run[mt][h], mx * a.scale_log2);
        const float base = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = fast_exp2(m_run[mt][h] - base);
        m_run[mt][h] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < kNTilesS; ++n) {
#pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            s[mt][n][e] = fast_exp2(fmaf(s[mt][n][e], a.scale_log2, -base));
            sum += s[mt][n][e];
          }
          *reinterpret_cast<uint32_t*>(s_p + swizzled<kBlockN>(row, kNTilesS * warp + n) + c2) =
              pack_bf16(s[mt][n][2 * h], s[mt][n][2 * h + 1]);
        }
        l_run[mt][h] = l_run[mt][h] * alpha + sum;
#pragma unroll
        for (int n = 0; n < T::kNTilesO; ++n) {
          o[mt][n][2 * h] *= alpha;
          o[mt][n][2 * h + 1] *= alpha;
        }
      }
    }
    __syncthreads();  // s_p complete

    // O += P V over this warp's columns, 16 keys per k step.
    if (warp_has_cols) {
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        uint32_t pa[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
          ldmatrix_x4(pa[mt], smem_u32(s_p + swizzled<kBlockN>(mt * 16 + (mat & 1) * 8 + r8, 2 * kk + (mat >> 1))));
#pragma unroll
        for (int d = 0; d < T::kWarpCols / 16; ++d) {
          uint32_t b[4];
          ldmatrix_x4_trans(
              b, smem_u32(s_tile + swizzled<kRowElems>(kk * 16 + (mat & 1) * 8 + r8, col_chunk0 + 2 * d + (mat >> 1))));
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_bf16_16816(o[mt][2 * d], pa[mt], b[0], b[1]);
            mma_bf16_16816(o[mt][2 * d + 1], pa[mt], b[2], b[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  // Row sums over all warps' keys, then the normalized output (or the split's partial).
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_run[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      if ((lane & 3) == 0) s_sum[warp * kRows + mt * 16 + g + 8 * h] = l;
    }
  }
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = mt * 16 + g + 8 * h;
      if (row >= job.rows) continue;
      float l = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) l += s_sum[w * kRows + row];
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const size_t out_row = static_cast<size_t>(job.row0) + row;
#pragma unroll
      for (int n = 0; n < T::kNTilesO; ++n) {
        const int col = warp * T::kWarpCols + n * 8 + c2;
        if (col >= rank) continue;
        const float x = o[mt][n][2 * h] * inv, y = o[mt][n][2 * h + 1] * inv;
        if (kMode != MlaMode::kPrefill && job.partial) {
          *reinterpret_cast<float2*>(a.part_out + (out_row * a.num_splits + job.split) * rank + col) = make_float2(x, y);
        } else {
          *reinterpret_cast<__nv_bfloat162*>(a.out + out_row * rank + col) = __floats2bfloat162_rn(x, y);
        }
      }
      if (kMode != MlaMode::kPrefill && job.partial && warp == 0 && (lane & 3) == 0)
        a.part_lse[out_row * a.num_splits + job.split] = m_run[mt][h] + log2f(l);
      if (a.lse != nullptr && !(kMode != MlaMode::kPrefill && job.partial) && warp == 0 && (lane & 3) == 0)
        a.lse[out_row] = l > 0.0f ? (m_run[mt][h] + log2f(l)) * kLn2 : -INFINITY;
    }
  }
}

// Calls launch.template operator()<kMTiles, kVDim, kFp8>() for the runtime choices, kMTiles
// being kLo or kHi (m_tiles picks), so each entry point instantiates only its own kernels.
template <int kLo, int kHi, typename Launch>
void dispatch_mla(int m_tiles, bool wide, bool fp8, Launch&& launch) {
  auto by_width = [&]<int kM>() {
    if (wide) {
      fp8 ? launch.template operator()<kM, 512, true>() : launch.template operator()<kM, 512, false>();
    } else {
      fp8 ? launch.template operator()<kM, 64, true>() : launch.template operator()<kM, 64, false>();
    }
  };
  if (m_tiles == kLo) {
    by_width.template operator()<kLo>();
  } else {
    by_width.template operator()<kHi>();
  }
}

// Host-side argument checks shared by the three entry points.
inline void check_mla_shapes(const PagedLatentView& cache, const MlaAttentionParams& params, const char* kernel) {
  TACHYON_CHECK(cache.kv_lora_rank > 0 && cache.kv_lora_rank <= kMaxRank && cache.kv_lora_rank % 8 == 0)
      << kernel << ": kv_lora_rank must be a positive multiple of 8 up to " << kMaxRank << ", not "
      << cache.kv_lora_rank;
  TACHYON_CHECK(cache.rope_dim >= 0 && cache.rope_dim <= kMaxRope && cache.rope_dim % 8 == 0)
      << kernel << ": rope_dim must be a multiple of 8 up to " << kMaxRope << ", not " << cache.rope_dim;
  TACHYON_CHECK(cache.block_size >= 1 && cache.block_table_stride >= 1)
      << kernel << ": block_size " << cache.block_size << " and block_table_stride " << cache.block_table_stride
      << " must be >= 1";
  TACHYON_CHECK(params.num_heads >= 1) << kernel << ": num_heads must be >= 1, not " << params.num_heads;
  TACHYON_CHECK(std::isfinite(params.scale) && params.scale > 0.0f)
      << kernel << ": scale must be finite and positive, not " << params.scale;
  if (cache.fp8()) {
    TACHYON_CHECK(cache.cache == nullptr && cache.scales != nullptr && cache.rope != nullptr)
        << kernel << ": an FP8 cache takes codes, scales and rope (and no bf16 rows)";
    TACHYON_CHECK(cache.kv_lora_rank % 16 == 0)
        << kernel << ": an FP8 cache takes kv_lora_rank a multiple of 16 (16-byte code chunks), not " << cache.kv_lora_rank;
    for (const void* p : {static_cast<const void*>(cache.codes), static_cast<const void*>(cache.scales),
                          static_cast<const void*>(cache.rope)}) {
      TACHYON_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0) << kernel << ": the FP8 cache's planes must be 16-byte aligned";
    }
  } else {
    TACHYON_CHECK(cache.cache != nullptr) << kernel << ": the cache must be set";
  }
  TACHYON_CHECK(params.dcp.size >= 1 && params.dcp.rank >= 0 && params.dcp.rank < params.dcp.size &&
                params.dcp.interleave >= 1)
      << kernel << ": DCP rank " << params.dcp.rank << " of " << params.dcp.size << " with interleave "
      << params.dcp.interleave << " is not a rank of a group";
}

}  // namespace tachyon::kernels::cuda::mla_detail
