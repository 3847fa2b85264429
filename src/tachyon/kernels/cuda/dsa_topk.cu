// The lightning indexer's top-k selection on the GPU (dsa_indexer.h `dsa_select_topk`): per query
// row, the positions of the topk best scores, ascending, ties to the earlier position, exactly as
// kernels/cpu/dsa_indexer.cpp's stable sort picks them. Test: tests/gpu/test_dsa_kernels.cpp.
//
// Scores map to an order-preserving uint32 key (negative floats flipped, positive ones get the
// sign bit; -0 is read as +0 so the two tie, as the CPU's `>` has them). One 1024-thread CTA
// selects the `count` largest keys of a list of n (count < n) in three steps:
// - Stage: the keys go to shared memory once (one read of the scores), with their min and max.
// - Radix select of the count-th largest key T, in rounds over the set [lo, hi] that must hold
//   T: a histogram of (key - lo) >> shift in 2048 bins, where shift makes the set's *actual*
//   range fill the bins (a fixed top-11-bit digit puts scores of one sign and a few binades into
//   a handful of bins, and the shared atomics serialize). The bin holding T becomes the next set;
//   its exact min and max are taken again, so a set of equal keys (a row of zeros) ends the
//   search without a histogram; once the set fits 4096 keys it is gathered into a small buffer
//   and the next rounds run on that, and a set of at most 256 keys is ranked directly (each
//   key counts the keys above it). Every round shrinks the range by 2^11 or ends, so at most 3
//   rounds; random scores take two passes over the staged list (histogram, gather).
//   Atomics aggregate the lanes of a warp that share the first active lane's bin (one ballot), so
//   even a set dominated by one value costs at most ~8-way conflicts on average.
// - Ordered compaction: each warp owns a contiguous segment of the list; one pass counts its
//   keys > T and == T (ballots), a scan over the 32 warps gives the offsets, a second pass writes
//   kept j at (keys > T before j) + min(ties before j, ties kept): ascending, ties to the earlier.
// A list longer than the shared memory is not staged: the same code reads it from global memory
// (L2), starting from the fixed top-11-bit digit and gathering T's bin into the shared memory.
//
// The one non-obvious decision: few long rows are split across CTAs. One CTA per row leaves most
// SMs idle at decode (a 128K row on one SM was ~200 us). With the split, grid (chunks, rows)
// selects each chunk's local top-k (key and position) into the workspace, and one CTA per row
// then selects the row's top-k from those candidates, concatenated in chunk order so their
// positions ascend. This is exact: an element in the row's top-k under (key desc, position asc)
// has at most as many elements ahead of it in its chunk, so it is in its chunk's local top-k.
// The chunk count balances the two stages (a chunk of C costs stage 1 C, stage 2 then reads
// (L / C) * topk candidates: C ~ sqrt(L * topk)), stays within one wave of CTAs for few rows,
// and always stages the chunks in shared memory when the rows are longer than it holds. It is a
// host function of (rows, max_context_len, topk, SM count) alone, so both launches are graph
// capturable; rows shorter than max_context_len leave their later chunks empty. The candidates
// need rows * chunks * topk * 8 bytes, and rows * chunks is capped (kMaxSplitCtas): many rows
// (prefill) keep one CTA per row, which already fills the GPU, and a modest workspace.
// Rows with p + 1 <= topk keep 0..p without reading a score.
#include <algorithm>
#include <atomic>
#include <cmath>

