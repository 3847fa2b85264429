// Tensor-parallel sharding of the dense decoder's weights, as Megatron-LM splits them. One rank
// of a TP group of tp_size ranks keeps:
//   q/k/v    column-parallel by heads: query heads [r*H/tp, (r+1)*H/tp) and their kv heads;
//   o_proj   row-parallel: the input columns of this rank's query heads (partial sums, all-reduced);
//   gate/up  column-parallel: rows [r*I/tp, (r+1)*I/tp) of gate AND the same rows of up, so the
//            fused [gate; up] layout of ModelWeights holds again within the shard;
//   down     row-parallel: the input columns of this rank's intermediate slice;
//   MLA      (latent attention) heads split: the rank's heads' rows of q_b_proj and kv_b_proj,
//            o_proj's columns of their values; q_a_proj, kv_a_proj_with_mqa and their norms whole,
//            so every rank caches the full latent [c_kv | k_pe] of every token (it is every
//            head's: no KV saving per rank, unlike GQA's kv heads; docs/parallelism.md);
//   indexer  (DeepSeek sparse attention) replicated: every rank computes the same top-k
//            (tp_shard.cpp says why not split by index heads);
//   experts  (MoE layers) the router whole on every rank; every routed expert and the shared
//            expert split along their intermediate dim as gate/up/down are (so the rank's
//            moe_intermediate_size is I_moe / tp); their partial sums join one all-reduce
//            (tp_moe.h). With expert_parallel (--enable-expert-parallel) instead: experts
//            [r*E/tp, (r+1)*E/tp) whole (over the DP x TP ranks under --dp), the shared expert whole (replicated), and
//            moe_intermediate_size unchanged; the combine is tp_moe.h's fixed-order sum;
//   embed    vocab-parallel: rows [r*V/tp, (r+1)*V/tp); a token outside them embeds as zeros, and
//            the all-reduce over the group leaves every rank with the full embedding;
//   lm_head  vocab-parallel: the same vocab rows (the embedding's when tied); all_gather along vocab.
// Norms (input, post-attention, final, q/k) and the o_proj and down biases stay whole on every
// rank: those biases are added once, after the all-reduce of the partial products.
// The non-obvious decision: when tp > num_key_value_heads, kv heads are REPLICATED, not split:
// rank r keeps kv head r * KV / tp, the one its query heads read (tp must then be a multiple of
// KV, so that each rank's query heads share one kv head). The rank's config says
// num_key_value_heads = max(KV / tp, 1), so its KV cache and attention see only its heads.
// No padding: heads, intermediate and vocab must divide by tp, or sharding fails naming the field
// (real vocabularies, 128256 and 151936, divide by 8).
// Tests: tests/unit/test_tensor_parallel.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "tachyon/model/model_config.h"
#include "tachyon/model/model_weights.h"

