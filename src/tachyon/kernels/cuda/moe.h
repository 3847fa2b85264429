// Mixture-of-experts on the GPU: routing, grouping the (token, expert) pairs by expert, one
// grouped GEMM launch over every expert, and the weighted combine. No host round trip: the
// grid of the grouped GEMM is sized from an upper bound the host knows (every expert's rows
// padded to a whole block), and blocks past the real end exit at once, so a step can be
// captured in a CUDA graph.
//
// A block of an MoE layer on the GPU, for T tokens and top-k experts (rows = T * k pairs,
// pair p = token p / k, its (p % k)-th expert):
//   router_logits = linear(hidden, gate)                  [T, E] f32 (the dense GEMM)
//   moe_topk_softmax(ids, weights, router_logits)         [T, k] each
//   moe_align(sorted_rows, block_expert, ids)             pairs grouped by expert
//   moe_grouped_gemm(gate_up, hidden, w_gate_up, ..., a_row_divisor = k)   [rows, 2 * I]
//   silu_and_mul(act, gate_up)                            [rows, I]
//   moe_grouped_gemm(down, act, w_down, ..., a_row_divisor = 1)            [rows, hidden]
//   moe_combine(out, down, weights[, shared_out])         [T, hidden]
// At T <= 8 (decode) the router, top-k and align are one moe_route_decode launch, the gate_up
// product and its SwiGLU are moe_grouped_gemv_silu, and down is moe_grouped_gemv, all with
// max_pairs_per_expert = T.
// DeepSeek-V3 routes with moe_topk_sigmoid_grouped instead of moe_topk_softmax.
// CPU twin: model/moe.h. Tests: tests/gpu/test_moe_kernels.cpp.
#pragma once

#include <cstdint>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

// Rows of one grouped-GEMM tile: each expert's pairs are padded to a multiple of it.
inline constexpr int32_t kMoeBlockM = 64;
// Most experts moe_topk_softmax and moe_align take (DeepSeek-V3 and Qwen3-MoE have 256 / 128).
inline constexpr int32_t kMoeMaxExperts = 256;

// Expert parallelism (model/gpu/moe_mlp.h): the experts [begin, begin + count) of a layer's
// num_experts that one rank holds, whole, stacked as its local experts 0..count-1. count 0:
// every expert (no expert parallelism). Routing still picks among all experts; the grouping
// lists only the window's pairs, under local ids, and the combine adds only theirs (another
// rank adds the rest: an all-reduce over the ranks sums the layer's output).
struct MoeExpertWindow {
  int32_t begin = 0;
  int32_t count = 0;
};

// Length of sorted_rows for `rows` pairs over `num_experts`: every expert may waste up to
// kMoeBlockM - 1 padding rows; a multiple of kMoeBlockM. block_expert has capacity / kMoeBlockM.
int64_t moe_sorted_capacity(int64_t rows, int32_t num_experts);

// Softmax over each token's experts (f32), then its top_k experts by probability, the highest
// first (equal probabilities: the lower expert id first, as torch.topk on CUDA and our CPU
// router order them); with `renormalize` (norm_topk_prob) the k weights are divided by their
// sum. router_logits: [tokens, num_experts] f32; topk_ids: [tokens, top_k] int32;
// topk_weights: [tokens, top_k] f32. 1 <= top_k <= min(num_experts, 16), num_experts <= 256.
void moe_topk_softmax(int32_t* topk_ids, float* topk_weights, const float* router_logits, int64_t tokens,
                      int32_t num_experts, int32_t top_k, bool renormalize, cudaStream_t stream);

