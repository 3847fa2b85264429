// MoE routing, grouping and combine (moe.h); the grouped GEMM is moe_gemm.cu.
//   topk_softmax: one warp per token; each lane holds experts lane, lane + 32, ... (up to 8),
//     the softmax's max and sum are warp reductions, and the top k are k rounds of a warp argmax
//     (higher probability wins, then the lower id), so the order is deterministic.
//   topk_sigmoid_grouped: one warp per token, experts strided over the lanes as above; the
//     choice values also go to shared memory, where each group's top 2 are scanned by 32 / G
//     adjacent lanes (G = n_group rounded up to a power of two) and merged by shuffles; lane g
//     then holds group g's score, topk_group rounds of warp argmax keep the groups, and k rounds
//     over the masked choices pick the experts (ties: the lower id, as the CPU's partial_sort).
//   align: one CTA counts pairs per expert in shared memory, lays the experts out in id order
//     padded to kMoeBlockM, and drops each pair into its expert's next free row (atomics: the
//     order inside an expert is free, and no result depends on it).
//   combine: one thread per 8 hidden values of a token, summing its k expert rows in order, then
//     adding the token's addend row (DeepSeek's shared expert) when there is one.
// Test: tests/gpu/test_moe_kernels.cpp.
#include <cfloat>

#include "tachyon/kernels/cuda/bf16_vec.cuh"
#include "tachyon/kernels/cuda/gemv_common.cuh"
#include "tachyon/kernels/cuda/moe.h"
#include "tachyon/kernels/cuda/pdl.cuh"

namespace tachyon::kernels::cuda {
namespace {

constexpr int kMaxPerLane = kMoeMaxExperts / 32;
constexpr int kMaxTopK = 16;
constexpr int kTokensPerBlock = 4;  // warps per CTA of topk_softmax

// One token's softmax top-k by one warp: row [num_experts] f32 in, ids [top_k] and weights
// [top_k] out (written by lane 0).
__device__ void topk_softmax_row(int32_t* __restrict__ ids, float* __restrict__ weights, const float* row,
                                 int32_t num_experts, int32_t top_k, bool renormalize) {
  const int lane = threadIdx.x & 31;
  float value[kMaxPerLane];
  float max_logit = -INFINITY;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int e = lane + 32 * i;
    value[i] = e < num_experts ? row[e] : -INFINITY;
    max_logit = fmaxf(max_logit, value[i]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) max_logit = fmaxf(max_logit, __shfl_xor_sync(0xffffffffu, max_logit, offset));
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    value[i] = lane + 32 * i < num_experts ? expf(value[i] - max_logit) : 0.0f;
    sum += value[i];
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float inv_sum = 1.0f / sum;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) value[i] = lane + 32 * i < num_experts ? value[i] * inv_sum : -1.0f;

  // k rounds of argmax; a chosen expert's probability becomes -1 (below every real one).
  float chosen_sum = 0.0f;
  float chosen_weight[kMaxTopK];
  int32_t chosen_id[kMaxTopK];
  for (int j = 0; j < top_k; ++j) {
    float best = -2.0f;
    int best_id = INT32_MAX;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int e = lane + 32 * i;
      if (value[i] > best) {  // ids of a lane rise with i, so ">" keeps the lower id on ties
        best = value[i];
        best_id = e;
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, best, offset);
      const int other_id = __shfl_xor_sync(0xffffffffu, best_id, offset);
      if (other > best || (other == best && other_id < best_id)) {
        best = other;
        best_id = other_id;
      }
    }
    chosen_id[j] = best_id;
    chosen_weight[j] = best;
    chosen_sum += best;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      if (lane + 32 * i == best_id) value[i] = -1.0f;
    }
  }
  if (lane == 0) {
    const float scale = renormalize ? 1.0f / chosen_sum : 1.0f;
    for (int j = 0; j < top_k; ++j) {
      ids[j] = chosen_id[j];
      weights[j] = chosen_weight[j] * scale;
    }
  }
}