#include "tachyon/kernels/cuda/attention_common.cuh"
#include "tachyon/kernels/cuda/dsa_indexer.h"
#include "tachyon/kernels/cuda/pdl.cuh"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::kernels::cuda {
namespace {

using attention_detail::ceil_div;

constexpr int kThreads = 1024;  // 32 warps; the scans below rely on it
constexpr int kWarps = kThreads / 32;
constexpr int kDigitBits = 11;
constexpr int kBins = 1 << kDigitBits;  // two per thread in the bin scan
constexpr int kGatherCap = 4096;        // keys of a round's set kept in a small buffer once it fits
constexpr int kRankCap = 256;           // a set this small is ranked directly (4 threads a key)
constexpr int kStageCap = 48 * 1024;    // keys a CTA stages in dynamic shared memory (192 KiB)
constexpr int kUnstagedKeys = 16 * 1024;  // shared keys of the unsplit kernel when rows exceed kStageCap
// The split: a chunk worth a CTA holds at least kMinChunk and 4 * topk scores; at most kMaxChunks
// chunks a row and kMaxSplitCtas (row, chunk) CTAs a launch, which bounds the workspace.
constexpr int kMinChunk = 4096;
constexpr int kMaxChunks = 32;
constexpr int kMaxSplitCtas = 1024;

// Larger float -> larger key; +0 and -0 share a key. Scores are never NaN.
__device__ __forceinline__ uint32_t order_key(float value) {
  const uint32_t bits = value == 0.0f ? 0u : __float_as_uint(value);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

// Where a CTA reads its list's keys: the scores of a row (or chunk), candidate keys written by
// the split's first stage, or keys staged in shared memory.
struct ScoreKeys {
  const float* scores;
  __device__ uint32_t operator()(int j) const { return order_key(__ldg(scores + j)); }
};
struct GlobalKeys {
  const uint32_t* keys;
  __device__ uint32_t operator()(int j) const { return __ldg(keys + j); }
};
struct SharedKeys {
  const uint32_t* keys;
  __device__ uint32_t operator()(int j) const { return keys[j]; }
};

// The count-th largest key T and how many keys equal to T are kept (the earliest ones; >= 1).
struct Threshold {
  uint32_t key;
  int ties_kept;
};

struct SelectShared {
  int hist[kBins];
  int scan[kWarps + 1];
  uint32_t small[kGatherCap];
  uint32_t rank_keys[kRankCap];
  uint32_t lo, hi;  // min and max of the last staged or narrowed set
  int gathered;     // keys written to a gather buffer
  int digit, remaining, bin_count;
  uint32_t threshold;
  int warp_greater[kWarps], warp_ties[kWarps];
};

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

// Folds each thread's min and max key into sh.lo / sh.hi (preset to ~0 / 0) and synchronizes.
__device__ void reduce_range(uint32_t lo, uint32_t hi, SelectShared& sh) {
  lo = __reduce_min_sync(0xffffffffu, lo);
  hi = __reduce_max_sync(0xffffffffu, hi);
  if (threadIdx.x % 32 == 0) {
    atomicMin(&sh.lo, lo);
    atomicMax(&sh.hi, hi);
  }
  __syncthreads();
}

// Copies keys [0, n) of `src` to s_keys (n <= its capacity); sh.lo / sh.hi get their range.
template <typename Source>
__device__ void stage_keys(const Source& src, int n, uint32_t* s_keys, SelectShared& sh) {
  constexpr int kUnroll = 8;  // loads in flight per thread
  if (threadIdx.x == 0) sh.lo = ~0u, sh.hi = 0u;
  __syncthreads();
  uint32_t lo = ~0u, hi = 0u;
  for (int base = 0; base < n; base += kThreads * kUnroll) {
    uint32_t keys[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kThreads + static_cast<int>(threadIdx.x);
      keys[u] = j < n ? src(j) : 0u;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kThreads + static_cast<int>(threadIdx.x);
      if (j < n) {
        s_keys[j] = keys[u];
        lo = min(lo, keys[u]);
        hi = max(hi, keys[u]);
      }
    }
  }
  reduce_range(lo, hi, sh);
}

// hist[bin] += 1 for the lanes with `in`. Lanes sharing the first active lane's bin add once,
// so a warp of equal keys makes one atomic instead of 32 on one address.
__device__ __forceinline__ void count_in_bin(int* hist, bool in, uint32_t bin) {
  const unsigned active = __ballot_sync(0xffffffffu, in);
  if (active == 0) return;  // uniform
  const int lane = threadIdx.x % 32, leader = __ffs(active) - 1;
  const uint32_t leader_bin = __shfl_sync(0xffffffffu, bin, leader);
  const unsigned same = __ballot_sync(0xffffffffu, in && bin == leader_bin);
  if (lane == leader) {
    atomicAdd(&hist[leader_bin], __popc(same));
  } else if (in && bin != leader_bin) {
    atomicAdd(&hist[bin], 1);
  }
}

// The bin of T in this round: digit, T's rank among the bin's keys, and the bin's key count.
struct Bin {
  uint32_t digit;
  int remaining, count;
};

// One radix round over the set {src(j) : j < n, lo <= src(j) <= hi} holding T at rank
// `remaining` from the top: histogram of (key - lo) >> shift, then the bin holding that rank.
template <typename Source>
__device__ Bin histogram_round(const Source& src, int n, uint32_t lo, uint32_t hi, int shift, int remaining,
                               SelectShared& sh) {
  for (int i = threadIdx.x; i < kBins; i += kThreads) sh.hist[i] = 0;
  __syncthreads();
#pragma unroll 4
  for (int base = 0; base < n; base += kThreads) {  // every lane runs every round: ballots need them
    const int j = base + static_cast<int>(threadIdx.x);
    const uint32_t key = j < n ? src(j) : 0u;
    const bool in = j < n && key >= lo && key <= hi;
    count_in_bin(sh.hist, in, (key - lo) >> shift);
  }
  __syncthreads();
  // Thread i owns bins 2047 - 2i and 2046 - 2i: the scan runs from the highest bin down.
  const int bin_hi = kBins - 1 - 2 * static_cast<int>(threadIdx.x), bin_lo = bin_hi - 1;
  const int count_hi = sh.hist[bin_hi], count_lo = sh.hist[bin_lo];
  int total = 0;
  const int above = block_exclusive_scan(count_hi + count_lo, sh.scan, total);
  if (above < remaining && above + count_hi >= remaining) {
    sh.digit = bin_hi, sh.remaining = remaining - above, sh.bin_count = count_hi;
  } else if (above + count_hi < remaining && above + count_hi + count_lo >= remaining) {
    sh.digit = bin_lo, sh.remaining = remaining - above - count_hi, sh.bin_count = count_lo;
  }
  __syncthreads();
  return Bin{static_cast<uint32_t>(sh.digit), sh.remaining, sh.bin_count};  // rewritten after 2+ barriers
}

// sh.lo / sh.hi = the min and max of the set {src(j) : j < n, lo <= src(j) <= hi}; with
// `gather`, the set's keys are also copied there (in any order; the caller knows it fits).
template <typename Source>
__device__ void narrow_set(const Source& src, int n, uint32_t lo, uint32_t hi, uint32_t* gather, SelectShared& sh) {
  if (threadIdx.x == 0) sh.lo = ~0u, sh.hi = 0u, sh.gathered = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  uint32_t set_lo = ~0u, set_hi = 0u;
#pragma unroll 4
  for (int base = 0; base < n; base += kThreads) {
    const int j = base + static_cast<int>(threadIdx.x);
    const uint32_t key = j < n ? src(j) : 0u;
    const bool in = j < n && key >= lo && key <= hi;
    if (in) set_lo = min(set_lo, key), set_hi = max(set_hi, key);
    if (gather != nullptr) {  // uniform
      const unsigned mask = __ballot_sync(0xffffffffu, in);
      if (mask != 0) {
        const int leader = __ffs(mask) - 1;
        int at = 0;
        if (lane == leader) at = atomicAdd(&sh.gathered, __popc(mask));
        at = __shfl_sync(0xffffffffu, at, leader);
        if (in) gather[at + __popc(mask & ((1u << lane) - 1))] = key;
      }
    }
  }
  reduce_range(set_lo, set_hi, sh);
}

// T for rank `remaining` from the top among keys[0, m) (m <= kRankCap, any order): key i is T
// when (keys > it) < remaining <= (keys >= it). Each key's counts are split over 4 threads.
__device__ Threshold rank_select(const uint32_t* keys, int m, int remaining, SelectShared& sh) {
  constexpr int kParts = kThreads / kRankCap;
  static_assert(2 * kThreads <= kBins, "partial counts live in hist");
  const int i = threadIdx.x % kRankCap, part = threadIdx.x / kRankCap, per_part = ceil_div(m, kParts);
  int greater = 0, at_least = 0;
  if (i < m) {
    const uint32_t key = keys[i];
    for (int j = part * per_part; j < min(m, (part + 1) * per_part); ++j) {
      greater += keys[j] > key;
      at_least += keys[j] >= key;
    }
  }
  sh.hist[threadIdx.x] = greater;
  sh.hist[kThreads + threadIdx.x] = at_least;
  __syncthreads();
  if (part == 0 && i < m) {
#pragma unroll
    for (int p = 1; p < kParts; ++p) {
      greater += sh.hist[p * kRankCap + i];
      at_least += sh.hist[kThreads + p * kRankCap + i];
    }
    if (greater < remaining && remaining <= at_least) sh.threshold = keys[i], sh.remaining = remaining - greater;
  }
  __syncthreads();
  return Threshold{sh.threshold, sh.remaining};  // the ties of T all wrote the same
}

// T and its ties kept for the count-th largest key of src[0, n) (1 <= count <= n), all keys in
// [lo, hi]. gather: a shared buffer of gather_cap keys for the last rounds' set.
template <typename Source>
__device__ Threshold radix_select(const Source& src, int n, int count, uint32_t lo, uint32_t hi, uint32_t* gather,
                                  int gather_cap, SelectShared& sh) {
  int remaining = count, gathered = -1;  // gathered: the buffer's key count once the set is there
  while (lo != hi) {                     // uniform; lo == hi: every key of the set is T
    const int shift = max(0, 32 - __clz(static_cast<int>(hi - lo)) - kDigitBits);
    const Bin bin = gathered >= 0 ? histogram_round(SharedKeys{gather}, gathered, lo, hi, shift, remaining, sh)
                                  : histogram_round(src, n, lo, hi, shift, remaining, sh);
    remaining = bin.remaining;
    const uint32_t bin_lo = lo + (bin.digit << shift);
    if (shift == 0) return Threshold{bin_lo, remaining};
    hi = bin_lo + min(hi - bin_lo, (1u << shift) - 1u);
    lo = bin_lo;
    // The next set: ranked at once when small, else gathered once it fits the buffer, else
    // narrowed where it is.
    uint32_t* to = bin.count <= kRankCap ? sh.rank_keys : gathered < 0 && bin.count <= gather_cap ? gather : nullptr;
    if (gathered >= 0) {
      narrow_set(SharedKeys{gather}, gathered, lo, hi, to, sh);
    } else {
      narrow_set(src, n, lo, hi, to, sh);
    }
    if (to == sh.rank_keys) return rank_select(sh.rank_keys, bin.count, remaining, sh);
    if (to != nullptr) gathered = bin.count;
    lo = sh.lo, hi = sh.hi;  // rewritten only after the next round's barriers
  }
  return Threshold{lo, remaining};
}

// Calls emit(i, j, key) for the kept keys of src[0, n) in order of j, i = 0, 1, ...: the keys
// > T and the first t.ties_kept keys == T.
template <typename Source, typename Emit>
__device__ void emit_kept(const Source& src, int n, Threshold t, SelectShared& sh, Emit emit) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int per_warp = ceil_div(n, kThreads) * 32;
  const int begin = warp * per_warp, end = min(n, begin + per_warp);
  int greater = 0, ties = 0;
#pragma unroll 4
  for (int base = begin; base < end; base += 32) {
    const int j = base + lane;
    const uint32_t key = j < end ? src(j) : 0u;
    greater += __popc(__ballot_sync(0xffffffffu, j < end && key > t.key));
    ties += __popc(__ballot_sync(0xffffffffu, j < end && key == t.key));
  }
  if (lane == 0) sh.warp_greater[warp] = greater, sh.warp_ties[warp] = ties;
  __syncthreads();
  greater = static_cast<int>(__reduce_add_sync(0xffffffffu, lane < warp ? sh.warp_greater[lane] : 0));
  ties = static_cast<int>(__reduce_add_sync(0xffffffffu, lane < warp ? sh.warp_ties[lane] : 0));
  const unsigned lanes_before = (1u << lane) - 1;
#pragma unroll 4
  for (int base = begin; base < end; base += 32) {
    const int j = base + lane;
    const uint32_t key = j < end ? src(j) : 0u;
    const unsigned gt = __ballot_sync(0xffffffffu, j < end && key > t.key);
    const unsigned eq = __ballot_sync(0xffffffffu, j < end && key == t.key);
    const int ties_before = ties + __popc(eq & lanes_before);
    if (((gt >> lane) & 1) != 0 || (((eq >> lane) & 1) != 0 && ties_before < t.ties_kept)) {
      emit(greater + __popc(gt & lanes_before) + min(ties_before, t.ties_kept), j, key);
    }
    greater += __popc(gt);
    ties += __popc(eq);
  }
}

// The count largest keys of src[0, n) (count < n) through emit: staged in s_keys when n fits
// its smem_keys capacity, else read from global memory with s_keys as the gather buffer.
template <typename Source, typename Emit>
__device__ void select_kept(const Source& src, int n, int count, uint32_t* s_keys, int smem_keys, SelectShared& sh,
                            Emit emit) {
  if (n <= smem_keys) {  // uniform
    stage_keys(src, n, s_keys, sh);
    const SharedKeys staged{s_keys};
    emit_kept(staged, n, radix_select(staged, n, count, sh.lo, sh.hi, sh.small, kGatherCap, sh), sh, emit);
  } else {
    emit_kept(src, n, radix_select(src, n, count, 0u, ~0u, s_keys, smem_keys, sh), sh, emit);
  }
}

struct TopkArgs {
  int32_t* kept;         // [rows, topk]
  const float* scores;   // [rows, stride]
  int64_t stride;
  const int32_t* query_starts;  // [num_seqs + 1]
  const int32_t* context_lens;  // [num_seqs]
  int num_seqs, max_context_len, topk;
  int smem_keys;         // dynamic shared memory of the launch, in keys
  int chunks, chunk_len;  // the split: chunk c of a row covers columns [c * chunk_len, +chunk_len)
  uint32_t* cand_keys;   // [rows, chunks, topk] the split's candidates: keys, then
  int32_t* cand_pos;     // [rows, chunks, topk] their positions
  DcpLayout dcp;         // this rank's share of the columns (dsa_select_topk's dcp)
};

// Candidates of row t: columns 0 .. p (under DCP its local keys at or before p), 0 past
// query_starts[num_seqs] (graph padding).
__device__ int row_length(const TopkArgs& a, int t) {
  if (t < a.query_starts[0] || t >= a.query_starts[a.num_seqs]) return 0;
  int lo = 0, hi = a.num_seqs - 1;  // the last s with query_starts[s] <= t
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.query_starts[mid] <= t) lo = mid; else hi = mid - 1;
  }
  const int rows = a.query_starts[lo + 1] - a.query_starts[lo];
  const int position = a.context_lens[lo] - rows + (t - a.query_starts[lo]);
  const int visible = a.dcp.size == 1 ? position + 1 : static_cast<int>(a.dcp.local_count(position + 1));
  return max(0, min(visible, a.max_context_len));
}

