// The lightning indexer's top-k selection on the GPU (dsa_indexer.h `dsa_select_topk`): per query
// row, the positions of the topk best scores, ascending, ties to the earlier position, exactly as
// kernels/cpu/dsa_indexer.cpp's stable sort picks them. Test: tests/gpu/test_dsa_kernels.cpp.
//
// One 1024-thread block per query row. Scores map to an order-preserving uint32 key (negative
// floats flipped, positive ones get the sign bit; -0 is read as +0 so the two tie, as the CPU's
// `>` has them). A radix select of three histogram passes (11, 11 and 10 bits; 2048 bins in
// shared memory, warp-aggregated atomics so a row of near-equal scores does not serialize on one
// bin) finds the k-th largest key T and how many of the keys equal to T are kept (the earliest
// ones). An ordered compaction then writes the kept positions without a sort: tiles of 8192
// positions, each thread a contiguous run of 8, one block-wide exclusive scan of the packed
// (greater, equal) counts gives every thread its output offset, and ties count against the
// number still to keep in position order. The row is read four times (from L2 for long rows);
// rows with p + 1 <= topk keep 0..p without reading anything.
#include "tachyon/kernels/cuda/dsa_indexer.h"

#include <cmath>

namespace tachyon::kernels::cuda {
namespace {

constexpr int kThreads = 1024;  // 32 warps; the scan below relies on it
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 2048;
constexpr int kRunLength = 8;                // contiguous positions per thread in the compaction
constexpr int kTile = kThreads * kRunLength;  // < 65536, so a tile's counts fit 16-bit halves

// Larger float -> larger key; +0 and -0 share a key. Scores are never NaN.
__device__ __forceinline__ uint32_t order_key(float value) {
  const uint32_t bits = value == 0.0f ? 0u : __float_as_uint(value);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

// Exclusive prefix sum of `value` over the block, and the block's total. s_scan: [kWarps + 1].
// Every thread must call it (it synchronizes).
__device__ int block_exclusive_scan(int value, int* s_scan, int& total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int inclusive = value;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) s_scan[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const int warp_total = s_scan[lane];
    int warp_inclusive = warp_total;
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const int other = __shfl_up_sync(0xffffffffu, warp_inclusive, offset);
      if (lane >= offset) warp_inclusive += other;
    }
    s_scan[lane] = warp_inclusive - warp_total;
    if (lane == 31) s_scan[kWarps] = warp_inclusive;
  }
  __syncthreads();
  const int exclusive = s_scan[warp] + inclusive - value;
  total = s_scan[kWarps];
  __syncthreads();  // s_scan may be reused at once
  return exclusive;
}

// The radix select: finds the count-th largest key T of row[0, n) (1 <= count <= n) and how many
// keys equal to T are kept (>= 1; the keys above T are count minus that).
__device__ void radix_select(const float* row, int n, int count, int* s_hist, int* s_scan, uint32_t& threshold,
                             int& ties_kept) {
  __shared__ int s_digit, s_remaining;
  const int lane = threadIdx.x % 32;
  uint32_t prefix = 0, prefix_mask = 0;
  int remaining = count;  // rank still sought among keys matching prefix
  constexpr int kShifts[3] = {21, 10, 0};
  constexpr uint32_t kDigitMasks[3] = {2047u, 2047u, 1023u};
#pragma unroll 1
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = kShifts[pass];
    const uint32_t digit_mask = kDigitMasks[pass];
    for (int i = threadIdx.x; i < kBins; i += kThreads) s_hist[i] = 0;
    __syncthreads();
    for (int base = 0; base < n; base += kThreads) {  // every lane runs every round: match_any needs them
      const int j = base + static_cast<int>(threadIdx.x);
      const uint32_t key = j < n ? order_key(row[j]) : 0u;
      const bool match = j < n && (key & prefix_mask) == prefix;
      const uint32_t bin = match ? (key >> shift) & digit_mask : 0xffffffffu;
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (match && lane == __ffs(peers) - 1) atomicAdd(&s_hist[bin], __popc(peers));
    }
    __syncthreads();
    // Thread i owns bins 2047 - 2i and 2046 - 2i: the scan runs from the highest bin down.
    const int bin_hi = kBins - 1 - 2 * static_cast<int>(threadIdx.x), bin_lo = bin_hi - 1;
    const int count_hi = s_hist[bin_hi], count_lo = s_hist[bin_lo];
    int total = 0;
    const int above = block_exclusive_scan(count_hi + count_lo, s_scan, total);
    if (above < remaining && above + count_hi >= remaining) {
      s_digit = bin_hi;
      s_remaining = remaining - above;
    } else if (above + count_hi < remaining && above + count_hi + count_lo >= remaining) {
      s_digit = bin_lo;
      s_remaining = remaining - above - count_hi;
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(s_digit) << shift;
    prefix_mask |= digit_mask << shift;
    remaining = s_remaining;
    __syncthreads();  // s_digit is rewritten by the next pass
  }
  threshold = prefix;
  ties_kept = remaining;
}

// grid: num_query_tokens blocks of kThreads.
__global__ void __launch_bounds__(kThreads)
    dsa_topk_kernel(int32_t* __restrict__ kept, const float* __restrict__ scores, int64_t stride,
                    const int32_t* __restrict__ query_starts, const int32_t* __restrict__ context_lens, int num_seqs,
                    int max_context_len, int topk) {
  __shared__ int s_hist[kBins];
  __shared__ int s_scan[kWarps + 1];
  const int t = blockIdx.x;
  int32_t* out = kept + static_cast<int64_t>(t) * topk;
  // The row's sequence: the last s with query_starts[s] <= t.
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_starts[mid] <= t) lo = mid; else hi = mid - 1;
  }
  int n = 0;  // candidates: columns 0 .. p
  if (t >= query_starts[0] && t < query_starts[num_seqs]) {
    const int rows = query_starts[lo + 1] - query_starts[lo];
    const int position = context_lens[lo] - rows + (t - query_starts[lo]);
    n = max(0, min(position + 1, max_context_len));
  }
  const int count = min(topk, n);
  for (int i = count + static_cast<int>(threadIdx.x); i < topk; i += kThreads) out[i] = -1;
  if (n <= topk) {  // everything is kept (uniform branch)
    for (int i = threadIdx.x; i < n; i += kThreads) out[i] = i;
    return;
  }
  const float* row = scores + static_cast<int64_t>(t) * stride;
  uint32_t threshold = 0;
  int ties_kept = 0;
  radix_select(row, n, count, s_hist, s_scan, threshold, ties_kept);

  // Ordered compaction: kept before position j = (keys > T before j) + min(ties before j, ties_kept).
  int greater_base = 0, ties_base = 0;  // over the earlier tiles; uniform
  for (int tile = 0; tile < n; tile += kTile) {
    const int first = tile + static_cast<int>(threadIdx.x) * kRunLength;
    uint32_t keys[kRunLength];
    int greater = 0, equal = 0;
#pragma unroll
    for (int i = 0; i < kRunLength; ++i) {
      const int j = first + i;
      keys[i] = j < n ? order_key(row[j]) : 0u;  // key 0 is below every real score's key but NaN's
      greater += j < n && keys[i] > threshold;
      equal += j < n && keys[i] == threshold;
    }
    int total = 0;
    const int packed = block_exclusive_scan((greater << 16) | equal, s_scan, total);
    const int greater_before = greater_base + (packed >> 16);
    int ties_before = ties_base + (packed & 0xffff);
    int at = greater_before + min(ties_before, ties_kept);
#pragma unroll
    for (int i = 0; i < kRunLength; ++i) {
      const int j = first + i;
      if (j >= n) break;
      if (keys[i] > threshold) {
        out[at++] = j;
      } else if (keys[i] == threshold) {
        if (ties_before < ties_kept) out[at++] = j;
        ++ties_before;
      }
    }
    greater_base += total >> 16;
    ties_base += total & 0xffff;
    if (greater_base + min(ties_base, ties_kept) >= count) break;  // uniform: all kept are written
  }
}

}  // namespace