__global__ void topk_softmax_kernel(int32_t* __restrict__ topk_ids, float* __restrict__ topk_weights,
                                    const float* __restrict__ logits, int64_t tokens, int32_t num_experts,
                                    int32_t top_k, bool renormalize) {
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kTokensPerBlock + (threadIdx.x >> 5);
  if (token >= tokens) return;
  topk_softmax_row(topk_ids + token * top_k, topk_weights + token * top_k, logits + token * num_experts,
                   num_experts, top_k, renormalize);
}

constexpr int kMaxGroups = 32;  // one lane per group in the group selection

// (value, id) beats (best, best_id): higher value, or equal value and lower id.
__device__ __forceinline__ bool beats(float value, int id, float best, int best_id) {
  return value > best || (value == best && id < best_id);
}

// The warp's best (value, id) under `beats`, with `carried` from the winning lane; every lane
// gets the same result (a total order, so the butterfly agrees everywhere).
__device__ __forceinline__ void warp_argmax(float& value, int& id, float& carried) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, value, offset);
    const int other_id = __shfl_xor_sync(0xffffffffu, id, offset);
    const float other_carried = __shfl_xor_sync(0xffffffffu, carried, offset);
    if (beats(other, other_id, value, id)) {
      value = other;
      id = other_id;
      carried = other_carried;
    }
  }
}

// The routing parameters of one launch (moe_topk_sigmoid_grouped's arguments); group_lanes =
// 32 / G (see the file comment).
struct SigmoidGrouped {
  const float* bias;
  int32_t num_experts, top_k, n_group, topk_group, group_lanes;
  bool renormalize;
  float routed_scaling_factor;
};

// One token's group-limited sigmoid top-k by one warp: row [num_experts] f32 in, `choice` the
// warp's shared scratch of num_experts floats, ids [top_k] and weights [top_k] out (lane 0).
__device__ void topk_sigmoid_grouped_row(int32_t* __restrict__ ids, float* __restrict__ weights, const float* row,
                                         float* choice, const SigmoidGrouped& p) {
  const float* __restrict__ bias = p.bias;
  const int32_t num_experts = p.num_experts, top_k = p.top_k, n_group = p.n_group, topk_group = p.topk_group,
                group_lanes = p.group_lanes;
  const int lane = threadIdx.x & 31;
  float score[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int e = lane + 32 * i;
    score[i] = 0.0f;
    if (e < num_experts) {
      // 1 / (1 + exp(-x)) in f32 as the CPU computes it; the exp in double rounded to f32 is the
      // correctly rounded expf (up to ~2^-29 of a midpoint), which CUDA's expf (2 ulp) is not.
      const float exp_neg = static_cast<float>(exp(-static_cast<double>(row[e])));
      score[i] = 1.0f / (1.0f + exp_neg);
      choice[e] = score[i] + (bias != nullptr ? bias[e] : 0.0f);
    }
  }
  __syncwarp();

  // Each group's two best choices, summed: the lanes [g * group_lanes, (g + 1) * group_lanes)
  // scan group g's members and merge their top 2.
  const int group_size = num_experts / n_group;
  const int my_group = lane / group_lanes, sub = lane % group_lanes;
  float first = -INFINITY, second = -INFINITY;
  if (my_group < n_group) {
    for (int e = my_group * group_size + sub; e < (my_group + 1) * group_size; e += group_lanes) {
      const float v = choice[e];
      second = fmaxf(second, fminf(first, v));
      first = fmaxf(first, v);
    }
  }
  for (int offset = group_lanes / 2; offset > 0; offset >>= 1) {
    const float other_first = __shfl_xor_sync(0xffffffffu, first, offset);
    const float other_second = __shfl_xor_sync(0xffffffffu, second, offset);
    second = fmaxf(fminf(first, other_first), fmaxf(second, other_second));
    first = fmaxf(first, other_first);
  }
  // Lane g < n_group takes group g's score from the group's first lane.
  const float group_score = __shfl_sync(0xffffffffu, first + second, (lane < n_group ? lane : 0) * group_lanes);

  uint32_t kept = 0;  // bit g: group g stays
  bool group_taken = lane >= n_group;
  for (int j = 0; j < topk_group; ++j) {
    float best = group_taken ? -INFINITY : group_score;
    int best_id = group_taken ? INT32_MAX : lane;
    float unused = 0.0f;
    warp_argmax(best, best_id, unused);
    kept |= 1u << best_id;
    if (lane == best_id) group_taken = true;
  }

  // k rounds of argmax over the masked choices (0.0 outside the kept groups, as the CPU masks).
  float masked[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int e = lane + 32 * i;
    masked[i] = e < num_experts && ((kept >> (e / group_size)) & 1u) != 0 ? choice[e] : 0.0f;
  }
  uint32_t taken = 0;  // bit i: expert lane + 32 i is chosen (or absent)
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    if (lane + 32 * i >= num_experts) taken |= 1u << i;
  }
  float chosen_score[kMaxTopK];
  int32_t chosen_id[kMaxTopK];
  for (int j = 0; j < top_k; ++j) {
    float best = -INFINITY, best_score = 0.0f;
    int best_id = INT32_MAX;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int e = lane + 32 * i;
      if (((taken >> i) & 1u) == 0 && beats(masked[i], e, best, best_id)) {
        best = masked[i];
        best_id = e;
        best_score = score[i];
      }
    }
    warp_argmax(best, best_id, best_score);
    chosen_id[j] = best_id;
    chosen_score[j] = best_score;
    if ((best_id & 31) == lane) taken |= 1u << (best_id >> 5);
  }
  if (lane == 0) {
    float sum = 0.0f;  // in the order chosen, as the CPU adds them
    for (int j = 0; j < top_k; ++j) sum += chosen_score[j];
    for (int j = 0; j < top_k; ++j) {
      float weight = chosen_score[j];
      if (p.renormalize) weight = weight / (sum + 1e-20f);
      ids[j] = chosen_id[j];
      weights[j] = weight * p.routed_scaling_factor;
    }
  }
}

