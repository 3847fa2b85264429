// The dense forward, written once. DenseModel runs it on every weight; TpDenseModel runs it on a
// tensor-parallel shard (tp_shard.h), and the TensorParallelSeams below are where the ranks talk:
// unsharded they are no-ops, so this file still reads as the single-device reference.
// Qwen3-MoE's and DeepSeek-V3's sparse layers swap the MLP block for the mixture of experts of
// moe.h, and DeepSeek-V3's latent attention (mla.h) computes q, k, v in place of the q/k/v
// projections (DeepSeek-V3.2 adds its sparse-attention indexer, dsa_indexer.h; GLM-5's "shared"
// layers reuse the previous full layer's selection, carried in LayerCarry); everything else is
// this same decoder. Which of those blocks a layer runs is the layer plan's (layer_plan.h), the
// one the GPU decoder builds from too; the blocks below read ModelConfig for dims only.
#include "tachyon/model/dense_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tachyon/base/check.h"
#include "tachyon/kernels/linear.h"
#include "tachyon/kernels/rms_norm.h"
#include "tachyon/kernels/rope.h"
#include "tachyon/model/dense_forward.h"
#include "tachyon/model/dsa_indexer.h"
#include "tachyon/model/layer_plan.h"
#include "tachyon/model/mla.h"
#include "tachyon/model/mla_absorbed.h"
#include "tachyon/model/moe.h"
#include "tachyon/model/rope.h"
#include "tachyon/model/tp_moe.h"

