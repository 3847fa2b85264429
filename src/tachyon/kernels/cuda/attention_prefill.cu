// Prefill (and mixed) attention over the paged KV cache: a ragged batch of query rows per
// sequence, causal, flash-attention-2 style on the tensor cores (mma.sync m16n8k16 bf16 -> f32,
// operands through ldmatrix). Test: tests/gpu/test_attention_kernels.cpp.
//
// One CTA = one head x kBlockM query rows of one sequence; its 4 warps own kMTiles m16 tiles
// each (32 rows for head_dim <= 128, so every K/V fragment read from shared memory feeds two
// MMAs; 16 rows for 256, to fit O in registers). K/V tiles of 64 keys are gathered from the
// paged blocks with cp.async into swizzled shared memory. As in flash-attention 2, K and V have
// one buffer each and their loads overlap the other's math: V(j) streams in during S = Q K(j)^T,
// K(j-1) during softmax and O += P V(j). Tiles run from the diagonal down, so only the first
// (and, with a sliding window, the last) tiles pay for masking; tiles wholly above the diagonal
// or behind the window are never loaded. Softmax is online, in f32 registers, with exp2.
// The query rows of a sequence are the last n of its context, so this one kernel serves whole
// prompts, chunked prefill and prompts behind prefix-cached blocks.
// FP8 cache: a tile's E4M3 codes and factors are loaded into registers and written as bf16
// code * factor (plain loads: the K/V tile loads then overlap the other tile's math less than
// cp.async does; prefill is bound by its math, not by these bytes).
#include <cmath>

#include "tachyon/kernels/cuda/attention.h"
#include "tachyon/kernels/cuda/attention_common.cuh"
#include "tachyon/kernels/cuda/fp8_kv.cuh"