// Writes -1 past min(topk, n); when n <= topk keeps 0 .. n-1 and returns true (row done).
__device__ bool keep_all_or_pad(int32_t* out, int n, int topk) {
  for (int i = min(topk, n) + static_cast<int>(threadIdx.x); i < topk; i += kThreads) out[i] = -1;
  if (n > topk) return false;
  for (int i = threadIdx.x; i < n; i += kThreads) out[i] = i;
  return true;
}

// Unsplit: grid (rows), one CTA a row.
__global__ void __launch_bounds__(kThreads, 2) topk_rows_kernel(const TopkArgs a) {
  extern __shared__ uint32_t s_keys[];
  __shared__ SelectShared sh;
  pdl_wait();  // launched with launch_pdl: nothing of the previous kernel is touched before this
  pdl_launch_dependents();
  const int t = blockIdx.x, n = row_length(a, t);
  int32_t* out = a.kept + static_cast<int64_t>(t) * a.topk;
  if (keep_all_or_pad(out, n, a.topk)) return;
  select_kept(ScoreKeys{a.scores + t * a.stride}, n, a.topk, s_keys, a.smem_keys, sh,
              [out](int i, int j, uint32_t) { out[i] = j; });
}

// Split stage 1: grid (chunks, rows). A chunk's local top-k, in position order, to its slot.
__global__ void __launch_bounds__(kThreads, 2) topk_chunks_kernel(const TopkArgs a) {
  extern __shared__ uint32_t s_keys[];
  __shared__ SelectShared sh;
  pdl_wait();
  pdl_launch_dependents();  // the merge may take its SMs now; it waits for this grid to finish
  const int c = blockIdx.x, t = blockIdx.y, n = row_length(a, t);
  const int begin = c * a.chunk_len;
  if (n <= a.topk || begin >= n) return;  // kept without a selection, or an empty chunk
  const int len = min(a.chunk_len, n - begin);
  const int64_t slot = (static_cast<int64_t>(t) * a.chunks + c) * a.topk;
  uint32_t* keys = a.cand_keys + slot;
  int32_t* positions = a.cand_pos + slot;
  const float* scores = a.scores + t * a.stride + begin;
  if (len <= a.topk) {  // the row's last chunk may be short: all of it is a candidate
    for (int i = threadIdx.x; i < len; i += kThreads) keys[i] = order_key(scores[i]), positions[i] = begin + i;
    return;
  }
  select_kept(ScoreKeys{scores}, len, a.topk, s_keys, a.smem_keys, sh, [=](int i, int j, uint32_t key) {
    keys[i] = key;
    positions[i] = begin + j;
  });
}

