// The KV splits shared by the two MLA kernels whose CTA walks one long key list with all the
// heads of one item: dense decode (mla_attention_decode.cu; item = a sequence, keys = its cached
// tokens) and sparse attention (sparse_mla_attention.cu; item = a query token, keys = its kept
// list). Flash-decoding: an item's tiles of kBlockN keys are cut into up to kMaxSplits
// contiguous splits, each CTA writes its rows' f32 partial (normalized output, log2-sum-exp2),
// merge_splits_kernel combines them in split order (no atomics: every run of a launch shape
// gives the same bits); an item that uses one split writes `out` directly.
//
// The one non-obvious decision is the split count's cost model. The latent stages fill an SM's
// shared memory, so one CTA runs per SM and a grid runs in waves; the count is the z that
// minimizes waves(z) x (tiles per split + a CTA's fixed cost) + the merge's cost when z > 1:
// a batch of one spreads its tiles over the SMs, a batch that fills the SMs is not cut into a
// ragged extra wave. It reads only host-known values (heads, items, longest key list, SMs), so
// launches stay graph-capturable, and at most kMaxWaves waves bound the partials' workspace.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "tachyon/kernels/cuda/mla_attention_core.cuh"
#include "tachyon/kernels/cuda/pdl.cuh"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::kernels::cuda::mla_detail {

constexpr int kSplitTokens = kBlockN;  // fewest keys worth a split of their own: one tile
constexpr int kMaxSplits = 64;         // bounds the grid for any key count (and the merge's lanes)
// The cost model, in units of one tile's time on a busy SM: a CTA's fixed cost (Q, the first
// tile's latency, the partial's write) and the merge kernel's; at most kMaxWaves waves of CTAs.
constexpr int kCtaCostTiles = 2;
constexpr int kMergeCostTiles = 2;
constexpr int kMaxWaves = 8;
constexpr int kMergeCols = 128;  // columns per merge CTA: one warp, 4 columns a lane

// How one item's tiles are split: split z covers tiles [z * tiles_per_split, +tiles_per_split)
// of n_tiles, for z < n_active (<= num_splits; the grid's other splits exit at once).
struct MlaSplit {
  int n_tiles = 0;
  int tiles_per_split = 1;
  int n_active = 0;  // 0 when the item has no keys (decode's padding)
};

__device__ __forceinline__ MlaSplit mla_split(int keys, int num_splits) {
  MlaSplit sp;
  if (keys <= 0) return sp;
  sp.n_tiles = ceil_div(keys, kBlockN);
  const int wanted = min(num_splits, ceil_div(keys, kSplitTokens));
  sp.tiles_per_split = ceil_div(sp.n_tiles, wanted);
  sp.n_active = ceil_div(sp.n_tiles, sp.tiles_per_split);
  return sp;
}

// Points `job` at tiles of split `split` < sp.n_active; it writes a partial when the item splits.
__device__ __forceinline__ void assign_split(MlaJob& job, const MlaSplit& sp, int split) {
  job.tile_begin = split * sp.tiles_per_split;
  job.tile_end = min(sp.n_tiles, job.tile_begin + sp.tiles_per_split);
  job.split = split;
  job.partial = sp.n_active > 1;
}

// The keys an item's splits divide: a decode sequence's context, a sparse token's list width.
template <MlaMode kMode>
__device__ __forceinline__ int split_keys(const MlaArgs& a, int item) {
  static_assert(kMode != MlaMode::kPrefill, "prefill is not split");
  return kMode == MlaMode::kDecode ? local_keys(a.dcp, a.context_lens[item]) : a.kept_width;
}

// Combines the splits of each (item, head): out = sum_z 2^(lse_z - max) o_z / sum_z 2^(lse_z - max)
// (and, when asked, the row's log-sum-exp: max + log2(sum_z 2^(lse_z - max)), in natural log).
// grid (num_heads, items, ceil(kv_lora_rank / kMergeCols)), one warp: lane z and z + 32 hold
// split z's weight (n_active <= kMaxSplits = 64), then each lane sums 4 columns over the splits
// in split order. Items that used one split (or none) were written by the split kernel.
template <MlaMode kMode>
__global__ void __launch_bounds__(32) merge_splits_kernel(const MlaArgs a) {
  static_assert(kMaxSplits <= 64, "two weights per lane");
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  __shared__ float s_weight[kMaxSplits];
  const int head = blockIdx.x, item = blockIdx.y, lane = threadIdx.x;
  const MlaSplit sp = mla_split(split_keys<kMode>(a, item), a.num_splits);
  if (sp.n_active <= 1) return;
  const int rank = a.cache.kv_lora_rank;
  const size_t head_row = static_cast<size_t>(item) * a.num_heads + head;
  const float* lse = a.part_lse + head_row * a.num_splits;
  const float lse_lo = lane < sp.n_active ? lse[lane] : -INFINITY;
  const float lse_hi = lane + 32 < sp.n_active ? lse[lane + 32] : -INFINITY;
  float mx = fmaxf(lse_lo, lse_hi);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, offset));
  // A split that saw no key (a sparse list's -1 entries) has lse -inf and weighs 0. Some split
  // holds a key, so the max is finite; if none did, the row gets zeros, as unsplit rows do.
  const float base = mx == -INFINITY ? 0.0f : mx;
  const float w_lo = fast_exp2(lse_lo - base), w_hi = fast_exp2(lse_hi - base);
  float sum = w_lo + w_hi;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  s_weight[lane] = w_lo;
  s_weight[lane + 32] = w_hi;
  if (a.lse != nullptr && blockIdx.z == 0 && lane == 0) a.lse[head_row] = sum > 0.0f ? (base + log2f(sum)) * kLn2 : -INFINITY;
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
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(a.out + head_row * rank + d);
  dst[0] = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
  dst[1] = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
}