namespace tachyon::kernels::cuda {
namespace {

using namespace attention_detail;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockN = 64;  // keys per K/V tile

template <int kHeadDim>
struct PrefillTraits {
  static constexpr int kMTiles = kHeadDim <= 128 ? 2 : 1;  // m16 tiles per warp
  static constexpr int kBlockM = 16 * kMTiles * kWarps;     // query rows per CTA: 128, or 64 past 128
  static constexpr size_t kSmemBytes = static_cast<size_t>(kBlockM + 2 * kBlockN) * kHeadDim * sizeof(bf16);
};

struct PrefillArgs {
  bf16* out;                    // [num_query_tokens, num_heads, head_dim] bf16
  const bf16* q;                // [num_query_tokens, num_heads, head_dim] bf16
  PagedKvView kv;
  const int32_t* query_starts;  // [num_seqs + 1] int32
  const int32_t* context_lens;  // [num_seqs] int32
  int32_t num_heads;
  int32_t group;                // query heads per kv head
  int32_t window;
  float scale_log2;             // scale * log2(e)
};

// grid (ceil(max_query_len / kBlockM), num_heads, num_seqs), kThreads threads, kSmemBytes.
// kFp8: the cache is FP8 (PagedKvView::fp8).
template <int kHeadDim, bool kFp8>
__global__ void __launch_bounds__(kThreads, 2) paged_prefill_kernel(const PrefillArgs a) {
  using T = PrefillTraits<kHeadDim>;
  constexpr int kMTiles = T::kMTiles, kBlockM = T::kBlockM;
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  constexpr int kKSteps = kHeadDim / 16;
  constexpr int kNTilesS = kBlockN / 8;   // n8 tiles of S
  constexpr int kNTilesO = kHeadDim / 8;  // n8 tiles of O
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* s_q = reinterpret_cast<bf16*>(smem_raw);  // [kBlockM][kHeadDim] swizzled; O staging at the end
  bf16* s_k = s_q + kBlockM * kHeadDim;           // [kBlockN][kHeadDim] swizzled
  bf16* s_v = s_k + kBlockN * kHeadDim;           // [kBlockN][kHeadDim] swizzled

  // The longest (most keys) row blocks of each head launch first.
  const int m_block = gridDim.x - 1 - blockIdx.x, head = blockIdx.y, seq = blockIdx.z;
  const int q_begin = a.query_starts[seq];
  const int n_rows = a.query_starts[seq + 1] - q_begin;
  const int row0 = m_block * kBlockM;
  if (row0 >= n_rows) return;
  const int rows = min(kBlockM, n_rows - row0);
  const int ctx = a.context_lens[seq];
  const int first_pos = ctx - n_rows;  // position of the sequence's query row 0
  const int pos_lo = first_pos + row0, pos_hi = pos_lo + rows - 1;
  const int key_lo = a.window > 0 ? max(0, pos_lo - a.window + 1) : 0;
  const int tile_lo = key_lo / kBlockN, tile_hi = pos_hi / kBlockN;  // inclusive
  const int kv_head = head / a.group;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Copy roles: 4 lanes per row, chunks (lane % 4) + 4j, rows paired r, r + 4 in each 8-lane
  // phase so the swizzled 16-byte writes of a phase hit 8 different bank groups.
  const int quad = lane >> 2;
  const int copy_row = warp * 8 + ((quad & 1) << 2) + (quad >> 1);  // 0..31, + 32 per pass
  const int copy_chunk = lane & 3;

#pragma unroll
  for (int pass = 0; pass < kBlockM / 32; ++pass) {
    const int r = copy_row + 32 * pass;
    const bf16* src = a.q + (static_cast<size_t>(q_begin + row0 + (r < rows ? r : 0)) * a.num_heads + head) * kHeadDim;
#pragma unroll
    for (int j = 0; j < kChunks / 4; ++j) {
      const int c = copy_chunk + 4 * j;
      cp_async_16(smem_u32(s_q + swizzled<kHeadDim>(r, c)), src + c * 8, r < rows);
    }
  }
  const int32_t* table = a.kv.block_tables + static_cast<size_t>(seq) * a.kv.block_table_stride;
  const size_t row_stride = static_cast<size_t>(a.kv.num_kv_heads) * kHeadDim;
  // Gathers keys [tile * kBlockN, +kBlockN) of `cache` into `dst`; keys past the context are zeros.
  // For an FP8 cache, `codes` and `factors` are the tensor's (fp8.k and fp8.k_scale, or the v ones).
  auto load_tile = [&](bf16* dst, const bf16* cache, const uint8_t* codes, const float* factors, int tile) {
#pragma unroll
    for (int pass = 0; pass < kBlockN / 32; ++pass) {
      const int r = copy_row + 32 * pass;
      const int token = tile * kBlockN + r;
      const bool valid = token < ctx;
      if constexpr (kFp8) {
        uint2 bits[kChunks / 4];
        float factor = 0.0f;
        const uint2* src = nullptr;
        if (valid) {
          const int64_t slot = static_cast<int64_t>(__ldg(table + token / a.kv.block_size)) * a.kv.block_size +
                               token % a.kv.block_size;
          const size_t head_row = static_cast<size_t>(slot) * a.kv.num_kv_heads + kv_head;
          factor = __ldg(factors + head_row);
          src = reinterpret_cast<const uint2*>(codes + head_row * kHeadDim);
        }
#pragma unroll
        for (int j = 0; j < kChunks / 4; ++j) bits[j] = valid ? __ldg(src + copy_chunk + 4 * j) : make_uint2(0, 0);
#pragma unroll
        for (int j = 0; j < kChunks / 4; ++j) {
          *reinterpret_cast<uint4*>(dst + swizzled<kHeadDim>(r, copy_chunk + 4 * j)) = fp8x8_to_bf16x8(bits[j], factor);
        }
        continue;
      }
      size_t offset = static_cast<size_t>(kv_head) * kHeadDim;
      if (valid) {
        const int64_t slot = static_cast<int64_t>(__ldg(table + token / a.kv.block_size)) * a.kv.block_size +
                             token % a.kv.block_size;
        offset += static_cast<size_t>(slot) * row_stride;
      }
#pragma unroll
      for (int j = 0; j < kChunks / 4; ++j) {
        const int c = copy_chunk + 4 * j;
        cp_async_16(smem_u32(dst + swizzled<kHeadDim>(r, c)), cache + offset + c * 8, valid);
      }
    }
  };
  load_tile(s_k, a.kv.k_cache, a.kv.fp8.k, a.kv.fp8.k_scale, tile_hi);
  cp_async_commit();

  // ldmatrix lane roles: A (Q) rows (m&1)*8 + r8 at chunk 2k + (m>>1); B (K) keys (m>>1)*8 + r8
  // at chunk 2k + (m&1); B^T (V, .trans) keys (m&1)*8 + r8 at chunk 2d + (m>>1).
  const int mat = lane >> 3, r8 = lane & 7;
  const int g = lane >> 2, c2 = 2 * (lane & 3);
  const int warp_row0 = warp * 16 * kMTiles;  // first of this warp's rows within the block

  float o[kMTiles][kNTilesO][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int n = 0; n < kNTilesO; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
  }
  float m_run[kMTiles][2], l_run[kMTiles][2];  // rows g and g + 8 of each m tile
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    m_run[mt][0] = m_run[mt][1] = -INFINITY;
    l_run[mt][0] = l_run[mt][1] = 0.0f;
  }