__global__ void topk_sigmoid_grouped_kernel(int32_t* __restrict__ topk_ids, float* __restrict__ topk_weights,
                                            const float* __restrict__ logits, int64_t tokens,
                                            const SigmoidGrouped p) {
  __shared__ float s_choice[kTokensPerBlock][kMoeMaxExperts];
  const int warp = threadIdx.x >> 5;
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kTokensPerBlock + warp;
  if (token >= tokens) return;  // the whole warp: only warp-level syncs follow
  topk_sigmoid_grouped_row(topk_ids + token * p.top_k, topk_weights + token * p.top_k, logits + token * p.num_experts,
                           s_choice[warp], p);
}

constexpr int kAlignThreads = 1024;

// moe_align's work by one whole CTA (any block size), with its shared scratch.
struct AlignScratch {
  int32_t count[kMoeMaxExperts];
  int32_t begin[kMoeMaxExperts + 1];
  int32_t cursor[kMoeMaxExperts];
};

// Groups the pairs of experts [expert_begin, expert_begin + num_experts) as local experts 0..;
// the others' pairs are not listed (expert parallelism: another rank computes them).
__device__ void align_pairs(int32_t* __restrict__ sorted_rows, int32_t* __restrict__ block_expert,
                            const int32_t* topk_ids, int32_t rows, int32_t expert_begin, int32_t num_experts,
                            int32_t capacity, AlignScratch& scratch) {
  int32_t* count = scratch.count;
  int32_t* begin = scratch.begin;
  int32_t* cursor = scratch.cursor;
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < rows; p += blockDim.x) {
    const int32_t e = topk_ids[p] - expert_begin;
    if (static_cast<uint32_t>(e) < static_cast<uint32_t>(num_experts)) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // at most 256 experts: a serial scan is shorter than a parallel one
    int32_t at = 0;
    for (int e = 0; e < num_experts; ++e) {
      begin[e] = at;
      cursor[e] = at;
      at += (count[e] + kMoeBlockM - 1) / kMoeBlockM * kMoeBlockM;
    }
    begin[num_experts] = at;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < capacity; i += blockDim.x) sorted_rows[i] = -1;
  const int32_t used = begin[num_experts];
  for (int b = threadIdx.x; b < capacity / kMoeBlockM; b += blockDim.x) {
    const int32_t row = b * kMoeBlockM;
    int32_t expert = -1;
    if (row < used) {  // the last expert whose range starts at or before this row
      int lo = 0, hi = num_experts - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (begin[mid] <= row) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      expert = lo;
    }
    block_expert[b] = expert;
  }
  __syncthreads();  // the -1 fill is done (and visible to the block) before pairs land
  for (int p = threadIdx.x; p < rows; p += blockDim.x) {
    const int32_t e = topk_ids[p] - expert_begin;
    if (static_cast<uint32_t>(e) < static_cast<uint32_t>(num_experts)) sorted_rows[atomicAdd(&cursor[e], 1)] = p;
  }
}

