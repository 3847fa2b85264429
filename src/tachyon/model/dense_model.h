// The dense decoder of the Llama family, the CPU reference forward. Llama, Mistral, Qwen2 and
// Qwen3 differ only in ModelConfig fields (biases, q/k norm, sliding window), so they share this
// file; the forward reads top to bottom like the papers. Qwen3-MoE is the same decoder with a
// mixture of experts (moe.h) in place of the MLP in its sparse layers, so it runs here too, and
// so does DeepSeek-V3, whose latent attention (mla.h) computes q, k, v in place of the q/k/v
// projections (ModelConfig::is_mla). It computes in f32 whatever the checkpoint's dtype, which is
// what makes this the numerical reference the CUDA kernels match; a bf16 checkpoint's matrices may
// stay bf16 in memory (Bf16MatrixHolding::kKeepBf16, what load() does), widened exactly in the
// product, so the logits are the same bits as with the widened weights.
// The forward itself (dense_model.cpp, via dense_forward.h) also serves TpDenseModel, one rank of
// a tensor-parallel group (tp_dense_model.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "tachyon/model/attention_backend.h"
#include "tachyon/model/model_config.h"
#include "tachyon/model/model_weights.h"

namespace tachyon::model {

// The tokens of one forward pass: a ragged batch of any number of sequences, flattened. Which
// token belongs to which sequence only the AttentionBackend knows.
struct ForwardBatch {
  std::span<const int32_t> token_ids;    // [num_tokens]
  std::span<const int64_t> positions;    // [num_tokens]
  std::span<const int64_t> logits_rows;  // indices into token_ids whose logits are returned, in order
};

// Called with named intermediates ("embed", "q", "k", "attn_out", "mlp_out", "final_norm"; in a
// MoE layer "router_logits" [n, num_experts] and "moe_out" [n, hidden] instead of "mlp_out"; with
// an absorbed-MLA cache "latent" [n, kv_lora_rank + qk_rope] = [c_kv | k_pe] instead of "k"; under
// DSA also "index_k" [n, index_head_dim], the indexer's keys (layers with an indexer only);
// "final_hidden" [n, hidden], every token's last hidden state before the final norm, which
// DeepSeek's MTP module reads) so a debug run can dump and diff them against transformers.
// layer is -1 outside layers.
using ForwardHook = std::function<void(std::string_view name, int64_t layer, std::span<const float> values)>;

// A hook that keeps the forward's "final_hidden" rows in `out` ([n, hidden], what an MTP drafter
// reads) and lets every other name pass; `out` must outlive the forward.
ForwardHook keep_final_hidden(std::vector<float>& out);

class DenseModel {
 public:
  explicit DenseModel(ModelWeights weights);
  static DenseModel load(const std::filesystem::path& model_dir);

  const ModelConfig& config() const { return weights_.config; }

  // Runs the batch; returns logits [batch.logits_rows.size(), vocab_size]. They take over
  // recycled_logits' allocation (a runner's previous logits, handed back): a step no larger than
  // an earlier one then neither allocates nor zeroes them.
  std::vector<float> forward(const ForwardBatch& batch, AttentionBackend& attention, const ForwardHook& hook = nullptr,
                             std::vector<float> recycled_logits = {}) const;

  // One sequence: runs `tokens` after the cache's current contents, appends their K/V, and
  // returns logits [tokens.size(), vocab_size] (all_logits) or [1, vocab_size] for the last.
  std::vector<float> forward(std::span<const int32_t> tokens, SequenceKvCache& cache, bool all_logits = false,
                             const ForwardHook& hook = nullptr) const;

  // Every token's hidden state after the final norm, [tokens.size(), hidden_size]: transformers'
  // last_hidden_state, what an embedding model's pooling reads. One sequence from position 0,
  // with a cache of its own that is dropped on return; no LM head runs.
  std::vector<float> final_hidden_states(std::span<const int32_t> tokens) const;

 private:
  ModelWeights weights_;
  std::vector<float> inv_freq_;  // [head_dim / 2]
};

// Greedy decoding with the reference forward: `max_new_tokens` argmax tokens after `prompt`,
// stopping early only at `stop_token` when it is >= 0. `on_token` sees each token as it is
// chosen (for streaming). The engine's scheduler replaces this loop for serving.
std::vector<int32_t> greedy_generate(const DenseModel& model, std::span<const int32_t> prompt, int64_t max_new_tokens,
                                     int32_t stop_token = -1,
                                     const std::function<void(int32_t)>& on_token = nullptr);

}  // namespace tachyon::model
