// The lightning indexer's key store, query rope and scores on the GPU (dsa_indexer.h; the
// top-k selection is dsa_topk.cu). Test: tests/gpu/test_dsa_kernels.cpp.
//
// Key store: one warp per token, the row staged in shared memory (LayerNorm needs the whole row
// before it writes, and the rope pairs dim i with i + rope_dim / 2). The FP8 store is the same
// kernel with another write: the warp's amax of the f32 row, then 4 codes a lane (fp8_kv.cuh).
// Query rope: one block per token, its cos/sin table computed once in shared memory, then every
// head's pairs.
//
// Scores: the work is q . k for every (row, head, key): at 128K context one decode row is
// 64 heads x 128 dims x 128K keys = 1 GMAC, compute-bound on f32 cores, so the dots run on the
// tensor cores (mma.sync m16n8k16 bf16 -> f32). The keys are the M side (16 keys per m-tile) and
// the heads the N side, so a thread's C fragment holds two keys x two heads, and the head sum
// of the relu'd, weighted dots is in registers plus two quad shuffles. One CTA = 128 keys (4
// warps x 32 keys, held in registers as A fragments for the whole CTA) x up to kRowsPerGroup
// query rows of one sequence; the rows' q [heads, dims] stream through a double-buffered
// shared-memory tile (cp.async) and meet the same register-resident keys, so in prefill a key
// tile is read once per 16 rows, and in decode every key is read once per row.
// Groups of rows: sequence s owns groups [qs[s] / G + s, qs[s+1] / G + s] (the G-aligned windows
// of global rows its rows touch, one spare), so a block finds its sequence by binary search and
// the grid bound num_query_tokens / G + num_seqs is host-known.
// FP8 keys (a template flag, so the bf16 kernel is unchanged): the tile holds the codes as bf16
// and the dots are q . code, multiplied by the key's factor before the scale. The factors are
// read from shared memory where they are used, not kept in registers: at head_dim 128 the bf16
// kernel sits at ptxas's 128-register target, and four more live registers spilled.
#include "tachyon/kernels/cuda/dsa_indexer.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "tachyon/kernels/cuda/attention_common.cuh"
#include "tachyon/kernels/cuda/fp8_kv.cuh"

