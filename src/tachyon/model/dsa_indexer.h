// DeepSeek-V3.2's lightning indexer (DeepSeek sparse attention, DSA), the model side: the index
// queries, keys and head weights of one layer, as transformers' DeepseekV32Indexer computes them.
// Which tokens they select is the attention backend's (kernels/dsa_indexer.h over the cached keys).
//
//   q_I = wq_b(q_lora)                 per head [rope | rest]       [n, index_n_heads, index_head_dim]
//   k_I = LayerNorm(wk(x), k_norm)     (weight and bias, eps 1e-6)  [n, index_head_dim], one per token
//   rope on the FIRST qk_rope_head_dim dims of q_I and k_I (MLA puts them last), in the layout
//        config.index_rope_layout says whatever rope_interleave says: rotate-half for DeepSeek-V3.2,
//        interleaved pairs for GLM-5 (de-interleaved, then rotate-half, as transformers'
//        apply_rotary_pos_emb_interleave), with MLA's cos/sin (same inv_freq and YaRN cos/sin factor)
//   w   = weights_proj(x) * index_n_heads^-0.5                       [n, index_n_heads]
// x is the input-normed hidden state (what MLA's projections read); q_lora is MLA's
// q_a_layernorm(q_a_proj(x)) (mla.h), so the indexer reuses it rather than recomputing it.
// Not done, as transformers does not: the reference implementation's fp8 quantization of q_I/k_I
// and its Hadamard rotation of both (orthonormal, so q . k is unchanged in exact arithmetic).
// Only layers with an indexer (ModelConfig::has_indexer) run it: GLM-5's "shared" layers reuse the
// previous full layer's selection (dense_model.cpp).
// Tests: tests/unit/test_dsa.cpp, test_glm_dsa.cpp (against double-precision reimplementations).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/model/attention_backend.h"
#include "tachyon/model/model_config.h"
#include "tachyon/model/model_weights.h"

namespace tachyon::model {

struct DsaIndexerProjections {
  std::vector<float> q;        // [n, index_n_heads, index_head_dim], rope applied
  std::vector<float> k;        // [n, index_head_dim], normed, rope applied
  std::vector<float> weights;  // [n, index_n_heads], index_n_heads^-0.5 folded in
};

// x: [n, hidden]; q_lora: [n, q_lora_rank]; positions: [n]; inv_freq: [qk_rope_head_dim / 2].
DsaIndexerProjections dsa_indexer_project(const ModelConfig& config, const LayerWeights& w,
                                          std::span<const float> inv_freq, std::span<const float> x,
                                          std::span<const float> q_lora, std::span<const int64_t> positions);

// Stores the index keys in `attention`'s cache and returns, per new token, the positions it
// attends: [n, index_topk], ascending, -1 padded (AttentionBackend::select_tokens).
std::vector<int32_t> dsa_select_tokens(const ModelConfig& config, int64_t layer, const DsaIndexerProjections& index,
                                       AttentionBackend& attention);

// GLM-5's interleaved indexer rope as DeepSeek-V3.2's rotate-half one, by moving weight rows:
// the interleaved layout is a de-interleave of the rope dims followed by rotate-half, and the
// de-interleave commutes with the projections (it picks rows of wq_b and wk) and with k_norm's
// LayerNorm (a permutation of the entries it normalizes, with its weight and bias permuted
// alike). So a checkpoint whose indexer_wq_b rows (per head), indexer_wk rows and k_norm
// weight/bias entries are put in this order computes, with rotate-half rope, exactly the index
// queries and keys of the interleaved layout. Why: the GPU's indexer kernels rotate half only.
// order[d] (d < index_head_dim) is the original row that row d takes: for the rope dims
// [0, qk_rope) first the even ones then the odd ones, the other dims unchanged.
std::vector<int64_t> indexer_rotate_half_row_order(const ModelConfig& config);

// `tensor` holds groups of index_head_dim rows of `row_width` values (one group per index head
// for wq_b, one for wk; row_width 1 for k_norm's weight and bias): each group's rows reordered.
template <typename T>
std::vector<T> reorder_indexer_rows(const std::vector<T>& tensor, const std::vector<int64_t>& order, int64_t row_width) {
  const int64_t dim = static_cast<int64_t>(order.size());
  const int64_t group = dim * row_width;
  std::vector<T> out(tensor.size());
  for (int64_t g = 0; g * group < static_cast<int64_t>(tensor.size()); ++g) {
    for (int64_t d = 0; d < dim; ++d) {
      const auto from = tensor.begin() + g * group + order[static_cast<size_t>(d)] * row_width;
      std::copy(from, from + row_width, out.begin() + g * group + d * row_width);
    }
  }
  return out;
}

}  // namespace tachyon::model
