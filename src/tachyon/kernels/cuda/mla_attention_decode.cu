// MLA decode over the paged latent cache: one query token per sequence, split-KV flash-decoding.
// Test: tests/gpu/test_mla_kernels.cpp (build/tests/gpu_mla_kernels).
//
// Decode is a stream over latent rows (1152 bytes per token at DeepSeek's 512 + 64), so the one
// rule is that a row is read from HBM once per (sequence, KV split) for every head: a CTA takes
// all the heads of a sequence as the M rows of its tensor-core tiles (16 heads, or 32 per CTA
// from 32 heads up, where 128 heads take 4 CTAs that run side by side and share the tile in
// L2) and walks its split's 64-key tiles (mla_attention_core.cuh) with 8 warps at rank 512.
// Splits: up to kMaxSplits contiguous pieces of >= kSplitTokens keys (one tile). The count is
// host-known (max_context_len, batch, SM count) and chosen by a small cost model: the latent
// stages fill an SM's shared memory, so one CTA runs per SM and the grid runs in waves; the
// count minimizes waves x (tiles per split + a CTA's fixed cost), plus the merge when split.
// So batch 1 spreads over up to 64 SMs, and a batch that already fills the SMs is not split
// into a ragged extra wave. Each sequence divides its own length over the splits it uses and
// the rest exit at once; a sequence that uses one split writes `out` directly, the others
// write f32 partials that merge_splits_kernel combines.
#include <algorithm>
#include <atomic>

#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/kernels/cuda/mla_attention_core.cuh"
#include "tachyon/kernels/cuda/pdl.cuh"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::kernels::cuda {
namespace {

using namespace mla_detail;

constexpr int kSplitTokens = kBlockN;  // fewest keys worth a split of their own: one tile
constexpr int kMaxSplits = 64;         // bounds the grid for any max_context_len
// The split cost model, in units of one tile's time on a busy SM: a CTA's fixed cost (Q, the
// first tile's latency, the partial's write) and the merge kernel's. At most kMaxWaves waves of
// CTAs (with one CTA per SM), which also bounds the workspace.
constexpr int kCtaCostTiles = 2;
constexpr int kMergeCostTiles = 2;
constexpr int kMaxWaves = 8;
constexpr int kMergeCols = 128;  // columns per merge CTA: one warp, 4 columns a lane

// Warps of a decode CTA: 8 at rank 512 (64 output columns and one n8 key tile each), 4 below
// (the 64-wide value would leave a warp fewer than 16 columns).
template <int kVDim>
constexpr int kDecodeWarps = kVDim == 512 ? 8 : 4;

// How one sequence's tiles are split: split z covers tiles [z * tiles_per_split, +tiles_per_split)
// of n_tiles, for z < n_active.
struct MlaDecodeSplit {
  int n_tiles = 0;
  int tiles_per_split = 1;
  int n_active = 0;  // 0 for an empty sequence
};

__device__ __forceinline__ MlaDecodeSplit mla_decode_split(int ctx, int num_splits) {
  MlaDecodeSplit sp;
  if (ctx <= 0) return sp;
  sp.n_tiles = ceil_div(ctx, kBlockN);
  const int wanted = min(num_splits, ceil_div(ctx, kSplitTokens));
  sp.tiles_per_split = ceil_div(sp.n_tiles, wanted);
  sp.n_active = ceil_div(sp.n_tiles, sp.tiles_per_split);
  return sp;
}

// grid (ceil(num_heads / kRows), num_seqs, num_splits), MlaTraits::kThreads threads, MlaTraits::kSmemBytes.
template <int kMTiles, int kVDim>
__global__ void __launch_bounds__(MlaTraits<kMTiles, kVDim, kDecodeWarps<kVDim>>::kThreads, 1)
    mla_decode_kernel(const MlaArgs a) {
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  using T = MlaTraits<kMTiles, kVDim, kDecodeWarps<kVDim>>;
  constexpr int kRows = T::kRows;
  const int head0 = blockIdx.x * kRows, seq = blockIdx.y, split = blockIdx.z;
  MlaJob job;
  job.seq = seq;
  job.row0 = seq * a.num_heads + head0;
  job.rows = min(kRows, a.num_heads - head0);
  job.ctx = a.context_lens[seq];
  if (job.ctx <= 0) {  // graph padding: zeros, written once
    if (split == 0) {
      const int rank = a.cache.kv_lora_rank;
      bf16* dst = a.out + static_cast<size_t>(job.row0) * rank;
      for (int i = threadIdx.x; i < job.rows * rank; i += T::kThreads) dst[i] = __float2bfloat16(0.0f);
    }
    return;
  }
  const MlaDecodeSplit sp = mla_decode_split(job.ctx, a.num_splits);
  if (split >= sp.n_active) return;
  job.tile_begin = split * sp.tiles_per_split;
  job.tile_end = min(sp.n_tiles, job.tile_begin + sp.tiles_per_split);
  job.split = split;
  job.partial = sp.n_active > 1;
  mla_attend<MlaMode::kDecode, kMTiles, kVDim, kDecodeWarps<kVDim>>(a, job);
}

// Combines the splits of each (sequence, head): out = sum_z 2^(lse_z - max) o_z / sum_z 2^(lse_z - max).
// grid (num_heads, num_seqs, ceil(kv_lora_rank / kMergeCols)), one warp: lane z and z + 32 hold
// split z's weight (n_active <= kMaxSplits = 64), then each lane sums 4 columns over the splits
// with independent loads in flight. Sequences that used one split (or none) were written by
// the split kernel.
__global__ void __launch_bounds__(32) merge_splits_kernel(const MlaArgs a) {
  static_assert(kMaxSplits <= 64, "two weights per lane");
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  __shared__ float s_weight[kMaxSplits];
  const int head = blockIdx.x, seq = blockIdx.y, lane = threadIdx.x;
  const MlaDecodeSplit sp = mla_decode_split(a.context_lens[seq], a.num_splits);
  if (sp.n_active <= 1) return;
  const int rank = a.cache.kv_lora_rank;
  const size_t head_row = static_cast<size_t>(seq) * a.num_heads + head;
  const float* lse = a.part_lse + head_row * a.num_splits;
  const float lse_lo = lane < sp.n_active ? lse[lane] : -INFINITY;
  const float lse_hi = lane + 32 < sp.n_active ? lse[lane + 32] : -INFINITY;
  float mx = fmaxf(lse_lo, lse_hi);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, offset));
  // Split 0 holds keys, so its lse (and the max) is finite; an absent split weighs exp2(-inf) = 0.
  const float w_lo = fast_exp2(lse_lo - mx), w_hi = fast_exp2(lse_hi - mx);
  float sum = w_lo + w_hi;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  s_weight[lane] = w_lo;
  s_weight[lane + 32] = w_hi;
  __syncwarp();
  const int d = blockIdx.z * kMergeCols + lane * 4;
  if (d >= rank) return;
  const float* part = a.part_out + head_row * a.num_splits * rank + d;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 16
  for (int z = 0; z < sp.n_active; ++z) {
    const float weight = s_weight[z];
    const float4 p = *reinterpret_cast<const float4*>(part + static_cast<size_t>(z) * rank);
    acc.x += weight * p.x;
    acc.y += weight * p.y;
    acc.z += weight * p.z;
    acc.w += weight * p.w;
  }
  const float inv = 1.0f / sum;
  __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(a.out + head_row * rank + d);
  dst[0] = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
  dst[1] = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
}