namespace tachyon::kernels::cuda {
namespace {

using attention_detail::cp_async_16;
using attention_detail::cp_async_commit;
using attention_detail::cp_async_wait;
using attention_detail::ldmatrix_x4;
using attention_detail::mma_bf16_16816;
using attention_detail::smem_u32;

constexpr float kKeyNormEps = 1e-6f;  // DeepseekV32Indexer's k_norm
constexpr int kMaxStoreDim = 512;
constexpr int kStoreWarps = 4;
constexpr int kMaxRopeHalf = 256;
constexpr int kRopeThreads = 256;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The rotate-half pair (a, b) = (x[i], x[i + half]) rotated by cos c, sin s, without FMA
// contraction, as kernels/cpu/rope.cpp's a * c - b * s and b * c + a * s.
__device__ __forceinline__ void rotate_pair(float& a, float& b, float c, float s) {
  const float ra = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  const float rb = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  a = ra;
  b = rb;
}

// cos and sin of position * inv_freq, times attention_scaling (the CPU scales the tables).
__device__ __forceinline__ void rope_cos_sin(float position, float inv_freq, float scaling, float& c, float& s) {
  sincosf(__fmul_rn(position, inv_freq), &s, &c);
  c = __fmul_rn(c, scaling);
  s = __fmul_rn(s, scaling);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Where the key store writes: bf16 rows (cache), or with kFp8 E4M3 codes and one factor per key.
struct IndexKeyRowsOut {
  bf16* cache = nullptr;     // [num_slots, head_dim] bf16
  uint8_t* codes = nullptr;  // [num_slots, head_dim] E4M3
  float* scales = nullptr;   // [num_slots] f32
};

// row: [head_dim] f32 in this warp's shared memory, the raw key in, rope(LayerNorm(key)) out.
__device__ void layer_norm_rope_row(float* row, const bf16* __restrict__ src, const bf16* __restrict__ weight,
                                    const bf16* __restrict__ bias, const float* __restrict__ inv_freq, float scaling,
                                    float position, int head_dim, int rope_dim, int lane) {
  float sum = 0.0f;
  for (int d = lane; d < head_dim; d += 32) {
    row[d] = __bfloat162float(src[d]);
    sum += row[d];
  }
  const float mean = warp_sum(sum) / static_cast<float>(head_dim);
  float squares = 0.0f;
  for (int d = lane; d < head_dim; d += 32) {
    const float centred = row[d] - mean;
    squares += centred * centred;
  }
  const float variance = warp_sum(squares) / static_cast<float>(head_dim);
  const float inv_std = 1.0f / sqrtf(variance + kKeyNormEps);
  for (int d = lane; d < head_dim; d += 32) {
    const float normed = __fmul_rn(row[d] - mean, inv_std);
    row[d] = __fadd_rn(__fmul_rn(normed, __bfloat162float(weight[d])), __bfloat162float(bias[d]));
  }
  __syncwarp();
  const int half = rope_dim / 2;
  for (int i = lane; i < half; i += 32) {
    float c, s;
    rope_cos_sin(position, inv_freq[i], scaling, c, s);
    rotate_pair(row[i], row[i + half], c, s);
  }
  __syncwarp();
}

// grid: ceil(num_tokens / kStoreWarps) blocks of kStoreWarps warps, one token per warp.
template <bool kFp8>
__global__ void __launch_bounds__(32 * kStoreWarps)
    store_index_keys_kernel(const IndexKeyRowsOut out, const bf16* __restrict__ k_raw, const bf16* __restrict__ weight,
                            const bf16* __restrict__ bias, const float* __restrict__ inv_freq, float scaling,
                            const int32_t* __restrict__ positions, const int32_t* __restrict__ slots,
                            int64_t num_tokens, int head_dim, int rope_dim) {
  __shared__ float s_rows[kStoreWarps][kMaxStoreDim];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kStoreWarps + warp;
  if (token >= num_tokens) return;  // warp-uniform; the block never synchronizes
  const int64_t slot = slots[token];
  if (slot < 0) return;
  float* row = s_rows[warp];
  layer_norm_rope_row(row, k_raw + token * head_dim, weight, bias, inv_freq, scaling,
                      static_cast<float>(positions[token]), head_dim, rope_dim, lane);
  if constexpr (kFp8) {  // the f32 key is quantized, as the CPU quantizes its f32 key
    float amax = 0.0f;
    for (int d = lane; d < head_dim; d += 32) amax = fmaxf(amax, fabsf(row[d]));
    const float factor = fp8_kv_factor(warp_max(amax));
    uint8_t* dst = out.codes + slot * head_dim;
    for (int d = 4 * lane; d < head_dim; d += 4 * 32) {
      *reinterpret_cast<uint32_t*>(dst + d) = fp8_encode4(row + d, factor);
    }
    if (lane == 0) out.scales[slot] = factor;
  } else {
    bf16* dst = out.cache + slot * head_dim;
    for (int d = lane; d < head_dim; d += 32) dst[d] = __float2bfloat16_rn(row[d]);
  }
}

// grid: num_tokens blocks of kRopeThreads.
__global__ void __launch_bounds__(kRopeThreads)
    rope_index_queries_kernel(bf16* __restrict__ q, const float* __restrict__ inv_freq, float scaling,
                              const int32_t* __restrict__ positions, int num_heads, int head_dim, int rope_dim) {
  __shared__ float s_cos[kMaxRopeHalf], s_sin[kMaxRopeHalf];
  const int64_t token = blockIdx.x;
  const int half = rope_dim / 2;
  const float position = static_cast<float>(positions[token]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) rope_cos_sin(position, inv_freq[i], scaling, s_cos[i], s_sin[i]);
  __syncthreads();
  bf16* row = q + token * num_heads * head_dim;
  for (int idx = threadIdx.x; idx < num_heads * half; idx += blockDim.x) {
    const int head = idx / half, i = idx % half;
    bf16* v = row + head * head_dim;
    float a = __bfloat162float(v[i]), b = __bfloat162float(v[i + half]);
    rotate_pair(a, b, s_cos[i], s_sin[i]);
    v[i] = __float2bfloat16_rn(a);
    v[i + half] = __float2bfloat16_rn(b);
  }
}

// --- scores ---

constexpr int kScoreWarps = 4;
constexpr int kScoreThreads = 32 * kScoreWarps;
constexpr int kKeyTile = 32 * kScoreWarps;  // keys per CTA: 2 m16 tiles per warp
constexpr int kRowsPerGroup = 16;            // query rows per CTA (G)
constexpr int kHeadChunk = 16;               // heads per pass: two n8 tiles
constexpr int kMaxHeads = 256;

struct ScoresArgs {
  float* scores;                // [num_query_tokens, stride] f32
  int64_t stride;
  const bf16* q;                // [num_query_tokens, num_heads, head_dim] bf16
  const float* weights;         // [num_query_tokens, num_heads] f32
  PagedIndexKeyView keys;
  const int32_t* query_starts;  // [num_seqs + 1]
  const int32_t* context_lens;  // [num_seqs]
  int num_seqs;
  int max_context_len;
  int num_heads;
  int heads_padded;             // num_heads rounded up to kHeadChunk
  float scale;
  float weight_scale;
  DcpLayout dcp;                // this rank's share of the keys (DsaIndexerParams::dcp)
};

// The last key column a row at global position p scores: p, or under DCP the last of the local
// keys at or before p (-1 when there is none).
__device__ __forceinline__ int last_visible_key(const DcpLayout& dcp, int p) {
  return dcp.size == 1 ? p : static_cast<int>(dcp.local_count(p + 1)) - 1;
}

// Shared memory of the kernel for padded head_dim kDimP: the key tile, two q buffers (rows of
// kDimP + 8 bf16: the 16-byte pad puts the 8 rows an ldmatrix reads in 8 bank groups), two
// weight vectors, the output staging row and, for FP8 keys, the tile's factors.
template <int kDimP, bool kFp8>
size_t scores_smem_bytes(int heads_padded) {
  const size_t row_bytes = (kDimP + 8) * sizeof(bf16);
  return (kKeyTile + 2 * static_cast<size_t>(heads_padded)) * row_bytes +
         (2 * static_cast<size_t>(heads_padded) + kKeyTile + (kFp8 ? kKeyTile : 0)) * sizeof(float);
}

// The cache row (block * block_size + offset) of a sequence's key column j.
__device__ __forceinline__ int64_t key_row(const int32_t* table, int block_size, int j) {
  return static_cast<int64_t>(table[j / block_size]) * block_size + j % block_size;
}

// The bf16 key tile s_k [kKeyTile][kDimP + 8] of columns key0.. by cp.async (the caller commits
// and waits); keys past last_hi and dims past head_dim are zero-filled, never read.
template <int kDimP>
__device__ __forceinline__ void load_key_tile_bf16(bf16* s_k, const PagedIndexKeyView& keys, const int32_t* table,
                                                   int key0, int last_hi) {
  constexpr int kStride = kDimP + 8;
  constexpr int kChunks = kDimP / 8;  // 16-byte chunks per row
  for (int idx = threadIdx.x; idx < kKeyTile * kChunks; idx += kScoreThreads) {
    const int key = idx / kChunks, chunk = idx % kChunks;
    const int j = key0 + key;
    const bool valid = j <= last_hi && chunk * 8 < keys.head_dim;
    const bf16* src = keys.cache;
    if (valid) src += key_row(table, keys.block_size, j) * keys.head_dim + chunk * 8;
    cp_async_16(smem_u32(s_k + key * kStride + chunk * 8), src, valid);
  }
}

// The FP8 key tile: the codes into s_k as bf16 (exact: every E4M3 value is a bf16, so the tensor
// cores see the codes themselves) and each key's factor into s_factor [kKeyTile] (0 past last_hi).
// Plain loads, not cp.async: the codes are read once per CTA and must pass through registers to
// be converted anyway, where cp.async would need a second staging area and a second pass over
// shared memory. Every load of the thread is issued before the first conversion, and the caller
// has the first q row's cp.async in flight already, so the reads overlap.
template <int kDimP>
__device__ __forceinline__ void load_key_tile_fp8(bf16* s_k, float* s_factor, const PagedIndexKeyView& keys,
                                                  const int32_t* table, int key0, int last_hi) {
  constexpr int kStride = kDimP + 8;
  constexpr int kUnits = kDimP / 16;  // 16 codes a unit: one 16-byte load, two bf16 chunks
  static_assert(kKeyTile * kUnits % kScoreThreads == 0);
  constexpr int kLoads = kKeyTile * kUnits / kScoreThreads;
  uint4 bits[kLoads];
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const int idx = static_cast<int>(threadIdx.x) + i * kScoreThreads;
    const int j = key0 + idx / kUnits, unit = idx % kUnits;
    bits[i] = make_uint4(0, 0, 0, 0);  // zeros past last_hi and head_dim (head_dim % 16 == 0)
    if (j <= last_hi && unit * 16 < keys.head_dim) {
      bits[i] = *reinterpret_cast<const uint4*>(keys.codes + key_row(table, keys.block_size, j) * keys.head_dim +
                                                unit * 16);
    }
  }
  for (int key = threadIdx.x; key < kKeyTile; key += kScoreThreads) {
    const int j = key0 + key;
    s_factor[key] = j <= last_hi ? keys.scales[key_row(table, keys.block_size, j)] : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const int idx = static_cast<int>(threadIdx.x) + i * kScoreThreads;
    uint4* dst = reinterpret_cast<uint4*>(s_k + (idx / kUnits) * kStride + (idx % kUnits) * 16);
    dst[0] = fp8x8_to_bf16x8(make_uint2(bits[i].x, bits[i].y), 1.0f);
    dst[1] = fp8x8_to_bf16x8(make_uint2(bits[i].z, bits[i].w), 1.0f);
  }
}

// grid (num_query_tokens / kRowsPerGroup + num_seqs, ceil(max_context_len / kKeyTile)), kScoreThreads.
// kFp8: the keys are a.keys.codes and .scales (load_key_tile_fp8), else a.keys.cache.
template <int kDimP, bool kFp8>
__global__ void __launch_bounds__(kScoreThreads) dsa_scores_kernel(const ScoresArgs a) {
  constexpr int kStride = kDimP + 8;  // bf16 per shared row
  constexpr int kChunks = kDimP / 8;  // 16-byte chunks per row
  constexpr int kKSteps = kDimP / 16;
  const int hp = a.heads_padded;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* s_k = reinterpret_cast<bf16*>(smem_raw);  // [kKeyTile][kStride]
  bf16* s_q = s_k + kKeyTile * kStride;           // [2][hp][kStride]
  float* s_w = reinterpret_cast<float*>(s_q + 2 * hp * kStride);  // [2][hp], weight_scale folded in
  float* s_out = s_w + 2 * hp;                    // [kKeyTile]
  float* s_factor = s_out + kKeyTile;             // [kKeyTile], FP8 keys only

  // The block's sequence: the last s whose first group index qs[s] / G + s is <= blockIdx.x.
  const int group = blockIdx.x;
  int lo = 0, hi = a.num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.query_starts[mid] / kRowsPerGroup + mid <= group) lo = mid; else hi = mid - 1;
  }
  const int seq = lo;
  const int seq_begin = a.query_starts[seq], seq_end = a.query_starts[seq + 1];
  const int window = seq_begin / kRowsPerGroup + (group - (seq_begin / kRowsPerGroup + seq));
  if (window > seq_end / kRowsPerGroup) return;  // past the last sequence's groups (graph padding)
  const int r0 = max(seq_begin, window * kRowsPerGroup), r1 = min(seq_end, (window + 1) * kRowsPerGroup);
  if (r0 >= r1) return;
  const int first_position = a.context_lens[seq] - (seq_end - seq_begin);  // of row seq_begin
  const int key0 = blockIdx.y * kKeyTile;
  const int key_end = min(key0 + kKeyTile, a.max_context_len);  // columns this block writes
  const int p_lo = first_position + r0 - seq_begin, p_hi = first_position + r1 - 1 - seq_begin;
  const int last_hi = last_visible_key(a.dcp, p_hi);  // the last column any row of the block scores