  for (int tile = tile_hi; tile >= tile_lo; --tile) {
    cp_async_wait<0>();
    __syncthreads();  // K(tile) (and Q) landed; every warp is done reading V(tile + 1)
    load_tile(s_v, a.kv.v_cache, a.kv.fp8.v, a.kv.fp8.v_scale, tile);
    cp_async_commit();

    // S = Q K^T: kMTiles x 16 rows by 64 keys per warp.
    float s[kMTiles][kNTilesS][4];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int n = 0; n < kNTilesS; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kKSteps; ++k) {
      uint32_t qa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
        ldmatrix_x4(qa[mt],
                    smem_u32(s_q + swizzled<kHeadDim>(warp_row0 + mt * 16 + (mat & 1) * 8 + r8, 2 * k + (mat >> 1))));
#pragma unroll
      for (int np = 0; np < kNTilesS / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_u32(s_k + swizzled<kHeadDim>(np * 16 + (mat >> 1) * 8 + r8, 2 * k + (mat & 1))));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_bf16_16816(s[mt][2 * np], qa[mt], b[0], b[1]);
          mma_bf16_16816(s[mt][2 * np + 1], qa[mt], b[2], b[3]);
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // V(tile) landed; every warp is done reading K(tile)
    if (tile > tile_lo) load_tile(s_k, a.kv.k_cache, a.kv.fp8.k, a.kv.fp8.k_scale, tile - 1);
    cp_async_commit();

    // Mask where some row of the block cannot see some key of the tile: the causal diagonal,
    // the sliding window's edge, keys past the context (those are past the diagonal too).
    const int key0 = tile * kBlockN;
    if (key0 + kBlockN - 1 > pos_lo || (a.window > 0 && key0 <= pos_hi - a.window)) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int pos = pos_lo + warp_row0 + mt * 16 + g + (e >> 1) * 8;
          const int oldest = a.window > 0 ? pos - a.window + 1 : 0;
#pragma unroll
          for (int n = 0; n < kNTilesS; ++n) {
            const int key = key0 + n * 8 + c2 + (e & 1);
            if (key > pos || key < oldest) s[mt][n][e] = -INFINITY;
          }
        }
      }
    }

    // Online softmax per row. A row may see no key of this tile (window, diagonal): its max
    // stays -inf and the exponent base falls back to 0 so nothing turns into NaN.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < kNTilesS; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * h], s[mt][n][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
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
        }
        l_run[mt][h] = l_run[mt][h] * alpha + sum;
#pragma unroll
        for (int n = 0; n < kNTilesO; ++n) {
          o[mt][n][2 * h] *= alpha;
          o[mt][n][2 * h + 1] *= alpha;
        }
      }
    }

    // O += P V, 16 keys per k step; P comes straight from the S registers.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t pa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        pa[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int d = 0; d < kHeadDim / 16; ++d) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, smem_u32(s_v + swizzled<kHeadDim>(kk * 16 + (mat & 1) * 8 + r8, 2 * d + (mat >> 1))));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_bf16_16816(o[mt][2 * d], pa[mt], b[0], b[1]);
          mma_bf16_16816(o[mt][2 * d + 1], pa[mt], b[2], b[3]);
        }
      }
    }
  }

  // Normalize and stage O (bf16) in this warp's own Q rows, which only this warp ever read,
  // then write whole 16-byte chunks.
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_run[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const int r = warp_row0 + mt * 16 + g + h * 8;
#pragma unroll
      for (int n = 0; n < kNTilesO; ++n) {
        *reinterpret_cast<uint32_t*>(s_q + swizzled<kHeadDim>(r, n) + c2) =
            pack_bf16(o[mt][n][2 * h] * inv, o[mt][n][2 * h + 1] * inv);
      }
    }
  }
  __syncwarp();