__global__ void __launch_bounds__(kAlignThreads) align_kernel(int32_t* __restrict__ sorted_rows,
                                                              int32_t* __restrict__ block_expert,
                                                              const int32_t* __restrict__ topk_ids, int32_t rows,
                                                              int32_t expert_begin, int32_t num_experts,
                                                              int32_t capacity) {
  __shared__ AlignScratch scratch;
  align_pairs(sorted_rows, block_expert, topk_ids, rows, expert_begin, num_experts, capacity, scratch);
}

constexpr int kCombineThreads = 128;

// out and addend may alias (no __restrict__): each thread reads its addend vector before it
// writes the same vector of out.
// ids: null, or (expert parallelism) the pairs' experts, of which only the window's are added.
__global__ void combine_kernel(bf16* out, const bf16* __restrict__ expert_out, const float* __restrict__ weights,
                               const bf16* addend, int32_t top_k, int64_t vecs_per_row,
                               const int32_t* __restrict__ ids, MoeExpertWindow window) {
  const int64_t token = blockIdx.x;
  const int64_t vec = static_cast<int64_t>(blockIdx.y) * kCombineThreads + threadIdx.x;
  if (vec >= vecs_per_row) return;
  float acc[kBf16PerVec] = {};
  for (int j = 0; j < top_k; ++j) {
    if (ids != nullptr &&
        static_cast<uint32_t>(ids[token * top_k + j] - window.begin) >= static_cast<uint32_t>(window.count)) {
      continue;  // another rank's expert: its row here was never written
    }
    const float w = weights[token * top_k + j];
    float v[kBf16PerVec];
    unpack8(reinterpret_cast<const uint4*>(expert_out)[(token * top_k + j) * vecs_per_row + vec], v);
#pragma unroll
    for (int i = 0; i < kBf16PerVec; ++i) acc[i] += w * v[i];
  }
  if (addend != nullptr) {
    float a[kBf16PerVec];
    unpack8(reinterpret_cast<const uint4*>(addend)[token * vecs_per_row + vec], a);
#pragma unroll
    for (int i = 0; i < kBf16PerVec; ++i) acc[i] += a[i];
  }
  reinterpret_cast<uint4*>(out)[token * vecs_per_row + vec] = pack8(acc);
}

// moe_route_decode: the router product, the top-k and the align in one launch (see moe.h).
// grid ceil(E / kRouteWarps) CTAs of kRouteWarps warps; warp w of CTA b computes expert
// b * kRouteWarps + w's logit for every token (one weight row, 16-byte streaming loads, the
// first batch issued before the PDL wait: the router weight is no earlier kernel's output).
// Each CTA then counts itself in `arrivals`; the last to arrive (it sees every other CTA's
// logits after the fences) runs the top-k, one warp per token, and the align, and sets
// `arrivals` back to 0 for the next launch.
constexpr int kRouteWarps = 8;  // also the most tokens: one warp per token in the top-k
static_assert(kRouteWarps == kMoeRouteDecodeMaxTokens);
constexpr int kRouteUnroll = 4;