namespace tachyon::model {

namespace cpu = kernels::cpu;
using detail::TensorParallelSeams;

namespace {

// values: [count] f32 partial sums of this rank -> their sum over the TP group, on every rank.
void all_reduce(const TensorParallelSeams& tp, std::vector<float>& values) {
  if (tp.group == nullptr) return;
  tp.group->all_reduce(values.data(), values.data(), values.size(), dist::ReduceType::kF32, nullptr);
}

// out = in W^T + bias with W [out_features, in_features] as the model holds it: in f32, or as the
// checkpoint's bf16 (the *_bf16 fields of model_weights.h), which the product widens exactly, so
// the bits are the same either way. bias: [out_features] or empty.
void linear(float* out, const float* in, const std::vector<float>& f32, const std::vector<uint16_t>& bf16,
            const std::vector<float>& bias, int64_t rows, int64_t in_features, int64_t out_features) {
  const float* b = bias.empty() ? nullptr : bias.data();
  if (!bf16.empty()) {
    cpu::linear(out, in, bf16.data(), b, rows, in_features, out_features);
  } else {
    cpu::linear(out, in, f32.data(), b, rows, in_features, out_features);
  }
}

// out: [rows, dim] += bias [dim] on every row (a row-parallel layer's bias, added once after the sum).
void add_bias(std::vector<float>& out, const std::vector<float>& bias, int64_t rows, int64_t dim) {
  if (bias.empty()) return;
  for (int64_t r = 0; r < rows; ++r) cpu::add_inplace(out.data() + r * dim, bias.data(), dim);
}

// Vocab-parallel embedding: ids: [n] full-vocab ids; table: [tp.vocab_rows, hidden], the rows of
// ids [tp.vocab_begin, tp.vocab_begin + tp.vocab_rows). Ids outside this rank's rows embed as
// zeros; the all-reduce then leaves every rank with the full embedding [n, hidden] (x + 0 = x,
// so it is exact).
std::vector<float> embed(const TensorParallelSeams& tp, std::span<const int32_t> ids, const std::vector<float>& table,
                         int64_t vocab, int64_t hidden) {
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<float> out(static_cast<size_t>(n * hidden), 0.0f);  // [n, hidden]
  for (int64_t t = 0; t < n; ++t) {
    const int64_t id = ids[static_cast<size_t>(t)];
    TACHYON_CHECK(id >= 0 && id < vocab) << "token id " << id << " is outside the vocabulary [0, " << vocab << ")";
    const int64_t row = id - tp.vocab_begin;
    if (row >= 0 && row < tp.vocab_rows) std::copy_n(table.data() + row * hidden, hidden, out.data() + t * hidden);
  }
  all_reduce(tp, out);
  return out;
}

// Vocab-parallel LM head: x: [rows, hidden]; table: [tp.vocab_rows, hidden] in f32, or table_bf16
// (an untied head held as bf16, never sharded: tp_shard.h reads the f32 fields). Each rank computes
// its vocab slice [rows, vocab_rows]; the all_gather stacks the slices [tp][rows][vocab_rows],
// which are interleaved into logits [rows, vocab] (the slices are in rank = vocab order).
// The logits take over `recycled`'s allocation (a runner hands back its previous step's): every
// element is written, so a step no larger than an earlier one neither allocates nor zeroes
// [rows, vocab] floats (600 MB at 1,000 rows of a 152K vocabulary).
std::vector<float> lm_head(const TensorParallelSeams& tp, const std::vector<float>& x, const std::vector<float>& table,
                           const std::vector<uint16_t>& table_bf16, int64_t rows, int64_t hidden, int64_t vocab,
                           std::vector<float> recycled) {
  if (tp.group == nullptr) {
    recycled.resize(static_cast<size_t>(rows * vocab));  // [rows, vocab]
    if (rows > 0) linear(recycled.data(), x.data(), table, table_bf16, {}, rows, hidden, vocab);
    return recycled;
  }
  std::vector<float> slice(static_cast<size_t>(rows * tp.vocab_rows));  // [rows, vocab_rows]
  if (rows == 0) return slice;
  linear(slice.data(), x.data(), table, table_bf16, {}, rows, hidden, tp.vocab_rows);
  std::vector<float> stacked(static_cast<size_t>(rows * vocab));  // [tp][rows][vocab_rows]
  tp.group->all_gather(slice.data(), stacked.data(), slice.size() * sizeof(float), nullptr);
  std::vector<float>& logits = recycled;
  logits.resize(static_cast<size_t>(rows * vocab));  // [rows, vocab]
  for (int rank = 0; rank < tp.group->size(); ++rank) {
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(stacked.data() + (rank * rows + r) * tp.vocab_rows, tp.vocab_rows,
                  logits.data() + r * vocab + rank * tp.vocab_rows);
    }
  }
  return logits;
}

// q [n, heads, head_dim], k and v [n, kv_heads, head_dim] of the Llama family, rope applied.
// Under TP q/k/v hold this rank's heads (column-parallel).
QkvProjections project_qkv(const ModelConfig& c, const LayerWeights& w, std::span<const float> inv_freq,
                           const std::vector<float>& normed, std::span<const int64_t> positions) {
  const int64_t n = static_cast<int64_t>(positions.size());
  const int64_t qkv_width = c.q_size() + 2 * c.kv_size();
  std::vector<float> qkv(static_cast<size_t>(n * qkv_width));  // [n, q_size + 2 * kv_size]
  linear(qkv.data(), normed.data(), w.qkv, w.qkv_bf16, w.qkv_bias, n, c.hidden_size, qkv_width);

  // Split into q [n, heads, head_dim] and k, v [n, kv_heads, head_dim].
  QkvProjections out;
  std::vector<float>&q = out.q, &k = out.k, &v = out.v;
  q.resize(static_cast<size_t>(n * c.q_size()));
  k.resize(static_cast<size_t>(n * c.kv_size()));
  v.resize(static_cast<size_t>(n * c.kv_size()));
  for (int64_t t = 0; t < n; ++t) {
    const float* row = qkv.data() + t * qkv_width;
    std::copy_n(row, c.q_size(), q.data() + t * c.q_size());
    std::copy_n(row + c.q_size(), c.kv_size(), k.data() + t * c.kv_size());
    std::copy_n(row + c.q_size() + c.kv_size(), c.kv_size(), v.data() + t * c.kv_size());
  }
  if (c.qk_norm) {  // Qwen3: per-head RMSNorm over head_dim, before RoPE
    const float eps = static_cast<float>(c.rms_norm_eps);
    cpu::rms_norm(q.data(), q.data(), w.q_norm.data(), n * c.num_attention_heads, c.head_dim, eps);
    cpu::rms_norm(k.data(), k.data(), w.k_norm.data(), n * c.num_key_value_heads, c.head_dim, eps);
  }
  cpu::apply_rope(q.data(), positions.data(), inv_freq.data(), n, c.num_attention_heads, c.head_dim);
  cpu::apply_rope(k.data(), positions.data(), inv_freq.data(), n, c.num_key_value_heads, c.head_dim);
  return out;
}

// The attended values [n, heads, value_head_dim] of this layer's new tokens: q, k, v from the q/k/v
// projections or from latent attention's decompressed form (mla.h), or MLA's absorbed form
// (mla_absorbed.h) when the backend's cache holds latents. Under DSA a full layer's selection
// goes into `carry` and a shared layer attends the one there.
std::vector<float> attend_layer(const ModelConfig& c, const LayerKinds& kinds, const LayerWeights& w,
                                std::span<const float> inv_freq, int64_t layer, const std::vector<float>& normed,
                                std::span<const int64_t> positions, AttentionBackend& attention,
                                detail::LayerCarry& carry, const ForwardHook& hook) {
  const bool latent = kinds.attention == AttentionKind::kLatent;
  if (latent && attention.mla_form() == MlaAttentionForm::kAbsorbed) {
    const MlaLatentProjections projected = mla_project_latent(c, w, inv_freq, normed, positions);
    if (hook) {
      hook("q", layer, projected.q);
      hook("latent", layer, projected.latent);
    }
    if (kinds.indexer != IndexerKind::kNone) {  // DeepSeek-V3.2, GLM-5: attend only the tokens the indexer keeps
      // The latent is stored before the indexer runs, so a backend that moves all of a layer's
      // rows in one collective (prefill context parallelism, pcp_attention_backend.h) has both
      // the latent and the index keys when the selection asks for the full context.
      attention.store_latent(layer, projected.latent);
      if (kinds.indexer == IndexerKind::kFull) {
        const DsaIndexerProjections index = dsa_indexer_project(c, w, inv_freq, normed, projected.q_lora, positions);
        if (hook) hook("index_k", layer, index.k);
        carry.dsa_kept = dsa_select_tokens(c, layer, index, attention);
      }
      // A "shared" layer (GLM-5) attends the same positions the last full layer chose for these tokens.
      TACHYON_CHECK(carry.dsa_kept.size() == positions.size() * static_cast<size_t>(c.index_topk))
          << "internal: DSA layer " << layer << " shares a top-k, but no full indexer layer ran before it";
      return mla_attend_sparse(c, w, layer, projected, carry.dsa_kept, attention);
    }
    return mla_attend_absorbed(c, w, layer, projected, attention);
  }
  TACHYON_CHECK(kinds.indexer == IndexerKind::kNone) << "internal: sparse attention (DSA) in the decompressed MLA form";
  auto [q, k, v] = latent ? mla_project(c, w, inv_freq, normed, positions)
                          : project_qkv(c, w, inv_freq, normed, positions);
  if (hook) {
    hook("q", layer, q);
    hook("k", layer, k);
  }
  attention.store_kv(layer, k, v);
  const int64_t n = static_cast<int64_t>(positions.size());
  std::vector<float> attended(static_cast<size_t>(n * c.num_attention_heads * c.value_head_dim()));
  attention.attend(layer, q, attended);
  return attended;
}

// hidden += o_proj(attend_layer(rms_norm(hidden))). Under TP o_proj holds this rank's heads' input
// columns (row-parallel): its products are partial sums, all-reduced before the bias.
void attention_block(const ModelConfig& c, const LayerKinds& kinds, const LayerWeights& w,
                     std::span<const float> inv_freq, const TensorParallelSeams& tp, int64_t layer,
                     std::vector<float>& hidden, std::span<const int64_t> positions, AttentionBackend& attention,
                     detail::LayerCarry& carry, const ForwardHook& hook) {
  const int64_t n = static_cast<int64_t>(positions.size());
  std::vector<float> normed(hidden.size());  // [n, hidden]
  cpu::rms_norm(normed.data(), hidden.data(), w.input_norm.data(), n, c.hidden_size,
                static_cast<float>(c.rms_norm_eps));
  const int64_t attended_width = c.num_attention_heads * c.value_head_dim();
  const std::vector<float> attended =  // [n, heads, value_head_dim]
      attend_layer(c, kinds, w, inv_freq, layer, normed, positions, attention, carry, hook);

  std::vector<float> projected(hidden.size());  // [n, hidden]
  linear(projected.data(), attended.data(), w.o_proj, w.o_proj_bf16, {}, n, attended_width, c.hidden_size);
  all_reduce(tp, projected);
  add_bias(projected, w.o_proj_bias, n, c.hidden_size);
  if (hook) hook("attn_out", layer, projected);
  cpu::add_inplace(hidden.data(), projected.data(), static_cast<int64_t>(hidden.size()));
}

// hidden += down(silu(gate(x)) * up(x)) with x = rms_norm(hidden). Under TP gate/up hold this
// rank's intermediate slice (column-parallel) and down its input columns (row-parallel).
void mlp_block(const ModelConfig& c, const LayerWeights& w, const TensorParallelSeams& tp, int64_t layer,
               std::vector<float>& hidden, int64_t n, const ForwardHook& hook) {
  std::vector<float> normed(hidden.size());
  cpu::rms_norm(normed.data(), hidden.data(), w.post_attention_norm.data(), n, c.hidden_size,
                static_cast<float>(c.rms_norm_eps));
  std::vector<float> gate_up(static_cast<size_t>(n * 2 * c.intermediate_size));
  linear(gate_up.data(), normed.data(), w.gate_up, w.gate_up_bf16, w.gate_up_bias, n, c.hidden_size,
         2 * c.intermediate_size);
  std::vector<float> activated(static_cast<size_t>(n * c.intermediate_size));
  cpu::silu_and_mul(activated.data(), gate_up.data(), n, c.intermediate_size);
  std::vector<float> down(hidden.size());
  linear(down.data(), activated.data(), w.down, w.down_bf16, {}, n, c.intermediate_size, c.hidden_size);
  all_reduce(tp, down);
  add_bias(down, w.down_bias, n, c.hidden_size);
  if (hook) hook("mlp_out", layer, down);
  cpu::add_inplace(hidden.data(), down.data(), static_cast<int64_t>(hidden.size()));
}

// hidden += moe(x) with x = rms_norm(hidden): the layer's k-of-E experts per token (moe.h). Under
// TP each rank runs its part of the experts and tp_moe.h combines the ranks' outputs.
void moe_block(const ModelConfig& c, const LayerWeights& w, const TensorParallelSeams& tp, int64_t layer,
               std::vector<float>& hidden, int64_t n, const ForwardHook& hook) {
  std::vector<float> normed(hidden.size());  // [n, hidden]
  cpu::rms_norm(normed.data(), hidden.data(), w.post_attention_norm.data(), n, c.hidden_size,
                static_cast<float>(c.rms_norm_eps));
  std::vector<float> router_logits;  // [n, num_experts], filled only for the hook
  std::vector<float> out =  // [n, hidden]
      detail::parallel_moe(c, w, tp, normed, n, hook ? &router_logits : nullptr);
  if (hook) {
    hook("router_logits", layer, router_logits);
    hook("moe_out", layer, out);
  }
  cpu::add_inplace(hidden.data(), out.data(), static_cast<int64_t>(hidden.size()));
}

}  // namespace

