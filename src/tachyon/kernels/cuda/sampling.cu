// Sampling kernel: one 1024-thread CTA per row walks the row's logits in passes and mirrors the
// CPU sampler (engine/sampler.cpp) step by step. Nothing is sorted and nothing is rewritten: a
// "source" yields (value, id) items on the fly (the processed logits, the raw logits, or a short
// list in shared memory), and each filter only narrows a Cut: keep values above a key, and of the
// values equal to it the ids up to id_limit (CPU ties go to the lower id).
//   top-k / top-N logprobs: radix_search on exact counts (float histograms hold them exactly);
//          for k <= kListCapacity one histogram round finds the k-th value's 11-bit bin, the items
//          at or above it move to shared memory, and the rest runs there.
//   top-p: radix_search on float masses to get close, then key_mass re-derives the threshold
//          from exact double sums, so the cut never rests on a float histogram's rounding.
//   draw:  double total, then find_crossing: the first id whose running sum exceeds u * total.
// Every block reduction and scan has a fixed order: a row's result is deterministic and does not
// depend on other rows. Penalties touch few ids: a shared bitmap marks them and an int32 per id
// in the workspace holds their flags and output counts.
// The first pass (Stats: argmax, finite count, raw log-sum-exp) of a row with nothing touched runs
// before this kernel, split over chunks (row_stats_kernel), and the kernel only combines it.
// Passes over the vocabulary: greedy 1 (+2 for top-N logprobs); temperature / min-p 2.5;
// top-k (+ top-p, min-p) 3; top-p without top-k about 7 (its exact threshold needs the masses).
// Longer than our usual .cu (~600 lines) because the device exp must be glibc's, and the spec's
// tie and rounding rules each need their pass; splitting it would scatter one algorithm.
#include "tachyon/kernels/cuda/sampling.h"

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>

namespace tachyon::kernels::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kItems = 8;            // contiguous items per thread in the id-ordered scans
constexpr int kBins = 2048;          // radix rounds of 11, 11 and 10 bits of the 32-bit key
constexpr int kListCapacity = 2048;  // top-k sets up to this size move to shared memory
constexpr uint32_t kMaskedBit = 1u << 31, kSeenBit = 1u << 30, kCountMask = kSeenBit - 1;

// A pass over a source is a real call: it gets a fresh register allocation under the 64-register
// cap of a 1024-thread CTA (inlined into one kernel body, the sampling paths spilled).
#define TACHYON_PASS __device__ __noinline__

// --- glibc's expf (sysdeps/ieee754/flt-32/e_expf.c, the x86-64 FMA build), bit for bit: checked
// against std::exp on every negative float. glibc's SSE2 build (CPUs without FMA) differs from it
// at one input of the 1.1e9 in [-87, 0], so either host matches. ---
#define TACHYON_EXP2F_TABLE                                                                        \
  {0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b, \
   0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, \
   0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, \
   0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13, \
   0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad, \
   0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f, \
   0x3fefa4afa2a490da, 0x3fefd0765b6e4540}
__device__ const uint64_t kExp2TableDevice[32] = TACHYON_EXP2F_TABLE;  // 2^(i/32) - (i << 47), as bits
#ifndef __CUDA_ARCH__
constexpr uint64_t kExp2TableHost[32] = TACHYON_EXP2F_TABLE;
#endif

