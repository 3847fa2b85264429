// Internal to model/: the dense forward with its tensor-parallel seams, shared by DenseModel
// (one rank holding every weight) and TpDenseModel (one rank of a TP group holding a shard,
// tp_shard.h). The architecture is written once, in dense_model.cpp; parallelism enters only at
// four named points: the vocab-parallel embedding (all-reduce), the row-parallel o_proj and down
// (all-reduce of partial products, bias added after; a MoE layer's combine is tp_moe.h's), and
// the vocab-parallel LM head (all_gather).
// Unsharded (group == nullptr) every seam is a no-op and the forward is exactly the reference's.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "tachyon/dist/communicator.h"
#include "tachyon/model/attention_backend.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/layer_plan.h"
#include "tachyon/model/model_weights.h"

namespace tachyon::model::detail {

// Which part of the vocabulary this rank's embed_tokens / lm_head rows are, which routed experts
// it holds, and its TP group.
struct TensorParallelSeams {
  dist::Communicator* group = nullptr;  // the TP group; nullptr: unsharded, no communication
  int64_t vocab_begin = 0;              // full-vocab id of this rank's first embedding row
  int64_t vocab_rows = 0;               // rows of embed_tokens / lm_head this rank holds
  // MoE layers (tp_moe.h): experts [expert_begin, expert_begin + expert_count) are held whole
  // under expert parallelism; expert_count 0 means every expert (each one split, or unsharded).
  bool expert_parallel = false;
  int64_t expert_begin = 0;
  int64_t expert_count = 0;
  // Under expert parallelism: the group the experts are spread over (tp_moe.h), the TP group
  // itself or, with data-parallel attention, every DP x TP rank.
  dist::Communicator* ep_group = nullptr;
};

// What one forward carries from a layer to the next besides the hidden state: the top-k the last
// full DSA layer selected, which GLM-5's "shared" layers attend again (ModelConfig::indexer_types;
// transformers passes it up as prev_topk_indices). One per forward, for the batch's tokens.
struct LayerCarry {
  std::vector<int32_t> dsa_kept;  // [n, index_topk] as dsa_select_tokens returns it; empty before a full layer
};

// One decoder layer in place: hidden [n, hidden] += attention, then += the MLP or the mixture of
// experts, as `kinds` (the layer's entry of layer_plan(c)) says; c gives the dims. `layer` indexes
// the backend's cache and names the hook's intermediates; `carry` goes from each layer to the
// next. Exposed so that DeepSeek's MTP module (mtp.h) runs its layer through this same code with a
// cache of its own.
void decoder_layer(const ModelConfig& c, const LayerKinds& kinds, const LayerWeights& w,
                   std::span<const float> inv_freq, const TensorParallelSeams& tp, int64_t layer,
                   std::vector<float>& hidden, std::span<const int64_t> positions, AttentionBackend& attention,
                   LayerCarry& carry, const ForwardHook& hook);

// The forward of dense_model.h for `weights` (the full model or a shard whose config has the
// per-rank heads and intermediate size; config.vocab_size is always the full vocabulary).
// inv_freq: [head_dim / 2]. Returns logits [batch.logits_rows.size(), vocab_size] on every rank,
// in recycled_logits' allocation (DenseModel::forward's).
std::vector<float> dense_forward(const ModelWeights& weights, std::span<const float> inv_freq,
                                 const TensorParallelSeams& tp, const ForwardBatch& batch, AttentionBackend& attention,
                                 const ForwardHook& hook, std::vector<float> recycled_logits = {});

// One sequence after the cache's contents: builds positions and logits rows, runs `forward` with
// a SequenceAttention over `cache` (built from `config`, the rank's), then advances the cache.
using BatchForward = std::function<std::vector<float>(const ForwardBatch&, AttentionBackend&)>;
std::vector<float> sequence_forward(const ModelConfig& config, std::span<const int32_t> tokens, SequenceKvCache& cache,
                                    bool all_logits, const BatchForward& forward);

}  // namespace tachyon::model::detail