struct RouteArgs {
  int32_t* topk_ids;
  float* topk_weights;
  int32_t* sorted_rows;
  int32_t* block_expert;
  float* logits;             // [tokens, E] f32
  const bf16* hidden;        // [tokens, k] bf16
  const bf16* weight;        // [E, k] bf16
  unsigned int* arrivals;
  int32_t k8;                // k / 8
  int32_t capacity;
  int32_t expert_begin;      // the experts grouped: [expert_begin, expert_begin + local_experts)
  int32_t local_experts;
  bool sigmoid_grouped;
  bool renormalize;          // softmax only (sigmoid_grouped carries its own)
  SigmoidGrouped p;          // num_experts and top_k for both rules
};

template <int M>
__global__ void __launch_bounds__(kRouteWarps * 32) route_decode_kernel(const RouteArgs a) {
  __shared__ float s_logits[M][kMoeMaxExperts];
  __shared__ float s_choice[M][kMoeMaxExperts];
  __shared__ AlignScratch s_align;
  __shared__ bool s_last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t num_experts = a.p.num_experts;
  const int expert = static_cast<int>(blockIdx.x) * kRouteWarps + warp;
  const bool owns_row = expert < num_experts;  // warp-uniform
  const uint4* w_row = reinterpret_cast<const uint4*>(a.weight) + static_cast<int64_t>(owns_row ? expert : 0) * a.k8;

  uint4 w[kRouteUnroll];
#pragma unroll
  for (int u = 0; u < kRouteUnroll; ++u) {
    const int c = lane + 32 * u;
    w[u] = owns_row && c < a.k8 ? gemv_detail::load_stream(w_row + c) : make_uint4(0, 0, 0, 0);
  }
  // hidden is the previous kernel's output, and every write comes after this. No early
  // pdl_launch_dependents, as moe_gemv.cu says why: the gate_up grid launches as this one exits.
  pdl_wait();

  // A lane adds its chunks lane, lane + 32, ... in k order, then the warp's xor tree: a token's
  // logit does not depend on the other tokens of the step.
  float acc[M];
#pragma unroll
  for (int t = 0; t < M; ++t) acc[t] = 0.0f;
  if (owns_row) {
    const uint4* x = reinterpret_cast<const uint4*>(a.hidden);
    for (int base = 0; base < a.k8; base += 32 * kRouteUnroll) {
      uint4 next[kRouteUnroll];
#pragma unroll
      for (int u = 0; u < kRouteUnroll; ++u) {
        const int c = base + 32 * kRouteUnroll + lane + 32 * u;
        next[u] = c < a.k8 ? gemv_detail::load_stream(w_row + c) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kRouteUnroll; ++u) {
        const int c = base + lane + 32 * u;
        if (c < a.k8) {
          float wf[kBf16PerVec];
          unpack8(w[u], wf);
#pragma unroll
          for (int t = 0; t < M; ++t) {
            float xf[kBf16PerVec];
            unpack8(__ldg(x + static_cast<int64_t>(t) * a.k8 + c), xf);
#pragma unroll
            for (int i = 0; i < kBf16PerVec; ++i) acc[t] = fmaf(xf[i], wf[i], acc[t]);
          }
        }
        w[u] = next[u];
      }
    }
#pragma unroll
    for (int t = 0; t < M; ++t) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], offset);
    }
    if (lane == 0) {
#pragma unroll
      for (int t = 0; t < M; ++t) a.logits[static_cast<int64_t>(t) * num_experts + expert] = acc[t];
      __threadfence();  // the logits reach L2 before this CTA counts itself
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(a.arrivals, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  if (threadIdx.x == 0) *a.arrivals = 0;  // every CTA has counted itself: ready for the next launch
  // Every CTA's logits, from L2 (ld.cg: this SM's L1 may not be coherent with the others' stores).
  for (int i = threadIdx.x; i < M * num_experts; i += blockDim.x) {
    s_logits[i / num_experts][i % num_experts] = __ldcg(a.logits + i);
  }
  __syncthreads();
  if (warp < M) {
    int32_t* ids = a.topk_ids + warp * a.p.top_k;
    float* weights = a.topk_weights + warp * a.p.top_k;
    if (a.sigmoid_grouped) {
      topk_sigmoid_grouped_row(ids, weights, s_logits[warp], s_choice[warp], a.p);
    } else {
      topk_softmax_row(ids, weights, s_logits[warp], num_experts, a.p.top_k, a.renormalize);
    }
  }
  __syncthreads();  // the ids (global, written by this CTA) are visible to the whole CTA
  align_pairs(a.sorted_rows, a.block_expert, a.topk_ids, M * a.p.top_k, a.expert_begin, a.local_experts, a.capacity,
              s_align);
}

}  // namespace