namespace detail {

void decoder_layer(const ModelConfig& c, const LayerKinds& kinds, const LayerWeights& w,
                   std::span<const float> inv_freq, const TensorParallelSeams& tp, int64_t layer,
                   std::vector<float>& hidden, std::span<const int64_t> positions, AttentionBackend& attention,
                   LayerCarry& carry, const ForwardHook& hook) {
  const int64_t n = static_cast<int64_t>(positions.size());
  attention_block(c, kinds, w, inv_freq, tp, layer, hidden, positions, attention, carry, hook);
  if (kinds.mlp == MlpKind::kExperts) {
    moe_block(c, w, tp, layer, hidden, n, hook);
  } else {
    mlp_block(c, w, tp, layer, hidden, n, hook);
  }
}

std::vector<float> dense_forward(const ModelWeights& weights, std::span<const float> inv_freq,
                                 const TensorParallelSeams& tp, const ForwardBatch& batch, AttentionBackend& attention,
                                 const ForwardHook& hook, std::vector<float> recycled_logits) {
  const ModelConfig& c = weights.config;
  const int64_t n = static_cast<int64_t>(batch.token_ids.size());
  TACHYON_CHECK(n > 0) << "forward needs at least one token";
  TACHYON_CHECK(batch.positions.size() == batch.token_ids.size())
      << "forward: " << batch.positions.size() << " positions for " << n << " tokens";

  std::vector<float> hidden = embed(tp, batch.token_ids, weights.embed_tokens, c.vocab_size, c.hidden_size);
  if (hook) hook("embed", -1, hidden);

  const std::vector<LayerKinds> plan = layer_plan(c);  // [num_hidden_layers]
  LayerCarry carry;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const size_t l = static_cast<size_t>(layer);
    decoder_layer(c, plan[l], weights.layers[l], inv_freq, tp, layer, hidden, batch.positions, attention, carry, hook);
  }
  if (hook) hook("final_hidden", -1, hidden);  // [n, hidden] before the final norm: what MTP reads (mtp.h)