// Splits allowed by the longest context, before the occupancy rule.
int splits_for_length(int32_t max_context_len) {
  return std::clamp(ceil_div(std::max(max_context_len, 1), kSplitTokens), 1, kMaxSplits);
}

// Heads per CTA (the M rows of its tiles): 16, or 32 from 32 heads up.
int decode_m_tiles(int32_t num_heads) { return num_heads >= 32 ? 2 : 1; }

// CTAs of one (sequence, split): the head groups.
int64_t decode_head_ctas(int32_t num_heads) { return ceil_div(num_heads, 16 * decode_m_tiles(num_heads)); }

// The most splits the cost model may pick for num_seqs sequences: what the longest context
// allows, and no more than kMaxWaves waves of CTAs. Never decreases with max_context_len.
int most_splits(int32_t num_heads, int32_t num_seqs, int32_t max_context_len, int sms) {
  const int64_t per_split = decode_head_ctas(num_heads) * std::max(num_seqs, 1);
  const int64_t by_waves = std::max<int64_t>(1, int64_t{kMaxWaves} * sms / per_split);
  return static_cast<int>(std::min<int64_t>(splits_for_length(max_context_len), by_waves));
}

// The KV splits of a launch (grid z): the count z <= most_splits that minimizes
// waves(z) * (tiles per split + kCtaCostTiles) + (z > 1 ? kMergeCostTiles : 0) for the longest
// context, where waves(z) = ceil(head CTAs * num_seqs * z / SMs); ties go to fewer splits.
int decode_splits(int32_t num_heads, int32_t num_seqs, int32_t max_context_len, int sms) {
  const int64_t per_split = decode_head_ctas(num_heads) * std::max(num_seqs, 1);
  const int64_t n_tiles = ceil_div(std::max(max_context_len, 1), kBlockN);
  const int most = most_splits(num_heads, num_seqs, max_context_len, sms);
  int best = 1;
  int64_t best_cost = 0;
  for (int z = 1; z <= most; ++z) {
    const int64_t waves = (per_split * z + sms - 1) / sms;
    const int64_t cost = waves * ((n_tiles + z - 1) / z + kCtaCostTiles) + (z > 1 ? kMergeCostTiles : 0);
    if (z == 1 || cost < best_cost) {
      best = z;
      best_cost = cost;
    }
  }
  return best;
}

