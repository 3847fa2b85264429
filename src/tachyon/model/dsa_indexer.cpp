// The DSA indexer's projections on the CPU (see dsa_indexer.h): plain loops over tokens and heads.
#include "tachyon/model/dsa_indexer.h"

#include <algorithm>
#include <cmath>

#include "tachyon/base/check.h"
#include "tachyon/kernels/linear.h"
#include "tachyon/kernels/rope.h"
#include "tachyon/model/rope.h"

namespace tachyon::model {
namespace {

namespace cpu = kernels::cpu;

// DeepseekV32Indexer's k_norm: nn.LayerNorm(index_head_dim, eps=1e-6).
constexpr double kKeyNormEps = 1e-6;

// x: [rows, dim] in place: LayerNorm with weight and bias (biased variance, as torch). Mean and
// variance accumulate in double, so the result is the correctly rounded f32 of the exact norm.
void layer_norm(float* x, const float* weight, const float* bias, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * dim;
    double mean = 0.0, variance = 0.0;
    for (int64_t d = 0; d < dim; ++d) mean += v[d];
    mean /= static_cast<double>(dim);
    for (int64_t d = 0; d < dim; ++d) variance += (v[d] - mean) * (v[d] - mean);
    variance /= static_cast<double>(dim);
    const double inv_std = 1.0 / std::sqrt(variance + kKeyNormEps);
    for (int64_t d = 0; d < dim; ++d) v[d] = static_cast<float>((v[d] - mean) * inv_std) * weight[d] + bias[d];
  }
}

// x: [n, heads, dim] in place: RoPE on dims [0, rope) of every head, in the config's indexer
// layout (rotate-half, or interleaved pairs de-interleaved first).
void rope_leading_dims(const ModelConfig& c, float* x, std::span<const float> inv_freq,
                       std::span<const int64_t> positions, int64_t heads, int64_t dim) {
  const int64_t n = static_cast<int64_t>(positions.size()), rope = c.qk_rope_head_dim;
  std::vector<float> pe(static_cast<size_t>(n * heads * rope));  // [n, heads, rope]
  for (int64_t i = 0; i < n * heads; ++i) std::copy_n(x + i * dim, rope, pe.data() + i * rope);
  if (c.index_rope_layout == RopeLayout::kInterleaved) deinterleave_rope_pairs(pe.data(), n * heads, rope);
  cpu::apply_rope(pe.data(), positions.data(), inv_freq.data(), n, heads, rope,
                  static_cast<float>(rope_attention_scaling(c)));
  for (int64_t i = 0; i < n * heads; ++i) std::copy_n(pe.data() + i * rope, rope, x + i * dim);
}

void check_weights(const ModelConfig& c, const LayerWeights& w) {
  TACHYON_CHECK(!w.indexer_wq_b.empty()) << "dsa_indexer_project: this layer has no indexer weights (a \"shared\" "
                                         << "layer of indexer_types reuses the previous full layer's top-k)";
  const size_t heads = static_cast<size_t>(c.index_n_heads), dim = static_cast<size_t>(c.index_head_dim);
  const size_t hidden = static_cast<size_t>(c.hidden_size);
  TACHYON_CHECK(w.indexer_wq_b.size() == heads * dim * static_cast<size_t>(c.q_lora_rank) &&
                w.indexer_wk.size() == dim * hidden && w.indexer_k_norm.size() == dim &&
                w.indexer_k_norm_bias.size() == dim && w.indexer_weights_proj.size() == heads * hidden)
      << "dsa_indexer_project: the layer's indexer weights (self_attn.indexer.*) are not those of "
      << c.index_n_heads << " heads of " << c.index_head_dim << " over q_lora_rank " << c.q_lora_rank;
}

}  // namespace

DsaIndexerProjections dsa_indexer_project(const ModelConfig& c, const LayerWeights& w, std::span<const float> inv_freq,
                                          std::span<const float> x, std::span<const float> q_lora,
                                          std::span<const int64_t> positions) {
  check_weights(c, w);
  const int64_t n = static_cast<int64_t>(positions.size());
  const int64_t heads = c.index_n_heads, dim = c.index_head_dim;
  TACHYON_CHECK(static_cast<int64_t>(x.size()) == n * c.hidden_size &&
                static_cast<int64_t>(q_lora.size()) == n * c.q_lora_rank)
      << "dsa_indexer_project: " << x.size() << " hidden and " << q_lora.size() << " q LoRA values for " << n
      << " tokens";
  DsaIndexerProjections out;
  out.q.resize(static_cast<size_t>(n * heads * dim));
  cpu::linear(out.q.data(), q_lora.data(), w.indexer_wq_b.data(), nullptr, n, c.q_lora_rank, heads * dim);
  rope_leading_dims(c, out.q.data(), inv_freq, positions, heads, dim);

  out.k.resize(static_cast<size_t>(n * dim));
  cpu::linear(out.k.data(), x.data(), w.indexer_wk.data(), nullptr, n, c.hidden_size, dim);
  layer_norm(out.k.data(), w.indexer_k_norm.data(), w.indexer_k_norm_bias.data(), n, dim);
  rope_leading_dims(c, out.k.data(), inv_freq, positions, 1, dim);

  out.weights.resize(static_cast<size_t>(n * heads));
  cpu::linear(out.weights.data(), x.data(), w.indexer_weights_proj.data(), nullptr, n, c.hidden_size, heads);
  // transformers: weights_proj(x).float() * n_heads ** -0.5, a Python double rounded to f32.
  const float head_scale = static_cast<float>(std::pow(static_cast<double>(heads), -0.5));
  for (float& weight : out.weights) weight *= head_scale;
  return out;
}

std::vector<int32_t> dsa_select_tokens(const ModelConfig& c, int64_t layer, const DsaIndexerProjections& index,
                                       AttentionBackend& attention) {
  const int64_t n = static_cast<int64_t>(index.k.size()) / c.index_head_dim;
  attention.store_index_keys(layer, index.k);
  std::vector<int32_t> kept(static_cast<size_t>(n * c.index_topk));
  attention.select_tokens(layer, index.q, index.weights, kept);
  return kept;
}

std::vector<int64_t> indexer_rotate_half_row_order(const ModelConfig& c) {
  std::vector<int64_t> order(static_cast<size_t>(c.index_head_dim));
  const int64_t half = c.qk_rope_head_dim / 2;
  for (int64_t d = 0; d < c.index_head_dim; ++d) {
    order[static_cast<size_t>(d)] = d >= c.qk_rope_head_dim ? d : d < half ? 2 * d : 2 * (d - half) + 1;
  }
  return order;
}

}  // namespace tachyon::model