  // Only the rows whose logits are wanted go through the final norm and the LM head.
  const int64_t rows = static_cast<int64_t>(batch.logits_rows.size());
  std::vector<float> selected(static_cast<size_t>(rows * c.hidden_size));  // [rows, hidden]
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = batch.logits_rows[static_cast<size_t>(r)];
    TACHYON_CHECK(row >= 0 && row < n) << "logits row " << row << " outside the batch of " << n;
    std::copy_n(hidden.data() + row * c.hidden_size, c.hidden_size, selected.data() + r * c.hidden_size);
  }
  cpu::rms_norm(selected.data(), selected.data(), weights.final_norm.data(), rows, c.hidden_size,
                static_cast<float>(c.rms_norm_eps));
  if (hook) hook("final_norm", -1, selected);
  return lm_head(tp, selected, weights.output_embedding(), weights.lm_head_bf16, rows, c.hidden_size,
                 c.vocab_size, std::move(recycled_logits));  // [rows, vocab]
}

std::vector<float> sequence_forward(const ModelConfig& config, std::span<const int32_t> tokens, SequenceKvCache& cache,
                                    bool all_logits, const BatchForward& forward) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<int64_t> positions(static_cast<size_t>(n));
  std::iota(positions.begin(), positions.end(), cache.length);
  std::vector<int64_t> rows;
  for (int64_t r = all_logits ? 0 : n - 1; r < n; ++r) rows.push_back(r);
  SequenceAttention attention(config, cache, n);
  std::vector<float> logits = forward(ForwardBatch{tokens, positions, rows}, attention);
  cache.length += n;
  return logits;
}

}  // namespace detail