template <int kMTiles, int kVDim>
void launch_decode(const MlaArgs& a, cudaStream_t stream) {
  using T = MlaTraits<kMTiles, kVDim, kDecodeWarps<kVDim>>;
  static std::atomic<uint64_t> smem_raised{0};
  raise_smem_limit_once(mla_decode_kernel<kMTiles, kVDim>, T::kSmemBytes, smem_raised);
  const dim3 grid(ceil_div(a.num_heads, T::kRows), a.num_seqs, a.num_splits);
  launch_pdl(mla_decode_kernel<kMTiles, kVDim>, grid, dim3(T::kThreads), T::kSmemBytes, stream, a);
  TACHYON_CUDA_CHECK_LAUNCH();
  if (a.num_splits > 1) {
    const dim3 merge_grid(a.num_heads, a.num_seqs, ceil_div(a.cache.kv_lora_rank, kMergeCols));
    launch_pdl(merge_splits_kernel, merge_grid, dim3(32), 0, stream, a);
    TACHYON_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

// A launch of n <= max_seqs sequences with contexts <= max_context_len uses at most
// most_splits(n, max_context_len) splits (on this device's SM count), so the largest
// n * most_splits over n bounds its partials; kMaxWaves keeps that small at any length.
size_t mla_decode_workspace_bytes(int32_t max_seqs, int32_t num_heads, int32_t kv_lora_rank, int32_t max_context_len) {
  const int sms = tachyon::cuda::multiprocessor_count();
  size_t most_rows = 0;  // the largest num_seqs * splits of a split launch
  for (int32_t n = 1; n <= max_seqs; ++n) {
    const int splits = most_splits(num_heads, n, max_context_len, sms);
    if (splits > 1) most_rows = std::max(most_rows, static_cast<size_t>(n) * splits);
  }
  return most_rows * num_heads * (kv_lora_rank + 1) * sizeof(float);
}

void mla_decode_attention(bf16* out, const bf16* q, const PagedLatentView& cache, const int32_t* context_lens,
                          int32_t num_seqs, int32_t max_context_len, const MlaAttentionParams& params,
                          void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  TACHYON_CHECK(num_seqs >= 0 && max_context_len >= 0)
      << "mla_decode_attention: num_seqs " << num_seqs << " and max_context_len " << max_context_len
      << " must be >= 0";
  if (num_seqs == 0) return;
  check_mla_shapes(cache, params, "mla_decode_attention");
  TACHYON_CHECK(out != nullptr && q != nullptr && cache.cache != nullptr && cache.block_tables != nullptr &&
                context_lens != nullptr)
      << "mla_decode_attention: out, q, cache, block_tables and context_lens must all be set";
  MlaArgs a{};
  a.out = out;
  a.q = q;
  a.cache = cache;
  a.context_lens = context_lens;
  a.num_seqs = num_seqs;
  a.num_heads = params.num_heads;
  a.scale_log2 = params.scale * kLog2e;
  const int m_tiles = decode_m_tiles(params.num_heads);
  a.num_splits = decode_splits(params.num_heads, num_seqs, max_context_len, tachyon::cuda::multiprocessor_count());
  if (a.num_splits > 1) {
    const size_t part_rows = static_cast<size_t>(num_seqs) * params.num_heads * a.num_splits;
    const size_t needed = part_rows * (cache.kv_lora_rank + 1) * sizeof(float);
    TACHYON_CHECK(workspace != nullptr && workspace_bytes >= needed)
        << "mla_decode_attention: workspace of " << workspace_bytes << " bytes, " << needed
        << " needed (size it with mla_decode_workspace_bytes for this num_seqs and max_context_len)";
    a.part_out = static_cast<float*>(workspace);
    a.part_lse = a.part_out + part_rows * cache.kv_lora_rank;
  }
  const bool wide = vdim_for_rank(cache.kv_lora_rank) == 512;
  if (m_tiles == 1) {
    wide ? launch_decode<1, 512>(a, stream) : launch_decode<1, 64>(a, stream);
  } else {
    wide ? launch_decode<2, 512>(a, stream) : launch_decode<2, 64>(a, stream);
  }
}

}  // namespace tachyon::kernels::cuda