int64_t moe_sorted_capacity(int64_t rows, int32_t num_experts) {
  const int64_t padded = rows + static_cast<int64_t>(num_experts) * (kMoeBlockM - 1);
  return (padded + kMoeBlockM - 1) / kMoeBlockM * kMoeBlockM;
}

namespace {

void check_softmax(const char* name, int32_t num_experts, int32_t top_k) {
  TACHYON_CHECK(num_experts >= 1 && num_experts <= kMoeMaxExperts)
      << name << ": " << num_experts << " experts (1.." << kMoeMaxExperts << " supported)";
  TACHYON_CHECK(top_k >= 1 && top_k <= kMaxTopK && top_k <= num_experts)
      << name << ": top_k " << top_k << " must be in [1, min(" << kMaxTopK << ", experts " << num_experts << ")]";
}

// Checks moe_topk_sigmoid_grouped's arguments and packs them for the kernels.
SigmoidGrouped sigmoid_grouped_params(const char* name, const float* correction_bias, int32_t num_experts,
                                      int32_t top_k, int32_t n_group, int32_t topk_group, bool renormalize,
                                      float routed_scaling_factor) {
  TACHYON_CHECK(num_experts >= 1 && num_experts <= kMoeMaxExperts)
      << name << ": " << num_experts << " experts (1.." << kMoeMaxExperts << " supported)";
  TACHYON_CHECK(n_group >= 1 && n_group <= kMaxGroups && num_experts % n_group == 0 && num_experts / n_group >= 2)
      << name << ": " << num_experts << " experts do not split into n_group " << n_group
      << " groups of at least 2 (n_group <= " << kMaxGroups << ")";
  TACHYON_CHECK(topk_group >= 1 && topk_group <= n_group)
      << name << ": topk_group " << topk_group << " of " << n_group << " groups";
  TACHYON_CHECK(top_k >= 1 && top_k <= kMaxTopK && top_k <= num_experts)
      << name << ": top_k " << top_k << " must be in [1, min(" << kMaxTopK << ", experts " << num_experts << ")]";
  int32_t groups_pow2 = 1;
  while (groups_pow2 < n_group) groups_pow2 *= 2;
  return SigmoidGrouped{correction_bias, num_experts, top_k, n_group, topk_group, 32 / groups_pow2, renormalize,
                        routed_scaling_factor};
}

// The experts a grouping covers: the window, or all num_experts when it is empty.
MoeExpertWindow checked_window(const char* name, MoeExpertWindow window, int32_t num_experts) {
  if (window.count == 0) return {0, num_experts};
  TACHYON_CHECK(window.begin >= 0 && window.count > 0 && window.begin <= num_experts - window.count)
      << name << ": expert window [" << window.begin << ", " << window.begin + window.count << ") outside the "
      << num_experts << " experts";
  return window;
}

void check_align(const char* name, int64_t rows, int32_t num_experts, int64_t capacity) {
  TACHYON_CHECK(num_experts >= 1 && num_experts <= kMoeMaxExperts)
      << name << ": " << num_experts << " experts (1.." << kMoeMaxExperts << " supported)";
  TACHYON_CHECK(rows >= 0 && rows <= (int64_t{1} << 24)) << name << ": " << rows << " pairs out of range";
  TACHYON_CHECK(capacity == moe_sorted_capacity(rows, num_experts))
      << name << ": capacity " << capacity << " must be moe_sorted_capacity(rows, experts) = "
      << moe_sorted_capacity(rows, num_experts);
}

template <int M>
void launch_route_decode(const RouteArgs& args, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((args.p.num_experts + kRouteWarps - 1) / kRouteWarps);
  launch_pdl(route_decode_kernel<M>, dim3(blocks), dim3(kRouteWarps * 32), 0, stream, args);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void moe_topk_softmax(int32_t* topk_ids, float* topk_weights, const float* router_logits, int64_t tokens,
                      int32_t num_experts, int32_t top_k, bool renormalize, cudaStream_t stream) {
  check_softmax("moe_topk_softmax", num_experts, top_k);
  TACHYON_CHECK(tokens >= 0 && tokens <= INT32_MAX) << "moe_topk_softmax: tokens " << tokens << " out of range";
  if (tokens == 0) return;
  const unsigned blocks = static_cast<unsigned>((tokens + kTokensPerBlock - 1) / kTokensPerBlock);
  topk_softmax_kernel<<<blocks, 32 * kTokensPerBlock, 0, stream>>>(topk_ids, topk_weights, router_logits, tokens,
                                                                    num_experts, top_k, renormalize);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void moe_topk_sigmoid_grouped(int32_t* topk_ids, float* topk_weights, const float* router_logits,
                              const float* correction_bias, int64_t tokens, int32_t num_experts, int32_t top_k,
                              int32_t n_group, int32_t topk_group, bool renormalize, float routed_scaling_factor,
                              cudaStream_t stream) {
  const SigmoidGrouped params = sigmoid_grouped_params("moe_topk_sigmoid_grouped", correction_bias, num_experts,
                                                       top_k, n_group, topk_group, renormalize, routed_scaling_factor);
  TACHYON_CHECK(tokens >= 0 && tokens <= INT32_MAX) << "moe_topk_sigmoid_grouped: tokens " << tokens << " out of range";
  if (tokens == 0) return;
  const unsigned blocks = static_cast<unsigned>((tokens + kTokensPerBlock - 1) / kTokensPerBlock);
  topk_sigmoid_grouped_kernel<<<blocks, 32 * kTokensPerBlock, 0, stream>>>(topk_ids, topk_weights, router_logits,
                                                                            tokens, params);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void moe_align(int32_t* sorted_rows, int32_t* block_expert, const int32_t* topk_ids, int64_t rows,
               int32_t num_experts, int64_t capacity, cudaStream_t stream, MoeExpertWindow window) {
  const MoeExpertWindow grouped = checked_window("moe_align", window, num_experts);
  check_align("moe_align", rows, grouped.count, capacity);
  align_kernel<<<1, kAlignThreads, 0, stream>>>(sorted_rows, block_expert, topk_ids, static_cast<int32_t>(rows),
                                                grouped.begin, grouped.count, static_cast<int32_t>(capacity));
  TACHYON_CUDA_CHECK_LAUNCH();
}

void moe_route_decode(const MoeRouteOutputs& out, const bf16* hidden, const bf16* router_weight, int64_t tokens,
                      int64_t hidden_size, int32_t num_experts, const MoeRouting& routing, unsigned int* arrivals,
                      cudaStream_t stream) {
  const char* name = "moe_route_decode";
  TACHYON_CHECK(tokens >= 1 && tokens <= kMoeRouteDecodeMaxTokens)
      << name << ": " << tokens << " tokens (1.." << kMoeRouteDecodeMaxTokens << "; more take the separate kernels)";
  TACHYON_CHECK(hidden_size > 0 && hidden_size % 8 == 0 && hidden_size <= (int64_t{1} << 24))
      << name << ": hidden_size " << hidden_size << " must be a positive multiple of 8 (at most 2^24)";
  TACHYON_CHECK(reinterpret_cast<uintptr_t>(hidden) % 16 == 0 && reinterpret_cast<uintptr_t>(router_weight) % 16 == 0)
      << name << ": hidden and router_weight must be 16-byte aligned";
  TACHYON_CHECK(arrivals != nullptr) << name << ": arrivals must point to a device counter that starts at 0";
  RouteArgs args{};
  if (routing.sigmoid_grouped) {
    args.p = sigmoid_grouped_params(name, routing.correction_bias, num_experts, routing.top_k, routing.n_group,
                                    routing.topk_group, routing.renormalize, routing.routed_scaling_factor);
  } else {
    check_softmax(name, num_experts, routing.top_k);
    args.p = SigmoidGrouped{nullptr, num_experts, routing.top_k, 1, 1, 32, false, 1.0f};
  }
  const MoeExpertWindow grouped = checked_window(name, routing.window, num_experts);
  check_align(name, tokens * routing.top_k, grouped.count, out.capacity);
  args.expert_begin = grouped.begin;
  args.local_experts = grouped.count;
  args.topk_ids = out.topk_ids;
  args.topk_weights = out.topk_weights;
  args.sorted_rows = out.sorted_rows;
  args.block_expert = out.block_expert;
  args.logits = out.router_logits;
  args.hidden = hidden;
  args.weight = router_weight;
  args.arrivals = arrivals;
  args.k8 = static_cast<int32_t>(hidden_size / 8);
  args.capacity = static_cast<int32_t>(out.capacity);
  args.sigmoid_grouped = routing.sigmoid_grouped;
  args.renormalize = routing.renormalize;
  switch (tokens) {
    case 1: return launch_route_decode<1>(args, stream);
    case 2: return launch_route_decode<2>(args, stream);
    case 3: return launch_route_decode<3>(args, stream);
    case 4: return launch_route_decode<4>(args, stream);
    case 5: return launch_route_decode<5>(args, stream);
    case 6: return launch_route_decode<6>(args, stream);
    case 7: return launch_route_decode<7>(args, stream);
    default: return launch_route_decode<8>(args, stream);
  }
}

void moe_combine(bf16* out, const bf16* expert_out, const float* topk_weights, int64_t tokens, int32_t top_k,
                 int64_t hidden, cudaStream_t stream) {
  moe_combine(out, expert_out, topk_weights, nullptr, tokens, top_k, hidden, stream);
}

void moe_combine(bf16* out, const bf16* expert_out, const float* topk_weights, const bf16* addend, int64_t tokens,
                 int32_t top_k, int64_t hidden, cudaStream_t stream, const int32_t* topk_ids,
                 MoeExpertWindow window) {
  TACHYON_CHECK(window.count >= 0 && window.begin >= 0 && (window.count == 0 || topk_ids != nullptr))
      << "moe_combine: an expert window [" << window.begin << ", " << window.begin + window.count
      << ") needs the pairs' topk_ids";
  TACHYON_CHECK(hidden > 0 && hidden % kBf16PerVec == 0) << "moe_combine: hidden " << hidden << " must be a multiple of 8";
  TACHYON_CHECK(top_k >= 1) << "moe_combine: top_k " << top_k;
  TACHYON_CHECK(reinterpret_cast<uintptr_t>(out) % 16 == 0 && reinterpret_cast<uintptr_t>(expert_out) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(addend) % 16 == 0)
      << "moe_combine: out, expert_out and addend must be 16-byte aligned";
  TACHYON_CHECK(tokens >= 0 && tokens <= INT32_MAX) << "moe_combine: tokens " << tokens << " out of range";
  if (tokens == 0) return;
  const int64_t vecs = hidden / kBf16PerVec;
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>((vecs + kCombineThreads - 1) / kCombineThreads));
  combine_kernel<<<grid, kCombineThreads, 0, stream>>>(out, expert_out, topk_weights, addend, top_k, vecs,
                                                       window.count > 0 ? topk_ids : nullptr, window);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