size_t dsa_topk_workspace_bytes(int32_t max_query_tokens, int32_t max_context_len, int32_t topk) { return 0; }

void dsa_select_topk(int32_t* kept, const float* scores, int64_t scores_stride, const int32_t* query_starts,
                     const int32_t* context_lens, int32_t num_seqs, int32_t num_query_tokens, int32_t max_context_len,
                     int32_t topk, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  TACHYON_CHECK(topk > 0 && num_seqs >= 0 && num_query_tokens >= 0 && max_context_len >= 0 &&
                scores_stride >= max_context_len)
      << "dsa_select_topk: topk " << topk << ", num_seqs " << num_seqs << ", rows " << num_query_tokens
      << ", max_context_len " << max_context_len << ", stride " << scores_stride;
  TACHYON_CHECK(workspace_bytes >= dsa_topk_workspace_bytes(num_query_tokens, max_context_len, topk))
      << "dsa_select_topk: workspace of " << workspace_bytes << " bytes";
  if (num_query_tokens == 0) return;
  if (num_seqs == 0) {  // no row belongs to a sequence: all -1
    TACHYON_CUDA_CHECK(cudaMemsetAsync(kept, 0xff, static_cast<size_t>(num_query_tokens) * topk * sizeof(int32_t), stream));
    return;
  }
  dsa_topk_kernel<<<static_cast<unsigned>(num_query_tokens), kThreads, 0, stream>>>(
      kept, scores, scores_stride, query_starts, context_lens, num_seqs, max_context_len, topk);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