// Split stage 2: grid (rows). The row's top-k among its chunks' candidates: all chunks but the
// last hold topk (chunk_len > topk), so they are contiguous and their positions ascend.
__global__ void __launch_bounds__(kThreads, 2) topk_merge_kernel(const TopkArgs a) {
  extern __shared__ uint32_t s_keys[];
  __shared__ SelectShared sh;
  pdl_wait();  // stage 1 has finished and its candidates are visible
  pdl_launch_dependents();
  const int t = blockIdx.x, n = row_length(a, t);
  int32_t* out = a.kept + static_cast<int64_t>(t) * a.topk;
  if (keep_all_or_pad(out, n, a.topk)) return;
  const int last = (n - 1) / a.chunk_len;
  const int candidates = last * a.topk + min(a.topk, n - last * a.chunk_len);
  const int64_t slot = static_cast<int64_t>(t) * a.chunks * a.topk;
  const int32_t* positions = a.cand_pos + slot;
  select_kept(GlobalKeys{a.cand_keys + slot}, candidates, a.topk, s_keys, a.smem_keys, sh,
              [=](int i, int j, uint32_t) { out[i] = positions[j]; });
}

// --- the split, on the host ---

int min_chunk_len(int32_t topk) { return std::max(kMinChunk, 4 * topk); }
// Stage 2 stages its (chunks * topk) candidates.
int max_chunks(int32_t topk) { return std::min(kMaxChunks, kStageCap / topk); }
bool splittable(int32_t max_context_len, int32_t topk) {
  return max_chunks(topk) >= 2 && max_context_len >= 2 * static_cast<int64_t>(min_chunk_len(topk));
}