// DeepSeek-V3's group-limited sigmoid routing (model/moe.h route_token_group_limited, which it
// matches bit for bit on the ids and to f32 rounding on the weights):
//   score  = sigmoid(logit) (f32; the exp in double rounded to f32, as near to glibc's expf as
//            the device gets, so near ties break as on the CPU)
//   choice = score + correction_bias (nullptr: zeros); it picks the experts, it does not weigh them
//   group score = sum of the 2 largest choices of each of n_group equal groups; the topk_group
//            best groups stay (equal scores: the lower group), the others' choices become 0.0
//   top_k  = the k largest masked choices, the highest first (equal: the lower id first)
//   weight = the expert's score, / (sum of the k scores, added in that order, + 1e-20) when
//            renormalize (norm_topk_prob), then * routed_scaling_factor.
// router_logits: [tokens, num_experts] f32; correction_bias: [num_experts] f32 or nullptr;
// topk_ids: [tokens, top_k] int32; topk_weights: [tokens, top_k] f32.
// num_experts <= 256, n_group in [1, 32] dividing num_experts into groups of >= 2,
// 1 <= topk_group <= n_group, 1 <= top_k <= min(16, num_experts) (checked).
void moe_topk_sigmoid_grouped(int32_t* topk_ids, float* topk_weights, const float* router_logits,
                              const float* correction_bias, int64_t tokens, int32_t num_experts, int32_t top_k,
                              int32_t n_group, int32_t topk_group, bool renormalize, float routed_scaling_factor,
                              cudaStream_t stream);

// Groups the `rows` pairs (topk_ids flattened: pair p has expert topk_ids[p]) by expert:
//   sorted_rows: [capacity] int32: for each expert in id order, its pairs' indices, then -1 up to
//                the next multiple of kMoeBlockM; -1 after the last expert's block too;
//   block_expert: [capacity / kMoeBlockM] int32: the expert of each block of sorted_rows, -1 for
//                blocks past the end.
// The order of an expert's pairs within its blocks is not fixed (atomics); the results of
// moe_grouped_gemm and moe_combine do not depend on it. One CTA; rows <= 2^24.
// With a window (count > 0) only its experts' pairs are grouped, expert e as local expert
// e - begin (block_expert holds local ids: the index into the rank's stacked weights), and
// capacity is moe_sorted_capacity(rows, window.count).
void moe_align(int32_t* sorted_rows, int32_t* block_expert, const int32_t* topk_ids, int64_t rows,
               int32_t num_experts, int64_t capacity, cudaStream_t stream, MoeExpertWindow window = {});

// How an MoE layer picks its experts: moe_topk_softmax's rule, or with sigmoid_grouped
// moe_topk_sigmoid_grouped's, with their arguments (documented there).
struct MoeRouting {
  bool sigmoid_grouped = false;
  int32_t top_k = 1;
  bool renormalize = false;
  const float* correction_bias = nullptr;  // sigmoid_grouped only, nullptr: none
  int32_t n_group = 1, topk_group = 1;     // sigmoid_grouped only
  float routed_scaling_factor = 1.0f;      // sigmoid_grouped only
  MoeExpertWindow window;                  // the experts grouped (moe_align's window); default: all
};

// What routing writes: the router logits [tokens, E] f32, topk_ids and topk_weights [tokens,
// top_k], and moe_align's sorted_rows [capacity] and block_expert [capacity / kMoeBlockM]
// (capacity over the routing window's experts).
struct MoeRouteOutputs {
  float* router_logits = nullptr;
  int32_t* topk_ids = nullptr;
  float* topk_weights = nullptr;
  int32_t* sorted_rows = nullptr;
  int32_t* block_expert = nullptr;
  int64_t capacity = 0;  // moe_sorted_capacity(tokens * top_k, num_experts)
};

inline constexpr int64_t kMoeRouteDecodeMaxTokens = 8;

// A decode step's routing in one launch, for 1..8 tokens: router_logits = hidden @
// router_weight^T in f32 (one warp per expert streams its weight row once for every token;
// each logit sums in an order fixed by hidden_size alone, so a token's logits, and then its
// experts, are the same bits alone or in any batch of up to 8), then the top-k of `routing`
// and moe_align on them, by the code of moe_topk_softmax / moe_topk_sigmoid_grouped and
// moe_align (so ids and weights are bit-identical to those kernels' on these logits). Two
// launches fewer per MoE layer than the three kernels; on an H200 at V2-Lite batch 1 that alone
// timed the same (PDL already hid most of each boundary), and with the grouped GEMVs' late
// dependent launch the step went 2.30 -> 2.23 ms
// (bench/results/2026-12-04-v2-lite-moe-decode-fusion-h200.json).
// The last of its CTAs to finish the product does the rest; `arrivals` is how they count: a
// device unsigned int that is 0 before the first launch (cudaMemset) and that every launch
// leaves at 0. Launches that share one must be ordered on a stream (one per MoE block).
// hidden: [tokens, hidden_size] bf16, router_weight: [num_experts, hidden_size] bf16, both
// 16-byte aligned; hidden_size % 8 == 0. Limits of the two top-k kernels and moe_align apply
// (checked, naming moe_route_decode).
void moe_route_decode(const MoeRouteOutputs& out, const bf16* hidden, const bf16* router_weight, int64_t tokens,
                      int64_t hidden_size, int32_t num_experts, const MoeRouting& routing, unsigned int* arrivals,
                      cudaStream_t stream);

