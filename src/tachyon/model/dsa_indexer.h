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

}  // namespace tachyon::model