struct TopkSplit {
  int chunks = 1;  // 1: unsplit
  int chunk_len = 0;
};

TopkSplit plan_split(int32_t rows, int32_t max_context_len, int32_t topk, int sms) {
  if (!splittable(max_context_len, topk)) return {};
  const int balanced = static_cast<int>(std::lround(std::sqrt(static_cast<double>(max_context_len) / topk)));
  const int by_length = max_context_len / min_chunk_len(topk);  // >= 2
  const int staged = ceil_div(max_context_len, kStageCap);      // chunks that fit shared memory
  const int one_wave = sms / rows;
  int chunks = std::max(staged, std::min({one_wave, balanced, by_length}));
  chunks = std::min({chunks, by_length, max_chunks(topk), kMaxSplitCtas / rows});
  if (chunks < 2) return {};
  return TopkSplit{chunks, ceil_div(ceil_div(max_context_len, chunks), 32) * 32};
}

std::atomic<uint64_t> g_rows_smem_raised{0}, g_chunks_smem_raised{0}, g_merge_smem_raised{0};

}  // namespace

size_t dsa_topk_workspace_bytes(int32_t max_query_tokens, int32_t max_context_len, int32_t topk) {
  if (max_query_tokens <= 0 || topk <= 0 || !splittable(max_context_len, topk)) return 0;
  const int64_t ctas = std::min<int64_t>(static_cast<int64_t>(max_query_tokens) * max_chunks(topk), kMaxSplitCtas);
  return static_cast<size_t>(ctas) * topk * (sizeof(uint32_t) + sizeof(int32_t));
}