namespace tachyon::model {

// One rank's shard. weights.config is the rank's config: num_attention_heads,
// num_key_value_heads and intermediate_size are per rank; vocab_size stays the full vocabulary
// (the width of the logits every rank returns). embed_tokens and lm_head hold only
// [vocab_rows, hidden]: full-vocab rows [vocab_begin, vocab_begin + vocab_rows).
template <typename T>
struct BasicTpShard {
  BasicModelWeights<T> weights;
  int tp_rank = 0;
  int tp_size = 1;
  int64_t vocab_begin = 0;
  int64_t vocab_rows = 0;
  int64_t kv_head_begin = 0;  // the first full-model kv head this rank keeps
  // Expert parallelism: the routed experts [expert_begin, expert_begin + expert_count) are
  // stacked in each MoE layer's expert arrays; expert_count 0 = every expert, each one split.
  bool expert_parallel = false;
  int64_t expert_begin = 0;
  int64_t expert_count = 0;
};
// Under expert parallelism the shared expert's output is added once, by rank 0; the other ranks
// need not hold it (the GPU ranks drop it before their upload).
template <typename T>
bool adds_shared_expert(const BasicTpShard<T>& shard) {
  return !shard.expert_parallel || shard.tp_rank == 0;
}
// Empties one layer's shared expert, its bf16 weights or its FP8 projections alike.
template <typename Layer>
void drop_shared_expert(Layer& layer) {
  layer.shared_gate_up = {};
  layer.shared_down = {};
}
using TpShard = BasicTpShard<float>;          // the CPU ranks
using Bf16TpShard = BasicTpShard<uint16_t>;   // the GPU ranks

// Throws Error naming the field when `config` cannot be split over tp_size ranks (with its
// experts whole when expert_parallel; a model without experts is then refused).
void check_tp_size(const ModelConfig& config, int tp_size, bool expert_parallel = false);

// Why the tensor-parallel CUDA runner cannot serve `config` over tp_size ranks ("" when it can):
// every family the GPU decoder serves shards as above (latent attention, the sparse indexer and
// MoE experts included), as long as a rank's shard is within the CUDA kernels' limits
// (gpu_decoder_unsupported of tp_rank_config, experts whole under expert_parallel).
std::string cuda_tp_unsupported_reason(const ModelConfig& config, int tp_size, bool expert_parallel = false);

// Throws Error naming the reason when `config` cannot run with data-parallel attention over dp
// replicas of tp ranks each: only MoE models (their experts spread over the dp * tp ranks, which
// must divide num_experts); a dense model gains nothing from --dp in one process.
void check_dp_size(const ModelConfig& config, int dp, int tp);

// The per-rank config: heads, kv heads (>= 1, replicated when tp > KV) and intermediate divided,
// and moe_intermediate_size unless expert_parallel (num_experts stays: the router's width).
ModelConfig tp_rank_config(const ModelConfig& config, int tp_size, bool expert_parallel = false);

// The first full-model K/V head tensor-parallel rank tp_rank of tp_size keeps: the heads split
// evenly, or (more ranks than heads) one head shared by tp_size / heads consecutive ranks.
int64_t kv_head_begin(const ModelConfig& config, int tp_rank, int tp_size);

// The pieces shard_weights is made of, for loaders that cut a model layer by layer
// (tp_shard_loader.h). shard_geometry: rank tp_rank's config, vocab rows, kv heads and (ep_size
// > 0) experts, its tensors empty; shard_layer: one decoder layer of the full model cut for it;
// shard_vocab: its embedding and LM head rows and the final norm.
template <typename T>
BasicTpShard<T> shard_geometry(const ModelConfig& config, int tp_rank, int tp_size, int ep_rank, int ep_size);
template <typename T>
BasicLayerWeights<T> shard_layer(const ModelConfig& config, const BasicTpShard<T>& shard,
                                 const BasicLayerWeights<T>& layer);
template <typename T>
void shard_vocab(const BasicModelWeights<T>& full, BasicTpShard<T>& shard);

// Copies rank tp_rank's part of `full` (checked with check_tp_size first); f32 or bf16.
template <typename T>
BasicTpShard<T> shard_weights(const BasicModelWeights<T>& full, int tp_rank, int tp_size,
                              bool expert_parallel = false);
// The same with the experts spread over an expert-parallel group other than the TP group (data-
// parallel attention: rank ep_rank of ep_size = dp * tp holds experts [ep_rank * E / ep_size, ...)).
template <typename T>
BasicTpShard<T> shard_weights(const BasicModelWeights<T>& full, int tp_rank, int tp_size, int ep_rank, int ep_size);

// Every rank's shard of a TP group of tp_size, in rank order (checked with check_tp_size before
// any cut, so a refusal names the field instead of a rank's cut failing).
std::vector<TpShard> shard_tp_group(const ModelWeights& full, int tp_size, bool expert_parallel = false);

}  // namespace tachyon::model