__host__ __device__ inline double mul_rn(double a, double b) {  // never contracted into an fma
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

__host__ __device__ inline float expf_glibc(float x) {
  uint32_t bits;
  memcpy(&bits, &x, 4);
  const uint32_t abstop = (bits >> 20) & 0x7ff;
  if (abstop >= 0x42b) {                       // |x| >= 88 or NaN
    if (bits == 0xff800000u) return 0.0f;      // -inf
    if (abstop >= 0x7f8) return x + x;         // +inf, NaN
    if (x > 0x1.62e42ep6f) return INFINITY;    // overflow
    if (x < -0x1.9fe368p6f) return 0.0f;       // underflow
    if (x < -0x1.9d1d9ep6f) return 0x1p-149f;  // __math_may_uflowf: 0x1.4p-75f squared
  }
  const double xd = x, inv_ln2_n = 0x1.71547652b82fep+5, shift = 0x1.8p+52;
  const double kd_shifted = fma(inv_ln2_n, xd, shift);  // x * 32 / ln2 rounded to an integer k
  uint64_t ki;
  memcpy(&ki, &kd_shifted, 8);
  const double kd = kd_shifted - shift;
  const double r = fma(inv_ln2_n, xd, -kd);  // x * 32 / ln2 - k, in [-1/2, 1/2]
#ifdef __CUDA_ARCH__
  uint64_t t = __ldg(&kExp2TableDevice[ki % 32]);
#else
  uint64_t t = kExp2TableHost[ki % 32];
#endif
  t += ki << 47;
  double s;  // 2^(k / 32)
  memcpy(&s, &t, 8);
  const double z = fma(r, 0x1.c6af84b912394p-20, 0x1.ebfce50fac4f3p-13);
  const double y = fma(z, mul_rn(r, r), fma(r, 0x1.62e42ff0c52d6p-6, 1.0));
  return static_cast<float>(mul_rn(y, s));
}

// --- Values, keys, cuts. ---
__device__ inline int tid() { return static_cast<int>(threadIdx.x); }

__device__ inline float sanitize(float x) { return isnan(x) ? -INFINITY : (x == INFINITY ? FLT_MAX : x); }

// Monotone 32-bit key of a float (larger value, larger key); -0 and +0 share one, as they compare.
__device__ inline uint32_t order_key(float x) {
  const uint32_t u = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ inline float key_value(uint32_t k) { return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }

// Keeps values with a key above `key`, and of those at `key` the ids up to id_limit.
struct Cut {
  uint32_t key = 0;
  int32_t id_limit = INT32_MAX;
  __device__ bool keeps(float v, int32_t id) const {
    const uint32_t k = order_key(v);
    return k > key || (k == key && id <= id_limit);
  }
};
__device__ inline Cut finite_values() { return Cut{order_key(-FLT_MAX), INT32_MAX}; }  // -inf's key is below

// The CTA's shared state: the row's parameters and the scratch of every pass. One object at
// namespace scope (its address is a constant), so the sources below need no parameters.
struct Shared {  // trivially constructible, as __shared__ needs
  alignas(8) unsigned char row_bytes[sizeof(SamplingRow)];  // the row's SamplingRow
  const float* raw;       // [vocab] f32: the row's logits
  const uint32_t* allowed;  // [ceil(vocab / 32)] the row's structured-output mask, or null
  const uint32_t* state;  // [vocab] workspace: kMaskedBit | kSeenBit | output count, touched ids only
  int32_t vocab;
  bool any_touched;       // the row masks or penalizes ids (then `touched` is valid)
  float max;              // the largest processed logit (the temperature's shift)
  double log_normalizer;  // log-sum-exp of the raw logits (when logprobs are asked for)
  int32_t error;
  int32_t found;
  double above, at;
  alignas(16) unsigned char slots[kWarps * 32];  // per-warp partials of block_reduce / block_exclusive_sum
  float hist[kBins];
  int32_t list_id[kListCapacity];
  float list_value[kListCapacity];
  int32_t top_id[kMaxSampledLogprobs];  // the top-N logprobs, collected in any order
  float top_value[kMaxSampledLogprobs];
  __device__ SamplingRow& row() { return *reinterpret_cast<SamplingRow*>(row_bytes); }
};
__shared__ Shared sh;
extern __shared__ uint32_t touched[];  // [ceil(vocab / 32)] dynamic: a bit per masked or penalized id

// CPU step 0: the sanitized logit of id i, -inf where the structured-output mask refuses it.
__device__ inline float raw_logit(float raw, int32_t i) {
  if (sh.allowed != nullptr && !((__ldg(sh.allowed + (i >> 5)) >> (i & 31)) & 1u)) return -INFINITY;
  return sanitize(raw);
}

// --- Deterministic block primitives: fixed combination order, result in every thread. ---
template <class T>
__device__ T shfl_xor(T v, int mask) {
  static_assert(sizeof(T) % 4 == 0);
  int words[sizeof(T) / 4];
  memcpy(words, &v, sizeof(T));
  for (int& w : words) w = __shfl_xor_sync(0xffffffffu, w, mask);
  memcpy(&v, words, sizeof(T));
  return v;
}

template <class T, class Op>  // op: associative and commutative (bitwise, as + and max are)
__device__ T block_reduce(T v, Op op) {
  static_assert(sizeof(T) <= 32);
  T* slots = reinterpret_cast<T*>(sh.slots);
  for (int m = 16; m > 0; m >>= 1) v = op(v, shfl_xor(v, m));
  __syncthreads();  // the slots' last readers are done
  if ((tid() & 31) == 0) slots[tid() / 32] = v;
  __syncthreads();
  T all = slots[0];
  for (int w = 1; w < kWarps; ++w) all = op(all, slots[w]);
  return all;
}

template <class T>  // double or int32_t; *total: the block's sum
__device__ T block_exclusive_sum(T v, T* total) {
  T* slots = reinterpret_cast<T*>(sh.slots);
  const int lane = tid() & 31, warp = tid() / 32;
  T inclusive = v;
  for (int o = 1; o < 32; o <<= 1) {
    const T up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  T exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
  if (lane == 0) exclusive = 0;
  __syncthreads();
  if (lane == 31) slots[warp] = inclusive;
  __syncthreads();
  T base = 0, sum = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w == warp) base = sum;
    sum += slots[w];
  }
  *total = sum;
  return base + exclusive;
}

// --- Sources: size(), id(j), value(j). ---
// CPU steps 0, 2 and 3: sanitize, then min_tokens and penalties on the touched ids.
__device__ inline float processed(float x, int32_t i) {  // x: sanitize(raw[i])
  if (!sh.any_touched || !((touched[i >> 5] >> (i & 31)) & 1u)) return x;
  const SamplingRow& row = sh.row();
  const uint32_t st = __ldcg(sh.state + i);  // written with atomics (in L2) by other threads
  if (st & kMaskedBit) return -INFINITY;     // masked first; -inf survives every penalty
  if (row.repetition_penalty != 1.0f) {      // a touched id that is not masked was seen
    x = x > 0.0f ? __fdiv_rn(x, row.repetition_penalty) : __fmul_rn(x, row.repetition_penalty);
  }
  const uint32_t count = st & kCountMask;
  if (count > 0 && (row.frequency_penalty != 0.0f || row.presence_penalty != 0.0f)) {
    x = __fsub_rn(x, __fmul_rn(row.frequency_penalty, static_cast<float>(count)));
    x = __fsub_rn(x, row.presence_penalty);
  }
  return x;
}

struct ScaledSource {  // CPU step 5: (l - max) / temperature, clamped at -FLT_MAX; -inf stays
  __device__ int32_t size() const { return sh.vocab; }
  __device__ int32_t id(int32_t j) const { return j; }
  __device__ float value(int32_t j) const {
    const float l = processed(raw_logit(sh.raw[j], j), j);
    if (!(l > -INFINITY)) return -INFINITY;
    const float t = fmaxf(__fdiv_rn(__fsub_rn(l, sh.max), sh.row().temperature), -FLT_MAX);
    return t == 0.0f ? 0.0f : t;  // one zero: the largest value is exactly +0
  }
};

struct RawSource {  // the sanitized logits, for the top-N logprobs
  __device__ int32_t size() const { return sh.vocab; }
  __device__ int32_t id(int32_t j) const { return j; }
  __device__ float value(int32_t j) const { return raw_logit(sh.raw[j], j); }
};

struct ListSource {  // the first n items of the shared list, in id order
  int32_t n;
  __device__ int32_t size() const { return n; }
  __device__ int32_t id(int32_t j) const { return sh.list_id[j]; }
  __device__ float value(int32_t j) const { return sh.list_value[j]; }
};

// --- Passes. ---
struct Sum {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  template <class T>
  __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};

// The key K where the weight summed from the largest value down reaches target:
// W(key > K) < target <= W(key >= K) (or the lowest weighted key if rounding leaves all short).
// Exact for counts; for masses the float histograms only get close (see top_p_cut).
struct Threshold {
  uint32_t key = 0;
  double above = 0.0, at = 0.0;  // weight above K and at K
};
// rounds < 3 stops early: key is then the top 11 (or 22) bits of K.
template <class Source, class Weight>
TACHYON_PASS Threshold radix_search(const Source& src, Weight weight, double target, int rounds = 3) {
  Threshold th;
  uint32_t prefix = 0;
  int shift = 32;
  for (int round = 0; round < rounds; ++round) {
    const int bits = round < 2 ? 11 : 10;
    const int low = shift - bits;
    const int bins = 1 << bits;
    __syncthreads();  // the last readers of hist and found are done
    for (int b = tid(); b < bins; b += kThreads) sh.hist[b] = 0.0f;
    if (tid() == 0) sh.found = INT32_MAX;
    __syncthreads();
    for (int32_t j = tid(); j < src.size(); j += kThreads) {
      const float v = src.value(j);
      const uint32_t key = order_key(v);
      if (shift < 32 && (key >> shift) != prefix) continue;
      const float w = weight(v, src.id(j));
      if (w > 0.0f) atomicAdd(&sh.hist[(key >> low) & (bins - 1)], w);
    }
    __syncthreads();
    // Thread t holds bins hi and hi - 1, hi = bins - 1 - 2t: the scan runs from the top down.
    const int hi = bins - 1 - 2 * tid();
    const double w_hi = hi >= 0 ? sh.hist[hi] : 0.0, w_lo = hi >= 1 ? sh.hist[hi - 1] : 0.0;
    double unused;
    const double before = th.above + block_exclusive_sum(w_hi + w_lo, &unused);
    // Non-empty bins with less than target above them form a run from the top; take its last.
    if (w_hi > 0.0 && before < target) atomicMin(&sh.found, hi);
    if (w_lo > 0.0 && before + w_hi < target) atomicMin(&sh.found, hi - 1);
    __syncthreads();
    const int bin = sh.found;
    if (bin == INT32_MAX) return th;  // nothing weighted: callers never ask
    if (bin == hi) sh.above = before, sh.at = w_hi;
    if (bin == hi - 1) sh.above = before + w_hi, sh.at = w_lo;
    __syncthreads();
    th.above = sh.above;
    th.at = sh.at;
    prefix = (prefix << bits) | static_cast<uint32_t>(bin);
    shift = low;
  }
  th.key = prefix;
  return th;
}

// The first item j (source order) where the running sum of weight exceeds target; -1 if never.
// Chunks of kThreads * kItems items, kItems contiguous per thread, so the sum runs in id order.
template <class Source, class Weight>
TACHYON_PASS int32_t find_crossing(const Source& src, Weight weight, double target) {
  __syncthreads();
  if (tid() == 0) sh.found = INT32_MAX;  // ordered before the atomics by the scan's barriers
  double running = 0.0;
  for (int32_t base = 0; base < src.size(); base += kThreads * kItems) {
    const int32_t first = base + tid() * kItems, end = min(first + kItems, src.size());
    double local = 0.0;
    for (int32_t j = first; j < end; ++j) local += weight(src.value(j), src.id(j));
    double chunk;
    double sum = running + block_exclusive_sum(local, &chunk);
    if (sum <= target && sum + local > target) {  // (rounding may let two threads claim: min wins)
      for (int32_t j = first; j < end; ++j) {
        sum += weight(src.value(j), src.id(j));
        if (sum > target) {
          atomicMin(&sh.found, j);
          break;
        }
      }
    }
    __syncthreads();
    if (sh.found != INT32_MAX) return sh.found;
    running += chunk;
  }
  return -1;
}

// Copies the items that keep() accepts into the shared list, in source order; returns how many
// (callers guarantee at most kListCapacity).
template <class Source, class Keep>
TACHYON_PASS int32_t gather(const Source& src, Keep keep) {
  int32_t count = 0;
  for (int32_t base = 0; base < src.size(); base += kThreads * kItems) {
    const int32_t first = base + tid() * kItems, end = min(first + kItems, src.size());
    int32_t local = 0;
    for (int32_t j = first; j < end; ++j) local += keep(src.value(j), src.id(j)) ? 1 : 0;
    int32_t chunk;
    int32_t at = count + block_exclusive_sum(local, &chunk);
    for (int32_t j = first; j < end && local > 0; ++j) {
      const float v = src.value(j);
      if (!keep(v, src.id(j))) continue;
      if (at < kListCapacity) sh.list_id[at] = src.id(j), sh.list_value[at] = v;
      ++at;
    }
    count += chunk;
  }
  __syncthreads();
  return min(count, kListCapacity);
}

// The id of the n-th (1-based, id order) item at `key` that `cut` keeps.
template <class Source>
__device__ int32_t nth_tie(const Source& src, uint32_t key, int32_t n, Cut cut) {
  auto is_tie = [=](float v, int32_t id) { return order_key(v) == key && cut.keeps(v, id) ? 1.0 : 0.0; };
  return src.id(find_crossing(src, is_tie, n - 0.5));
}

// CPU step 6 (and the top-N logprobs): the k largest values that `cut` keeps, ties to lower ids.
template <class Source>
__device__ Cut top_count_cut(const Source& src, Cut cut, int32_t k) {
  auto count = [=](float v, int32_t id) { return cut.keeps(v, id) ? 1.0f : 0.0f; };
  const Threshold th = radix_search(src, count, k);
  Cut out{th.key, th.key == cut.key ? cut.id_limit : INT32_MAX};
  const int32_t ties = k - static_cast<int32_t>(th.above);
  if (ties < static_cast<int32_t>(th.at)) out.id_limit = nth_tie(src, th.key, ties, cut);
  return out;
}

// top_count_cut for small k, mostly in shared memory: one histogram round over the source finds
// the 11-bit bin of the k-th value; when that bin and the ones above hold at most kListCapacity
// items they move to the shared list (id order) and the exact search runs there. Returns the
// list's size (cut narrowed to the k largest), or -1 with cut unchanged when they do not fit.
template <class Source>
__device__ int32_t top_count_listed(const Source& src, Cut& cut, int32_t k) {
  const Cut prior = cut;
  auto count = [=](float v, int32_t id) { return prior.keeps(v, id) ? 1.0f : 0.0f; };
  const Threshold coarse = radix_search(src, count, k, 1);
  if (coarse.above + coarse.at > kListCapacity) return -1;
  auto near_top = [=](float v, int32_t id) { return (order_key(v) >> 21) >= coarse.key && prior.keeps(v, id); };
  const int32_t n = gather(src, near_top);
  cut = top_count_cut(ListSource{n}, prior, k);
  return n;
}

// The items `cut` keeps (at most kMaxSampledLogprobs), in any order, into sh.top_*.
template <class Source>
__device__ void collect_top(const Source& src, Cut cut) {
  __syncthreads();
  if (tid() == 0) sh.found = 0;
  __syncthreads();
  for (int32_t j = tid(); j < src.size(); j += kThreads) {
    const float v = src.value(j);
    if (!cut.keeps(v, src.id(j))) continue;
    const int32_t slot = atomicAdd(&sh.found, 1);
    if (slot < kMaxSampledLogprobs) sh.top_id[slot] = src.id(j), sh.top_value[slot] = v;
  }
  __syncthreads();
}

// Exact double masses above and at a key, and the nearest keys with mass on either side.
struct KeyMass {
  double above, at;
  int32_t count_at;
  uint32_t below;      // largest key under `key` (0: none)
  uint32_t not_above;  // ~ smallest key over `key` (0: none)
};
struct KeyMassOp {
  __device__ KeyMass operator()(const KeyMass& a, const KeyMass& b) const {
    return {a.above + b.above, a.at + b.at, a.count_at + b.count_at, max(a.below, b.below), max(a.not_above, b.not_above)};
  }
};
template <class Source, class Weight>
TACHYON_PASS KeyMass key_mass(const Source& src, Weight mass, uint32_t key) {
  KeyMass m{0.0, 0.0, 0, 0u, 0u};
  for (int32_t j = tid(); j < src.size(); j += kThreads) {
    const float v = src.value(j);
    const float w = mass(v, src.id(j));
    if (w <= 0.0f) continue;
    const uint32_t k = order_key(v);
    if (k > key) m.above += w, m.not_above = max(m.not_above, ~k);
    if (k == key) m.at += w, ++m.count_at;
    if (k < key) m.below = max(m.below, k);
  }
  return block_reduce(m, KeyMassOp{});
}

// CPU step 7: the smallest most-likely set (of what `cut` keeps) whose mass reaches top_p.
template <class Source>
__device__ Cut top_p_cut(const Source& src, Cut cut, float top_p) {
  // exp(t - max) with the largest kept t = +0 (the max logit scaled), as on the CPU.
  auto mass = [=](float t, int32_t id) { return cut.keeps(t, id) ? expf_glibc(t) : 0.0f; };
  double total = 0.0;
  for (int32_t j = tid(); j < src.size(); j += kThreads) total += mass(src.value(j), src.id(j));
  const double target = static_cast<double>(top_p) * block_reduce(total, Sum{});
  uint32_t key = radix_search(src, mass, target).key;
  KeyMass m;
  for (int step = 0;; ++step) {  // one step but when a float histogram misled the search
    m = key_mass(src, mass, key);
    uint32_t next = key;
    if (m.above >= target && m.not_above != 0) next = ~m.not_above;
    if (m.above + m.at < target && m.below != 0) next = m.below;
    if (next == key || step == 7) break;
    key = next;
  }
  if (m.count_at == 0 || m.above + m.at < target) return cut;  // rounding left all short: keep all, as the CPU
  // The CPU adds the tied values one at a time, lowest id first, until the mass reaches target.
  const double p = expf_glibc(key_value(key));
  int32_t n = static_cast<int32_t>(fmin(fmax(ceil((target - m.above) / p), 1.0), m.count_at));
  while (n > 1 && m.above + (n - 1) * p >= target) --n;
  while (n < m.count_at && m.above + n * p < target) ++n;
  Cut out{key, key == cut.key ? cut.id_limit : INT32_MAX};
  if (n < m.count_at) out.id_limit = nth_tie(src, key, n, cut);
  return out;
}

// CPU steps 8 and 9: min-p, then the first id whose running probability exceeds uniform * total.
template <class Source>
TACHYON_PASS int32_t draw(const Source& src, Cut cut, float min_p, double uniform) {
  auto prob = [=](float t, int32_t id) -> double {
    if (!cut.keeps(t, id)) return 0.0;
    const float p = expf_glibc(t);  // the largest kept t is +0 here too
    return p < min_p ? 0.0 : p;
  };
  double total = 0.0;
  int32_t last = -1;  // the CPU's answer when rounding puts the target past the end
  for (int32_t j = tid(); j < src.size(); j += kThreads) {
    const double p = prob(src.value(j), src.id(j));
    total += p;
    if (p > 0.0) last = max(last, src.id(j));
  }
  total = block_reduce(total, Sum{});
  last = block_reduce(last, Max{});
  const int32_t j = find_crossing(src, prob, uniform * total);
  return j >= 0 ? src.id(j) : last;
}

template <class Source>
__device__ int32_t filter_and_draw(const Source& src, Cut cut, const SamplingRow& row) {
  if (row.top_p < 1.0f) cut = top_p_cut(src, cut, row.top_p);
  return draw(src, cut, row.min_p, sampling_uniform(row.seed, row.step));
}

__device__ int32_t sample_row(const ScaledSource& src, const SamplingRow& row, int32_t num_kept) {
  Cut cut = finite_values();
  if (row.top_k > 0 && row.top_k < num_kept) {
    const int32_t n = row.top_k <= kListCapacity ? top_count_listed(src, cut, row.top_k) : -1;
    if (n >= 0) return filter_and_draw(ListSource{n}, cut, row);
    cut = top_count_cut(src, cut, row.top_k);
  }
  return filter_and_draw(src, cut, row);
}

// Whether a row has ids to mark (penalty history or min_tokens masks): only such rows' processed
// logits differ from their raw ones, so only they need sampling_kernel's own first pass.
__device__ inline bool touches_ids(const SamplingRow& row) {
  return row.num_prompt_tokens + row.num_output_tokens + row.num_masked != 0;
}

// Marks the row's masked and penalized ids in `touched` and gathers their state; resets each
// such id's state first, so the workspace needs no initialization. False when there are none.
__device__ bool prepare_touched(const int32_t* tokens, uint32_t* state) {
  const SamplingRow& row = sh.row();
  if (!touches_ids(row)) return false;
  const int32_t num_history = row.num_prompt_tokens + row.num_output_tokens;
  const int32_t total = num_history + row.num_masked, vocab = sh.vocab;
  auto id_at = [&](int32_t j) {
    return j < num_history ? tokens[row.history_begin + j] : tokens[row.masked_begin + (j - num_history)];
  };
  for (int32_t w = tid(); w < (vocab + 31) / 32; w += kThreads) touched[w] = 0;
  __syncthreads();
  for (int32_t j = tid(); j < total; j += kThreads) {
    const int32_t id = id_at(j);
    if (id < 0 || id >= vocab) {
      sh.error = kSamplingBadTokenId;
      continue;
    }
    state[id] = 0;
    atomicOr(&touched[id >> 5], 1u << (id & 31));
  }
  __syncthreads();
  for (int32_t j = tid(); j < total; j += kThreads) {
    const int32_t id = id_at(j);
    if (id < 0 || id >= vocab) continue;
    if (j < row.num_prompt_tokens) atomicOr(&state[id], kSeenBit);
    else if (j < num_history) atomicAdd(&state[id], 1u);
    else atomicOr(&state[id], kMaskedBit);
  }
  __syncthreads();
  return true;
}

struct Stats {     // pass 1 over the row
  float best;      // the largest processed logit...
  int32_t best_id; // ...at the lowest id (INT32_MAX: none is finite)
  int32_t kept;    // processed logits > -inf
  float raw_max;   // raw log-sum-exp, only when logprobs are asked for:
  double raw_sum;  // sum of exp(raw - raw_max)

  __device__ void add(float raw, int32_t i, bool want_logprobs) {  // ids ascend per thread
    const float x = raw_logit(raw, i);
    add_values(x, processed(x, i), i, want_logprobs);
  }
  // x: the raw logit (sanitized, masked), l: the processed one.
  __device__ void add_values(float x, float l, int32_t i, bool want_logprobs) {
    kept += l > -INFINITY;
    if (l > best) best = l, best_id = i;  // strict: the first (lowest id) max stays
    if (want_logprobs && x > -INFINITY) {  // online; __expf is plenty for a 1e-4 logprob
      if (x > raw_max) raw_sum *= __expf(raw_max - x), raw_max = x;
      raw_sum += __expf(x - raw_max);
    }
  }
};
struct StatsOp {
  __device__ Stats operator()(const Stats& a, const Stats& b) const {
    const bool a_first = a.best > b.best || (a.best == b.best && a.best_id < b.best_id);
    const float m = fmaxf(a.raw_max, b.raw_max);
    auto rescaled = [m](const Stats& x) { return x.raw_max == m ? x.raw_sum : x.raw_sum * exp(double(x.raw_max) - m); };
    const double sum = m == -INFINITY ? 0.0 : rescaled(a) + rescaled(b);
    return {a_first ? a.best : b.best, a_first ? a.best_id : b.best_id, a.kept + b.kept, m, sum};
  }
};

// The first pass of a row that has no penalized or masked id (nothing for prepare_touched to
// mark, so its processed logits are its raw ones) over kStatsChunk ids per CTA, grid
// [stats_chunks(vocab), rows]: one CTA walking a 128K-id row alone waited ~30 us on its loads,
// the step's largest kernel after the LM head at batch 1. Each thread adds its ids in ascending
// order and the partials combine with StatsOp in a fixed order, so best, best_id and kept are
// exactly the one-CTA pass's (a max with ties to the lowest id, and a count); raw_sum, only for
// logprobs, adds in another order (the last bits of a logprob may differ from the one-CTA pass's,
// never between runs or batches). Rows with touched ids return at once: sampling_kernel runs
// their pass itself.
constexpr int kStatsThreads = 256;
constexpr int kStatsChunk = 4096;  // ids per CTA: 16 per thread, 4 float4 loads in flight

__host__ __device__ inline int32_t stats_chunks(int32_t vocab) { return (vocab + kStatsChunk - 1) / kStatsChunk; }

__global__ void __launch_bounds__(kStatsThreads)
    row_stats_kernel(Stats* partials, const float* logits, const SamplingRow* rows, int32_t vocab,
                     const uint32_t* allowed) {
  const SamplingRow& row = rows[blockIdx.y];
  if (touches_ids(row)) return;
  const bool want_logprobs = row.num_logprobs >= 0;
  const uint32_t* mask =
      allowed != nullptr && row.allowed_row >= 0 ? allowed + static_cast<int64_t>(row.allowed_row) * ((vocab + 31) / 32) : nullptr;
  const float* raw = logits + static_cast<int64_t>(blockIdx.y) * vocab;
  const int32_t begin = static_cast<int32_t>(blockIdx.x) * kStatsChunk, end = min(vocab, begin + kStatsChunk);
  Stats s{-INFINITY, INT32_MAX, 0, -INFINITY, 0.0};
  auto add = [&](float v, int32_t i) {  // raw_logit without the shared state
    const float x = mask != nullptr && !((__ldg(mask + (i >> 5)) >> (i & 31)) & 1u) ? -INFINITY : sanitize(v);
    s.add_values(x, x, i, want_logprobs);
  };
  const int t = static_cast<int>(threadIdx.x);
  if (vocab % 4 == 0 && reinterpret_cast<uintptr_t>(raw) % 16 == 0) {  // chunks start at multiples of 4096
    constexpr int kLoads = kStatsChunk / 4 / kStatsThreads;
    const float4* quads = reinterpret_cast<const float4*>(raw + begin);
    const int32_t num_quads = (end - begin) / 4;
    float4 v[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int32_t q = t + u * kStatsThreads;
      v[u] = q < num_quads ? __ldg(quads + q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int32_t q = t + u * kStatsThreads, i = begin + 4 * q;
      if (q < num_quads) add(v[u].x, i), add(v[u].y, i + 1), add(v[u].z, i + 2), add(v[u].w, i + 3);
    }
  } else {
    for (int32_t i = begin + t; i < end; i += kStatsThreads) add(raw[i], i);
  }
  for (int m = 16; m > 0; m >>= 1) s = StatsOp{}(s, shfl_xor(s, m));
  __shared__ Stats warps[kStatsThreads / 32];
  if ((t & 31) == 0) warps[t / 32] = s;
  __syncthreads();
  if (t != 0) return;
  Stats all = warps[0];
  for (int w = 1; w < kStatsThreads / 32; ++w) all = StatsOp{}(all, warps[w]);
  partials[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = all;
}

// One CTA per row: out[r] from logits[r] ([vocab] f32) and rows[r]; workspace: [rows, vocab] u32.
// partials: row_stats_kernel's [rows, stats_chunks(vocab)], or null (the pass runs here).
__global__ void __launch_bounds__(kThreads, 1)
    sampling_kernel(SampledRow* out, const float* logits, const SamplingRow* rows, const int32_t* tokens, int32_t vocab,
                    uint32_t* workspace, const uint32_t* allowed, const Stats* partials) {
  const float* raw = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  uint32_t* state = workspace + static_cast<int64_t>(blockIdx.x) * vocab;
  if (tid() == 0) {
    sh.row() = rows[blockIdx.x];
    sh.raw = raw, sh.state = state, sh.vocab = vocab, sh.error = kSamplingOk, sh.any_touched = false;
    const int32_t mask_row = sh.row().allowed_row;
    sh.allowed = allowed != nullptr && mask_row >= 0 ? allowed + static_cast<int64_t>(mask_row) * ((vocab + 31) / 32) : nullptr;
  }
  __syncthreads();
  const SamplingRow& row = sh.row();
  const bool any_touched = prepare_touched(tokens, state);
  if (tid() == 0) sh.any_touched = any_touched;
  __syncthreads();
  const bool want_logprobs = row.num_logprobs >= 0;

  Stats s{-INFINITY, INT32_MAX, 0, -INFINITY, 0.0};
  if (partials != nullptr && !any_touched) {  // row_stats_kernel made the pass
    const int32_t chunks = stats_chunks(vocab);
    if (tid() < chunks) s = partials[static_cast<int64_t>(blockIdx.x) * chunks + tid()];
  } else if (vocab % 4 == 0 && reinterpret_cast<uintptr_t>(raw) % 16 == 0) {  // greedy is one pass: 16-byte loads
    // kPassLoads loads in flight per thread before any is used: one CTA walks the whole row, so a
    // pass that waits for each load in turn is bound by memory latency (~31 round trips for a
    // 128K vocabulary; 35 us on an H200, a batch-1 step's largest kernel after the LM head).
    // Each thread still adds its ids in ascending order.
    constexpr int kPassLoads = 4;
    const float4* quads = reinterpret_cast<const float4*>(raw);
    const int32_t num_quads = vocab / 4;
    auto add_quad = [&](const float4& v, int32_t q) {
      s.add(v.x, 4 * q, want_logprobs), s.add(v.y, 4 * q + 1, want_logprobs);
      s.add(v.z, 4 * q + 2, want_logprobs), s.add(v.w, 4 * q + 3, want_logprobs);
    };
    int32_t q = tid();
    for (; q + (kPassLoads - 1) * kThreads < num_quads; q += kPassLoads * kThreads) {
      float4 v[kPassLoads];
#pragma unroll
      for (int u = 0; u < kPassLoads; ++u) v[u] = __ldg(quads + q + u * kThreads);
#pragma unroll
      for (int u = 0; u < kPassLoads; ++u) add_quad(v[u], q + u * kThreads);
    }
    for (; q < num_quads; q += kThreads) add_quad(__ldg(quads + q), q);
  } else {
    for (int32_t i = tid(); i < vocab; i += kThreads) s.add(raw[i], i, want_logprobs);
  }
  s = block_reduce(s, StatsOp{});
  int32_t error = sh.error, token = -1;
  if (error == kSamplingOk && s.best_id == INT32_MAX) error = kSamplingNoFiniteLogit;
  if (tid() == 0) sh.max = s.best, sh.log_normalizer = double(s.raw_max) + log(s.raw_sum);  // kept in
  __syncthreads();                                                                      // shared: fewer live registers
  if (error == kSamplingOk) token = row.temperature == 0.0f ? s.best_id : sample_row(ScaledSource{}, row, s.kept);
  int32_t num_top = 0;
  if (token >= 0 && row.num_logprobs > 0) {  // the top N raw logits
    num_top = min(row.num_logprobs, vocab);
    Cut cut;
    const int32_t n = top_count_listed(RawSource{}, cut, num_top);
    if (n >= 0) collect_top(ListSource{n}, cut);
    else collect_top(RawSource{}, top_count_cut(RawSource{}, cut, num_top));
  }
  if (tid() != 0) return;
  SampledRow& o = out[blockIdx.x];
  o.token = token;
  o.error = error;
  const double log_normalizer = sh.log_normalizer;
  o.logprob = token >= 0 && row.num_logprobs >= 0 ? static_cast<float>(raw_logit(sh.raw[token], token) - log_normalizer) : 0.0f;
  o.num_top = num_top;
  for (int32_t a = 1; a < num_top; ++a) {  // insertion sort: value descending, then id ascending
    const int32_t id = sh.top_id[a];
    const float v = sh.top_value[a];
    int32_t b = a;
    for (; b > 0 && (sh.top_value[b - 1] < v || (sh.top_value[b - 1] == v && sh.top_id[b - 1] > id)); --b) {
      sh.top_id[b] = sh.top_id[b - 1], sh.top_value[b] = sh.top_value[b - 1];
    }
    sh.top_id[b] = id, sh.top_value[b] = v;
  }
  for (int32_t a = 0; a < num_top; ++a) {
    o.top_ids[a] = sh.top_id[a];
    o.top_logprobs[a] = static_cast<float>(sh.top_value[a] - log_normalizer);
  }
}

__global__ void resolve_deferred_kernel(int32_t* token_ids, const int32_t* pairs, const int32_t* count,
                                        const SampledRow* sampled) {
  const int32_t i = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < *count) token_ids[pairs[2 * i]] = sampled[pairs[2 * i + 1]].token;
}

__global__ void expf_kernel(float* out, const float* in, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = expf_glibc(in[i]);
}

// Rows of more than one chunk take the split first pass; their partials follow the penalty
// state in the workspace, 16-byte aligned.
bool split_first_pass(int32_t vocab) { return stats_chunks(vocab) > 1; }

Stats* stats_partials(void* workspace, int32_t num_rows, int32_t vocab) {
  const uintptr_t end = reinterpret_cast<uintptr_t>(workspace) +
                        static_cast<uintptr_t>(num_rows) * static_cast<uintptr_t>(vocab) * sizeof(uint32_t);
  return reinterpret_cast<Stats*>((end + 15) / 16 * 16);
}

}  // namespace

size_t sampling_workspace_bytes(int32_t max_rows, int32_t vocab) {
  const size_t state = static_cast<size_t>(max_rows) * static_cast<size_t>(vocab) * sizeof(uint32_t);
  if (!split_first_pass(vocab)) return state;
  return state + 16 + static_cast<size_t>(max_rows) * static_cast<size_t>(stats_chunks(vocab)) * sizeof(Stats);
}

void sample(SampledRow* out, float* logits, const SamplingRow* rows, const int32_t* tokens, int32_t num_rows,
            int32_t vocab, void* workspace, size_t workspace_bytes, cudaStream_t stream, const uint32_t* allowed) {
  TACHYON_CHECK(num_rows >= 0 && vocab > 0 && vocab <= (1 << 20) * 3 / 2) << "sample: rows " << num_rows << ", vocab " << vocab;
  TACHYON_CHECK(workspace_bytes >= sampling_workspace_bytes(num_rows, vocab))
      << "sample: workspace of " << workspace_bytes << " bytes, needs " << sampling_workspace_bytes(num_rows, vocab);
  if (num_rows == 0) return;
  const size_t touched_bytes = static_cast<size_t>((vocab + 31) / 32) * sizeof(uint32_t);
  if (touched_bytes + sizeof(Shared) > 48 * 1024) {
    TACHYON_CUDA_CHECK(cudaFuncSetAttribute(sampling_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(touched_bytes)));
  }
  Stats* partials = nullptr;
  if (split_first_pass(vocab)) {
    partials = stats_partials(workspace, num_rows, vocab);
    row_stats_kernel<<<dim3(static_cast<unsigned>(stats_chunks(vocab)), static_cast<unsigned>(num_rows)), kStatsThreads,
                       0, stream>>>(partials, logits, rows, vocab, allowed);
    TACHYON_CUDA_CHECK_LAUNCH();
  }
  sampling_kernel<<<num_rows, kThreads, touched_bytes, stream>>>(out, logits, rows, tokens, vocab,
                                                                 static_cast<uint32_t*>(workspace), allowed, partials);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void resolve_deferred_tokens(int32_t* token_ids, const int32_t* pairs, const int32_t* count, int32_t max_count,
                             const SampledRow* sampled, cudaStream_t stream) {
  if (max_count <= 0) return;
  constexpr int kBlock = 128;
  resolve_deferred_kernel<<<static_cast<unsigned>((max_count + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
      token_ids, pairs, count, sampled);
  TACHYON_CUDA_CHECK_LAUNCH();
}

float sampling_expf(float x) { return expf_glibc(x); }

void sampling_expf_device(float* out, const float* in, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  expf_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(out, in, n);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