  // Rows that see no key of the tile: -inf, no math (the last visible key grows with the row).
  int r_active = min(r1, r0 + max(0, key0 - p_lo));
  if (a.dcp.size > 1) {
    r_active = r0;
    while (r_active < r1 && last_visible_key(a.dcp, first_position + r_active - seq_begin) < key0) ++r_active;
  }
  for (int r = r0; r < r_active; ++r) {
    for (int j = key0 + static_cast<int>(threadIdx.x); j < key_end; j += kScoreThreads) {
      a.scores[r * a.stride + j] = -INFINITY;
    }
  }
  if (r_active >= r1) return;

  const int head_dim = a.keys.head_dim;
  const int32_t* table = a.keys.block_tables + static_cast<int64_t>(seq) * a.keys.block_table_stride;
  if constexpr (!kFp8) load_key_tile_bf16<kDimP>(s_k, a.keys, table, key0, last_hi);  // joins the first row's group
  const auto load_row = [&](int r, int buf) {  // q and weights of row r into buffer buf
    bf16* dst = s_q + buf * hp * kStride;
    const bf16* q_row = a.q + static_cast<int64_t>(r) * a.num_heads * head_dim;
    for (int idx = threadIdx.x; idx < hp * kChunks; idx += kScoreThreads) {
      const int head = idx / kChunks, chunk = idx % kChunks;
      const bool valid = head < a.num_heads && chunk * 8 < head_dim;
      const bf16* src = valid ? q_row + head * head_dim + chunk * 8 : a.q;
      cp_async_16(smem_u32(dst + head * kStride + chunk * 8), src, valid);
    }
    const float* w_row = a.weights + static_cast<int64_t>(r) * a.num_heads;
    for (int head = threadIdx.x; head < hp; head += kScoreThreads) {
      s_w[buf * hp + head] = head < a.num_heads ? __fmul_rn(w_row[head], a.weight_scale) : 0.0f;
    }
  };
  load_row(r_active, 0);
  cp_async_commit();
  if constexpr (kFp8) load_key_tile_fp8<kDimP>(s_k, s_factor, a.keys, table, key0, last_hi);
  cp_async_wait<0>();
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int mat = lane >> 3, r8 = lane & 7, g = lane >> 2, c2 = 2 * (lane & 3);
  uint32_t ka[2][kKSteps][4];  // this warp's 32 keys as A fragments (rows = keys, k = dims)
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      ldmatrix_x4(ka[mt][ks], smem_u32(s_k + (warp * 32 + mt * 16 + (lane & 15)) * kStride + ks * 16 + (lane >> 4) * 8));
    }
  }
  float* warp_out = s_out + warp * 32;

  for (int r = r_active, it = 0; r < r1; ++r, ++it) {
    const int buf = it & 1;
    if (r + 1 < r1) {  // the next row streams in during this one's math
      load_row(r + 1, buf ^ 1);
      cp_async_commit();
    }
    const bf16* q_buf = s_q + buf * hp * kStride;
    const float* w_buf = s_w + buf * hp;
    float part[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};  // [m tile][key g, key g + 8]
    for (int h0 = 0; h0 < hp; h0 += kHeadChunk) {
      float acc[2][2][4] = {};  // [m tile][n tile][C fragment]
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        uint32_t b[4];  // heads h0 + (mat >> 1) * 8 + r8, dims 16 ks + (mat & 1) * 8
        ldmatrix_x4(b, smem_u32(q_buf + (h0 + (mat >> 1) * 8 + r8) * kStride + ks * 16 + (mat & 1) * 8));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_bf16_16816(acc[mt][0], ka[mt][ks], b[0], b[1]);
          mma_bf16_16816(acc[mt][1], ka[mt][ks], b[2], b[3]);
        }
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float w = w_buf[h0 + nt * 8 + c2 + (e & 1)];
            float dot = acc[mt][nt][e];  // q . key, or for FP8 keys q . code, times the key's factor
            if constexpr (kFp8) dot = __fmul_rn(dot, s_factor[warp * 32 + mt * 16 + (e >> 1) * 8 + g]);
            const float relu = fmaxf(__fmul_rn(dot, a.scale), 0.0f);
            part[mt][e >> 1] = __fadd_rn(part[mt][e >> 1], __fmul_rn(w, relu));
          }
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float v = part[mt][half];
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        if ((lane & 3) == 0) warp_out[mt * 16 + half * 8 + g] = v;
      }
    }
    __syncwarp();
    const int position = first_position + r - seq_begin;
    const int j = key0 + warp * 32 + lane;
    if (j < key_end) a.scores[r * a.stride + j] = j <= last_visible_key(a.dcp, position) ? warp_out[lane] : -INFINITY;
    cp_async_wait<0>();
    __syncthreads();  // the next row is in; this row's buffers and staging row may be rewritten
  }
}