// For every pair p in sorted_rows: out[p] = a[p / a_row_divisor] @ w[e]^T, e = its block's expert.
//   out: [rows, n] bf16 (rows that sorted_rows does not list are not written);
//   a: [rows / a_row_divisor, k] bf16 (a_row_divisor = top_k gathers each token's hidden row for
//      its k pairs; 1 reads row p);  w: [num_experts, n, k] bf16 (each expert's weight row-major,
//      as a dense linear's); f32 accumulation, one rounding.
// n % 8 == 0, k % 8 == 0, pointers 16-byte aligned (checked). capacity as passed to moe_align.
void moe_grouped_gemm(bf16* out, const bf16* a, const bf16* w, const int32_t* sorted_rows,
                      const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k,
                      cudaStream_t stream);

// The same with E4M3 experts (w and w_scale as moe_grouped_gemv's E4M3 overload below): the
// weight tile is widened to bf16 on its way into shared memory (exactly: every E4M3 value is a
// bf16 value), the tensor cores sum each 128-wide k block apart, and each block's sums are scaled
// by their rows' factors into the f32 accumulators (the "promotion" of DeepSeek's FP8 GEMMs), so
// no factor is rounded to bf16. k % 16 == 0.
void moe_grouped_gemm(bf16* out, const bf16* a, const uint8_t* w, const float* w_scale, const int32_t* sorted_rows,
                      const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k,
                      cudaStream_t stream);

// The same product with the inputs in E4M3 too, on Hopper's FP8 tensor cores (wgmma,
// moe_gemm_wgmma.cu): a [a_rows, k] E4M3 and a_scale [ceil(k / 128), a_rows] f32 as
// fp8_quantize_rows (kernels/cuda/fp8.h) writes them from the bf16 inputs; w and w_scale as the
// E4M3 overload above. out[p, j] = sum over 128-wide k blocks b of (a codes . w codes over b) *
// a_scale[b, p / a_row_divisor] * w_scale[e, j, b], each block's sum scaled in f32. Against the
// overload above it adds one FP8 rounding of the inputs (as the dense FP8 products of more than
// 8 rows do) and reaches the FP8 tensor cores. k % 16 == 0, n % 8 == 0, out, a and w 16-byte
// aligned; sorted_rows, block_expert, capacity and a_row_divisor as above.
void moe_grouped_gemm_fp8(bf16* out, const uint8_t* a, const float* a_scale, int64_t a_rows, const uint8_t* w,
                          const float* w_scale, const int32_t* sorted_rows, const int32_t* block_expert,
                          int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k, cudaStream_t stream);
// The bf16 product of moe_grouped_gemm on wgmma (moe_gemm_wgmma.cu) instead of mma.sync: the same
// result to f32 summation order (not bit for bit). a has a_rows rows; k % 8 == 0; the rest as
// moe_grouped_gemm's.
void moe_grouped_gemm_wgmma(bf16* out, const bf16* a, int64_t a_rows, const bf16* w, const int32_t* sorted_rows,
                            const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k,
                            cudaStream_t stream);