ForwardHook keep_final_hidden(std::vector<float>& out) {
  return [&out](std::string_view name, int64_t, std::span<const float> values) {
    if (name == "final_hidden") out.assign(values.begin(), values.end());
  };
}

DenseModel::DenseModel(ModelWeights weights) : weights_(std::move(weights)), inv_freq_(rope_inv_freq(weights_.config)) {}

DenseModel DenseModel::load(const std::filesystem::path& model_dir) {
  ModelConfig config = ModelConfig::from_dir(model_dir);
  SafetensorsCheckpoint checkpoint(model_dir);
  return DenseModel(load_weights(config, checkpoint, Bf16MatrixHolding::kKeepBf16));
}

std::vector<float> DenseModel::forward(const ForwardBatch& batch, AttentionBackend& attention, const ForwardHook& hook,
                                       std::vector<float> recycled_logits) const {
  const TensorParallelSeams unsharded{.group = nullptr, .vocab_begin = 0, .vocab_rows = config().vocab_size};
  return detail::dense_forward(weights_, inv_freq_, unsharded, batch, attention, hook, std::move(recycled_logits));
}

std::vector<float> DenseModel::forward(std::span<const int32_t> tokens, SequenceKvCache& cache, bool all_logits,
                                       const ForwardHook& hook) const {
  return detail::sequence_forward(config(), tokens, cache, all_logits,
                                  [&](const ForwardBatch& batch, AttentionBackend& attention) {
                                    return forward(batch, attention, hook);
                                  });
}

std::vector<float> DenseModel::final_hidden_states(std::span<const int32_t> tokens) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  TACHYON_CHECK(n > 0) << "final_hidden_states needs at least one token";
  SequenceKvCache cache(config(), n);
  SequenceAttention attention(config(), cache, n);
  std::vector<int64_t> positions(static_cast<size_t>(n));
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<float> hidden;  // [n, hidden] before the final norm
  forward(ForwardBatch{tokens, positions, {}}, attention, keep_final_hidden(hidden));  // no logits rows: no LM head
  cpu::rms_norm(hidden.data(), hidden.data(), weights_.final_norm.data(), n, config().hidden_size,
                static_cast<float>(config().rms_norm_eps));
  return hidden;
}

std::vector<int32_t> greedy_generate(const DenseModel& model, std::span<const int32_t> prompt, int64_t max_new_tokens,
                                     int32_t stop_token, const std::function<void(int32_t)>& on_token) {
  TACHYON_CHECK(!prompt.empty()) << "greedy_generate needs a non-empty prompt";
  SequenceKvCache cache(model.config(), static_cast<int64_t>(prompt.size()) + max_new_tokens);
  std::vector<int32_t> generated;
  std::vector<float> logits = model.forward(prompt, cache);
  while (static_cast<int64_t>(generated.size()) < max_new_tokens) {
    int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    generated.push_back(next);
    if (on_token) on_token(next);
    if (next == stop_token || static_cast<int64_t>(generated.size()) == max_new_tokens) break;
    logits = model.forward(std::span<const int32_t>(&next, 1), cache);
  }
  return generated;
}

}  // namespace tachyon::model