template <int kDimP, bool kFp8>
void launch_scores(const ScoresArgs& args, int num_groups, int key_tiles, cudaStream_t stream) {
  static std::atomic<uint64_t> smem_raised{0};
  const size_t smem = scores_smem_bytes<kDimP, kFp8>(args.heads_padded);
  // The limit is raised once for the largest head count this build supports.
  attention_detail::raise_smem_limit_once(dsa_scores_kernel<kDimP, kFp8>, scores_smem_bytes<kDimP, kFp8>(kMaxHeads),
                                          smem_raised);
  dsa_scores_kernel<kDimP, kFp8><<<dim3(num_groups, key_tiles), kScoreThreads, smem, stream>>>(args);
  TACHYON_CUDA_CHECK_LAUNCH();
}

// head_dim padded to the next of 16, 32, 64, 128.
template <bool kFp8>
void launch_scores_for_dim(const ScoresArgs& args, int num_groups, int key_tiles, cudaStream_t stream) {
  const int head_dim = args.keys.head_dim;
  if (head_dim <= 16) {
    launch_scores<16, kFp8>(args, num_groups, key_tiles, stream);
  } else if (head_dim <= 32) {
    launch_scores<32, kFp8>(args, num_groups, key_tiles, stream);
  } else if (head_dim <= 64) {
    launch_scores<64, kFp8>(args, num_groups, key_tiles, stream);
  } else {
    launch_scores<128, kFp8>(args, num_groups, key_tiles, stream);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <bool kFp8>
void launch_store_index_keys(const char* name, const IndexKeyRowsOut& out, const bf16* k_raw, const bf16* norm_weight,
                             const bf16* norm_bias, const float* inv_freq, float attention_scaling,
                             const int32_t* positions, const int32_t* slots, int64_t num_tokens, int32_t head_dim,
                             int32_t rope_dim, cudaStream_t stream) {
  TACHYON_CHECK(head_dim > 0 && head_dim % 8 == 0 && head_dim <= kMaxStoreDim)
      << name << ": head_dim " << head_dim << " is not a multiple of 8 up to " << kMaxStoreDim;
  TACHYON_CHECK(rope_dim >= 0 && rope_dim % 2 == 0 && rope_dim <= head_dim)
      << name << ": rope_dim " << rope_dim << " for head_dim " << head_dim;
  TACHYON_CHECK(num_tokens >= 0 && num_tokens <= INT32_MAX) << name << ": num_tokens " << num_tokens;
  if (num_tokens == 0) return;
  const auto blocks = static_cast<unsigned>((num_tokens + kStoreWarps - 1) / kStoreWarps);
  store_index_keys_kernel<kFp8><<<blocks, 32 * kStoreWarps, 0, stream>>>(out, k_raw, norm_weight, norm_bias, inv_freq,
                                                                          attention_scaling, positions, slots,
                                                                          num_tokens, head_dim, rope_dim);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void dsa_store_index_keys(bf16* cache, const bf16* k_raw, const bf16* norm_weight, const bf16* norm_bias,
                          const float* inv_freq, float attention_scaling, const int32_t* positions, const int32_t* slots,
                          int64_t num_tokens, int32_t head_dim, int32_t rope_dim, cudaStream_t stream) {
  launch_store_index_keys<false>("dsa_store_index_keys", IndexKeyRowsOut{.cache = cache}, k_raw, norm_weight,
                                 norm_bias, inv_freq, attention_scaling, positions, slots, num_tokens, head_dim,
                                 rope_dim, stream);
}

void dsa_store_index_keys_fp8(uint8_t* codes, float* scales, const bf16* k_raw, const bf16* norm_weight,
                              const bf16* norm_bias, const float* inv_freq, float attention_scaling,
                              const int32_t* positions, const int32_t* slots, int64_t num_tokens,
                              int32_t head_dim, int32_t rope_dim, cudaStream_t stream) {
  TACHYON_CHECK(codes != nullptr && scales != nullptr && reinterpret_cast<uintptr_t>(codes) % 4 == 0)
      << "dsa_store_index_keys_fp8: the codes (4-byte aligned: written 4 a word) and their factors are both needed";
  launch_store_index_keys<true>("dsa_store_index_keys_fp8", IndexKeyRowsOut{.codes = codes, .scales = scales}, k_raw,
                                norm_weight, norm_bias, inv_freq, attention_scaling, positions, slots, num_tokens,
                                head_dim, rope_dim, stream);
}

void dsa_rope_index_queries(bf16* q, const float* inv_freq, float attention_scaling, const int32_t* positions,
                            int64_t num_tokens, int32_t num_heads, int32_t head_dim, int32_t rope_dim,
                            cudaStream_t stream) {
  TACHYON_CHECK(num_heads > 0 && head_dim > 0 && rope_dim >= 0 && rope_dim % 2 == 0 && rope_dim <= head_dim &&
                rope_dim / 2 <= kMaxRopeHalf)
      << "dsa_rope_index_queries: num_heads " << num_heads << ", head_dim " << head_dim << ", rope_dim " << rope_dim;
  TACHYON_CHECK(num_tokens >= 0 && num_tokens <= INT32_MAX) << "dsa_rope_index_queries: num_tokens " << num_tokens;
  if (num_tokens == 0 || rope_dim == 0) return;
  rope_index_queries_kernel<<<static_cast<unsigned>(num_tokens), kRopeThreads, 0, stream>>>(
      q, inv_freq, attention_scaling, positions, num_heads, head_dim, rope_dim);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void dsa_index_scores(float* scores, int64_t scores_stride, const bf16* q, const float* weights,
                      const PagedIndexKeyView& keys, const int32_t* query_starts, const int32_t* context_lens,
                      int32_t num_seqs, int32_t num_query_tokens, int32_t max_context_len,
                      const DsaIndexerParams& params, cudaStream_t stream) {
  const int32_t head_dim = keys.head_dim;
  TACHYON_CHECK(head_dim > 0 && head_dim % 8 == 0 && head_dim <= 128 && params.head_dim == head_dim)
      << "dsa_index_scores: head_dim " << params.head_dim << " (keys " << head_dim
      << ") must match and be a multiple of 8 up to 128";
  TACHYON_CHECK(params.num_heads > 0 && params.num_heads <= kMaxHeads)
      << "dsa_index_scores: num_heads " << params.num_heads << " not in [1, " << kMaxHeads << "]";
  TACHYON_CHECK(keys.block_size > 0 && num_seqs >= 0 && num_query_tokens >= 0 && max_context_len >= 0 &&
                scores_stride >= max_context_len)
      << "dsa_index_scores: block_size " << keys.block_size << ", num_seqs " << num_seqs << ", rows "
      << num_query_tokens << ", max_context_len " << max_context_len << ", stride " << scores_stride;
  const bool fp8 = keys.codes != nullptr;
  if (fp8) {
    TACHYON_CHECK(keys.scales != nullptr) << "dsa_index_scores: FP8 index keys (codes) need their factors (scales)";
    TACHYON_CHECK(head_dim % 16 == 0) << "dsa_index_scores: FP8 index keys need head_dim a multiple of 16 (codes are "
                                         "read 16 a load), not "
                                      << head_dim;
  }
  TACHYON_CHECK(fp8 || keys.cache != nullptr) << "dsa_index_scores: no index keys (cache or codes)";
  TACHYON_CHECK(aligned16(q) && aligned16(fp8 ? static_cast<const void*>(keys.codes) : keys.cache))
      << "dsa_index_scores: q and the key cache (bf16 keys or FP8 codes) must be 16-byte aligned";
  if (num_seqs == 0 || num_query_tokens == 0 || max_context_len == 0) return;
  const int key_tiles = (max_context_len + kKeyTile - 1) / kKeyTile;
  TACHYON_CHECK(key_tiles <= 65535) << "dsa_index_scores: max_context_len " << max_context_len << " too long";
  const int num_groups = num_query_tokens / kRowsPerGroup + num_seqs;
  const ScoresArgs args{scores, scores_stride, q, weights, keys, query_starts, context_lens, num_seqs,
                        max_context_len, params.num_heads,
                        (params.num_heads + kHeadChunk - 1) / kHeadChunk * kHeadChunk, params.scale,
                        params.weight_scale, params.dcp};
  if (fp8) {
    launch_scores_for_dim<true>(args, num_groups, key_tiles, stream);
  } else {
    launch_scores_for_dim<false>(args, num_groups, key_tiles, stream);
  }
}

}  // namespace tachyon::kernels::cuda