// --- host side ---
// Heads per CTA (the M rows of its tiles): 16, or 32 from 32 heads up; head-group CTAs per split.
inline int mla_m_tiles(int32_t num_heads) { return num_heads >= 32 ? 2 : 1; }
inline int64_t mla_head_ctas(int32_t num_heads) { return ceil_div(num_heads, 16 * mla_m_tiles(num_heads)); }

// Splits allowed by the longest key list, before the occupancy rule.
inline int splits_for_length(int32_t max_keys) {
  return std::clamp(ceil_div(std::max(max_keys, 1), kSplitTokens), 1, kMaxSplits);
}

// The most splits the cost model may pick for `items` items: what the longest key list allows,
// and no more than kMaxWaves waves of CTAs. Never decreases with max_keys.
inline int most_splits(int32_t num_heads, int32_t items, int32_t max_keys, int sms) {
  const int64_t per_split = mla_head_ctas(num_heads) * std::max(items, 1);
  const int64_t by_waves = std::max<int64_t>(1, int64_t{kMaxWaves} * sms / per_split);
  return static_cast<int>(std::min<int64_t>(splits_for_length(max_keys), by_waves));
}

// The splits of a launch (its grid's split dimension): the count z <= most_splits that
// minimizes waves(z) * (tiles per split + kCtaCostTiles) + (z > 1 ? kMergeCostTiles : 0) for
// the longest key list, where waves(z) = ceil(head CTAs * items * z / SMs); ties go to fewer.
inline int best_splits(int32_t num_heads, int32_t items, int32_t max_keys, int sms) {
  const int64_t per_split = mla_head_ctas(num_heads) * std::max(items, 1);
  const int64_t n_tiles = ceil_div(std::max(max_keys, 1), kBlockN);
  const int most = most_splits(num_heads, items, max_keys, sms);
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

// Bytes of `rows` partials (rows = items * num_heads * splits): kv_lora_rank f32 and one lse each.
inline size_t split_partial_bytes(size_t rows, int32_t kv_lora_rank) {
  return rows * (kv_lora_rank + 1) * sizeof(float);
}

// Workspace for launches of up to max_items items with key lists up to max_keys long on the
// current device: a launch of n items uses at most most_splits(n, max_keys) splits, so the
// largest n * most_splits over the n that split bounds its partials, and kMaxWaves keeps that
// small at any n (past a few waves of items nothing splits). 0 when nothing can split.
inline size_t split_workspace_bytes(int32_t max_items, int32_t num_heads, int32_t kv_lora_rank, int32_t max_keys) {
  const int sms = tachyon::cuda::multiprocessor_count();
  size_t most_rows = 0;  // the largest items * splits of a split launch
  for (int32_t n = 1; n <= max_items; ++n) {
    const int splits = most_splits(num_heads, n, max_keys, sms);
    if (splits > 1) most_rows = std::max(most_rows, static_cast<size_t>(n) * splits);
  }
  return split_partial_bytes(most_rows * num_heads, kv_lora_rank);
}

// Points a's partials into the workspace when a.num_splits > 1, after checking its size
// (`sizing` tells the caller how to size it: the workspace-bytes function and its arguments).
inline void bind_split_workspace(MlaArgs& a, int32_t items, void* workspace, size_t workspace_bytes,
                                 const char* kernel, const char* sizing) {
  if (a.num_splits <= 1) return;
  const size_t part_rows = static_cast<size_t>(items) * a.num_heads * a.num_splits;
  const size_t needed = split_partial_bytes(part_rows, a.cache.kv_lora_rank);
  TACHYON_CHECK(workspace != nullptr && workspace_bytes >= needed)
      << kernel << ": workspace of " << workspace_bytes << " bytes, " << needed << " needed for " << a.num_splits
      << " splits (size it with " << sizing << ")";
  a.part_out = static_cast<float*>(workspace);
  a.part_lse = a.part_out + part_rows * a.cache.kv_lora_rank;
}

// Launches the merge after a split kernel of `items` items (nothing when a.num_splits == 1).
template <MlaMode kMode>
void launch_merge_splits(const MlaArgs& a, int32_t items, cudaStream_t stream) {
  if (a.num_splits <= 1) return;
  const dim3 grid(a.num_heads, items, ceil_div(a.cache.kv_lora_rank, kMergeCols));
  launch_pdl(merge_splits_kernel<kMode>, grid, dim3(32), 0, stream, a);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda::mla_detail