void dsa_select_topk(int32_t* kept, const float* scores, int64_t scores_stride, const int32_t* query_starts,
                     const int32_t* context_lens, int32_t num_seqs, int32_t num_query_tokens, int32_t max_context_len,
                     int32_t topk, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                     const DcpLayout& dcp) {
  TACHYON_CHECK(topk > 0 && num_seqs >= 0 && num_query_tokens >= 0 && max_context_len >= 0 &&
                scores_stride >= max_context_len)
      << "dsa_select_topk: topk " << topk << ", num_seqs " << num_seqs << ", rows " << num_query_tokens
      << ", max_context_len " << max_context_len << ", stride " << scores_stride;
  TACHYON_CHECK(workspace_bytes >= dsa_topk_workspace_bytes(num_query_tokens, max_context_len, topk))
      << "dsa_select_topk: workspace of " << workspace_bytes << " bytes, "
      << dsa_topk_workspace_bytes(num_query_tokens, max_context_len, topk) << " needed";
  if (num_query_tokens == 0) return;
  if (num_seqs == 0) {  // no row belongs to a sequence: all -1
    TACHYON_CUDA_CHECK(cudaMemsetAsync(kept, 0xff, static_cast<size_t>(num_query_tokens) * topk * sizeof(int32_t), stream));
    return;
  }
  TopkArgs a{kept, scores, scores_stride, query_starts, context_lens, num_seqs, max_context_len, topk,
             0, 1, 0, nullptr, nullptr, dcp};
  const TopkSplit split = plan_split(num_query_tokens, max_context_len, topk, tachyon::cuda::multiprocessor_count());
  constexpr size_t kMaxSmem = kStageCap * sizeof(uint32_t);
  if (split.chunks == 1) {
    a.smem_keys = max_context_len <= kStageCap ? max_context_len : kUnstagedKeys;
    attention_detail::raise_smem_limit_once(topk_rows_kernel, kMaxSmem, g_rows_smem_raised);
    launch_pdl(topk_rows_kernel, dim3(num_query_tokens), dim3(kThreads), a.smem_keys * sizeof(uint32_t), stream, a);
    return;
  }
  const size_t slots = static_cast<size_t>(num_query_tokens) * split.chunks * topk;
  TACHYON_CHECK(slots * (sizeof(uint32_t) + sizeof(int32_t)) <= workspace_bytes && workspace != nullptr)
      << "dsa_select_topk: the split of " << num_query_tokens << " rows into " << split.chunks << " chunks";
  a.chunks = split.chunks;
  a.chunk_len = split.chunk_len;
  a.cand_keys = static_cast<uint32_t*>(workspace);
  a.cand_pos = reinterpret_cast<int32_t*>(a.cand_keys + slots);
  a.smem_keys = std::min(split.chunk_len, kStageCap);
  attention_detail::raise_smem_limit_once(topk_chunks_kernel, kMaxSmem, g_chunks_smem_raised);
  launch_pdl(topk_chunks_kernel, dim3(split.chunks, num_query_tokens), dim3(kThreads), a.smem_keys * sizeof(uint32_t),
             stream, a);
  a.smem_keys = split.chunks * topk;  // <= kStageCap (max_chunks)
  attention_detail::raise_smem_limit_once(topk_merge_kernel, kMaxSmem, g_merge_smem_raised);
  launch_pdl(topk_merge_kernel, dim3(num_query_tokens), dim3(kThreads), a.smem_keys * sizeof(uint32_t), stream, a);
}

}  // namespace tachyon::kernels::cuda