// The same product for decode-sized steps: every expert block of sorted_rows lists at most
// max_pairs_per_expert (in [1, 8]) pairs before its -1 padding. It streams each active
// expert's weight once for all its pairs at HBM rate (moe_gemv.cu), where moe_grouped_gemm's
// 64-row tiles are mostly padding: on an H200 at DeepSeek-V2-Lite's layer and T = 1 the GEMM
// took 43 us (gate_up) and 30 us (down) against weight-byte floors of 16.5 and 8.2 us.
// Use it when the step has T <= 8 tokens, with max_pairs_per_expert = T (a token has each
// expert at most once); the wgmma GEMMs above that (moe_grouped_gemm_wgmma for bf16 experts,
// moe_grouped_gemm_fp8 for E4M3 ones; moe_grouped_gemm is the tests' and bench_moe's comparison). A pair's output does not depend on the
// other pairs of its expert or on max_pairs_per_expert (bit for bit), so a token gets the same
// result alone or in a batch. Arguments and checks as moe_grouped_gemm's, plus the range of
// max_pairs_per_expert; block_expert as moe_align writes it (its -1 blocks only after the last
// expert's: a block stops at the first it meets). Pairs past max_pairs_per_expert in an
// expert's block are not written (a broken promise shows as unwritten rows, not a fault).
void moe_grouped_gemv(bf16* out, const bf16* a, const bf16* w, const int32_t* sorted_rows,
                      const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k,
                      int32_t max_pairs_per_expert, cudaStream_t stream);

// The same with E4M3 experts, the GPU FP8 form of model/fp8_projections.h stacked per expert:
// w [num_experts, n, k] E4M3 and w_scale [num_experts, n, ceil(k / 128)] f32, weight (e, r, c) =
// e4m3 * w_scale[e, r, c / 128]. Each 16-value chunk's partial dot is scaled by its factor, in f32
// (as fp8_gemv, kernels/cuda/gemv.h); half the bytes of the bf16 experts. k % 16 == 0.
void moe_grouped_gemv(bf16* out, const bf16* a, const uint8_t* w, const float* w_scale, const int32_t* sorted_rows,
                      const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k,
                      int32_t max_pairs_per_expert, cudaStream_t stream);

// moe_grouped_gemv for the gate_up product with the SwiGLU gate applied on the way out:
// act[p] = silu(gate) * up of pair p, where [gate | up] = a[p / a_row_divisor] @ w_gate_up[e]^T.
// act: [rows, intermediate] bf16; w_gate_up: [num_experts, 2 * intermediate, k] bf16 (gate rows,
// then up rows). Bit-identical to moe_grouped_gemv into a [rows, 2 * intermediate] buffer
// followed by silu_and_mul (kernels/cuda/activation.h), one launch and one round trip fewer.
// intermediate % 4 == 0; the rest as moe_grouped_gemv.
void moe_grouped_gemv_silu(bf16* act, const bf16* a, const bf16* w_gate_up, const int32_t* sorted_rows,
                           const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor,
                           int64_t intermediate, int64_t k, int32_t max_pairs_per_expert, cudaStream_t stream);
// The same with E4M3 experts (w_gate_up and w_scale as moe_grouped_gemv's E4M3 overload).
void moe_grouped_gemv_silu(bf16* act, const bf16* a, const uint8_t* w_gate_up, const float* w_scale,
                           const int32_t* sorted_rows, const int32_t* block_expert, int64_t capacity,
                           int64_t a_row_divisor, int64_t intermediate, int64_t k, int32_t max_pairs_per_expert,
                           cudaStream_t stream);

// out[t] = sum over j < top_k, in order, of topk_weights[t, j] * expert_out[t * top_k + j], in
// f32, one rounding. out: [tokens, hidden] bf16; expert_out: [tokens * top_k, hidden] bf16.
// hidden % 8 == 0.
void moe_combine(bf16* out, const bf16* expert_out, const float* topk_weights, int64_t tokens, int32_t top_k,
                 int64_t hidden, cudaStream_t stream);

// The same plus a row every token adds (DeepSeek's shared expert output), in the same pass:
// out[t] = (sum over j of topk_weights[t, j] * expert_out[t * top_k + j]) + addend[t], in f32,
// one rounding (the routed sum first, then the addend, as model/moe.cpp adds them).
// addend: [tokens, hidden] bf16, 16-byte aligned, or nullptr (= the overload above); it may be
// `out` itself (each element is read before it is written).
// With an expert window (count > 0), pairs whose topk_ids entry lies outside it are skipped
// (their expert_out rows are never read: moe_align did not list them); the others add in the
// same order as without one.
void moe_combine(bf16* out, const bf16* expert_out, const float* topk_weights, const bf16* addend, int64_t tokens,
                 int32_t top_k, int64_t hidden, cudaStream_t stream, const int32_t* topk_ids = nullptr,
                 MoeExpertWindow window = {});

}  // namespace tachyon::kernels::cuda