#pragma unroll
  for (int i = lane; i < 16 * kMTiles * kChunks; i += 32) {
    const int r = warp_row0 + i / kChunks, c = i % kChunks;
    if (r < rows) {
      bf16* dst = a.out + (static_cast<size_t>(q_begin + row0 + r) * a.num_heads + head) * kHeadDim + c * 8;
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(s_q + swizzled<kHeadDim>(r, c));
    }
  }
}

template <int kHeadDim, bool kFp8>
void launch_prefill_cache(const PrefillArgs& a, int num_seqs, int max_query_len, cudaStream_t stream) {
  using T = PrefillTraits<kHeadDim>;
  static std::atomic<uint64_t> smem_raised{0};
  raise_smem_limit_once(paged_prefill_kernel<kHeadDim, kFp8>, T::kSmemBytes, smem_raised);
  const dim3 grid(ceil_div(max_query_len, T::kBlockM), a.num_heads, num_seqs);
  paged_prefill_kernel<kHeadDim, kFp8><<<grid, kThreads, T::kSmemBytes, stream>>>(a);
  TACHYON_CUDA_CHECK_LAUNCH();
}

template <int kHeadDim>
void launch_prefill(const PrefillArgs& a, int num_seqs, int max_query_len, cudaStream_t stream) {
  if (a.kv.fp8.k != nullptr) {
    launch_prefill_cache<kHeadDim, true>(a, num_seqs, max_query_len, stream);
  } else {
    launch_prefill_cache<kHeadDim, false>(a, num_seqs, max_query_len, stream);
  }
}

}  // namespace

void paged_prefill_attention(bf16* out, const bf16* q, const PagedKvView& kv, const int32_t* query_starts,
                             const int32_t* context_lens, int32_t num_seqs, int32_t num_query_tokens,
                             int32_t max_query_len, const AttentionParams& params, cudaStream_t stream) {
  TACHYON_CHECK(prefill_head_dim_supported(kv.head_dim))
      << "prefill attention supports head_dim 64, 128, 192 and 256, not " << kv.head_dim;
  TACHYON_CHECK(kv.num_kv_heads > 0 && params.num_heads % kv.num_kv_heads == 0)
      << params.num_heads << " query heads over " << kv.num_kv_heads << " kv heads";
  TACHYON_CHECK(kv.block_size > 0 && num_seqs >= 0 && max_query_len >= 0 && num_query_tokens >= 0)
      << "block_size " << kv.block_size << " num_seqs " << num_seqs << " max_query_len " << max_query_len;
  check_fp8_kv_view(kv);
  if (num_seqs == 0 || max_query_len == 0 || num_query_tokens == 0) return;
  PrefillArgs a{};
  a.out = out;
  a.q = q;
  a.kv = kv;
  a.query_starts = query_starts;
  a.context_lens = context_lens;
  a.num_heads = params.num_heads;
  a.group = params.num_heads / kv.num_kv_heads;
  a.window = params.sliding_window;
  a.scale_log2 = params.scale * kLog2e;
  switch (kv.head_dim) {
    case 64: launch_prefill<64>(a, num_seqs, max_query_len, stream); break;
    case 128: launch_prefill<128>(a, num_seqs, max_query_len, stream); break;
    case 192: launch_prefill<192>(a, num_seqs, max_query_len, stream); break;  // latent attention expanded (mla_expand.h)
    default: launch_prefill<256>(a, num_seqs, max_query_len, stream); break;
  }
}

}  // namespace tachyon::kernels::cuda
