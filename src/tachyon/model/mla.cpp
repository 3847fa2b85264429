// MLA's projections, norms and rope on the CPU (see mla.h): plain loops over tokens and heads.
// mla_project is mla_project_latent plus kv_b_proj, so both forms start from the same numbers.
#include "tachyon/model/mla.h"

#include <algorithm>

#include "tachyon/base/check.h"
#include "tachyon/kernels/linear.h"
#include "tachyon/kernels/rms_norm.h"
#include "tachyon/kernels/rope.h"
#include "tachyon/model/rope.h"

namespace tachyon::model {
namespace {

namespace cpu = kernels::cpu;

// pe: [n, heads, rope] in place: (de-interleave,) then rotate-half RoPE with scaled cos/sin.
void rope_in_place(const ModelConfig& c, std::vector<float>& pe, std::span<const float> inv_freq,
                   std::span<const int64_t> positions, int64_t heads) {
  const int64_t n = static_cast<int64_t>(positions.size()), rope = c.qk_rope_head_dim;
  if (c.rope_interleave) deinterleave_rope_pairs(pe.data(), n * heads, rope);
  cpu::apply_rope(pe.data(), positions.data(), inv_freq.data(), n, heads, rope,
                  static_cast<float>(rope_attention_scaling(c)));
}

// [n, hidden] -> q [n, heads, qk_head_dim] before rope; q_latent gets the normed q LoRA latent
// [n, q_lora_rank] (left empty without q LoRA).
std::vector<float> project_q(const ModelConfig& c, const LayerWeights& w, std::span<const float> x, int64_t n,
                             std::vector<float>& q_latent) {
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  std::vector<float> q(static_cast<size_t>(n * q_width));
  if (c.q_lora_rank == 0) {
    cpu::linear(q.data(), x.data(), w.q_b_proj.data(), nullptr, n, c.hidden_size, q_width);
    return q;
  }
  q_latent.resize(static_cast<size_t>(n * c.q_lora_rank));  // [n, q_lora_rank]
  cpu::linear(q_latent.data(), x.data(), w.q_a_proj.data(), nullptr, n, c.hidden_size, c.q_lora_rank);
  cpu::rms_norm(q_latent.data(), q_latent.data(), w.q_a_norm.data(), n, c.q_lora_rank, kMlaLatentNormEps);
  cpu::linear(q.data(), q_latent.data(), w.q_b_proj.data(), nullptr, n, c.q_lora_rank, q_width);
  return q;
}

void check_mla_weights(const ModelConfig& c, const LayerWeights& w) {
  const int64_t heads = c.num_attention_heads, h = c.hidden_size;
  const size_t q_in = static_cast<size_t>(c.q_lora_rank > 0 ? c.q_lora_rank : h);
  TACHYON_CHECK(w.q_b_proj.size() == static_cast<size_t>(heads * c.head_dim) * q_in &&
                w.kv_a_proj.size() == static_cast<size_t>((c.kv_lora_rank + c.qk_rope_head_dim) * h) &&
                w.kv_a_norm.size() == static_cast<size_t>(c.kv_lora_rank) &&
                w.kv_b_proj.size() == static_cast<size_t>(heads * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank))
      << "mla_project: the layer's weights are not those of latent attention with kv_lora_rank " << c.kv_lora_rank
      << " and q_lora_rank " << c.q_lora_rank;
}

}  // namespace

MlaLatentProjections mla_project_latent(const ModelConfig& c, const LayerWeights& w, std::span<const float> inv_freq,
                                        std::span<const float> x, std::span<const int64_t> positions) {
  check_mla_weights(c, w);
  const int64_t n = static_cast<int64_t>(positions.size()), heads = c.num_attention_heads;
  const int64_t nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, qk = c.head_dim;
  const int64_t latent = c.kv_lora_rank, row_width = latent + rope;
  TACHYON_CHECK(static_cast<int64_t>(x.size()) == n * c.hidden_size) << "mla_project: " << x.size()
                                                                     << " values for " << n << " tokens";
  MlaLatentProjections out;
  out.q = project_q(c, w, x, n, out.q_lora);  // [n, heads, qk]

  std::vector<float> compressed(static_cast<size_t>(n * row_width));  // [n, kv_lora_rank + rope]
  cpu::linear(compressed.data(), x.data(), w.kv_a_proj.data(), nullptr, n, c.hidden_size, row_width);
  std::vector<float> c_kv(static_cast<size_t>(n * latent)), k_pe(static_cast<size_t>(n * rope));
  for (int64_t t = 0; t < n; ++t) {
    const float* row = compressed.data() + t * row_width;
    std::copy_n(row, latent, c_kv.data() + t * latent);
    std::copy_n(row + latent, rope, k_pe.data() + t * rope);
  }
  cpu::rms_norm(c_kv.data(), c_kv.data(), w.kv_a_norm.data(), n, latent, kMlaLatentNormEps);

  // RoPE on the query's rope dims of every head and on the one shared k_pe per token.
  std::vector<float> q_pe(static_cast<size_t>(n * heads * rope));  // [n, heads, rope]
  for (int64_t i = 0; i < n * heads; ++i) std::copy_n(out.q.data() + i * qk + nope, rope, q_pe.data() + i * rope);
  rope_in_place(c, q_pe, inv_freq, positions, heads);
  rope_in_place(c, k_pe, inv_freq, positions, 1);
  for (int64_t i = 0; i < n * heads; ++i) std::copy_n(q_pe.data() + i * rope, rope, out.q.data() + i * qk + nope);

  out.latent.resize(static_cast<size_t>(n * row_width));
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(c_kv.data() + t * latent, latent, out.latent.data() + t * row_width);
    std::copy_n(k_pe.data() + t * rope, rope, out.latent.data() + t * row_width + latent);
  }
  return out;
}

QkvProjections mla_project(const ModelConfig& c, const LayerWeights& w, std::span<const float> inv_freq,
                           std::span<const float> x, std::span<const int64_t> positions) {
  MlaLatentProjections projected = mla_project_latent(c, w, inv_freq, x, positions);
  const int64_t n = static_cast<int64_t>(positions.size()), heads = c.num_attention_heads;
  const int64_t nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, qk = c.head_dim, vd = c.v_head_dim;
  const int64_t latent = c.kv_lora_rank, row_width = latent + rope, kv_width = nope + vd;

  std::vector<float> c_kv(static_cast<size_t>(n * latent));  // [n, kv_lora_rank], normed
  for (int64_t t = 0; t < n; ++t) std::copy_n(projected.latent.data() + t * row_width, latent, c_kv.data() + t * latent);
  std::vector<float> kv(static_cast<size_t>(n * heads * kv_width));  // [n, heads, nope + v_head_dim]
  cpu::linear(kv.data(), c_kv.data(), w.kv_b_proj.data(), nullptr, n, latent, heads * kv_width);

  QkvProjections out;
  out.q = std::move(projected.q);
  out.k.resize(static_cast<size_t>(n * heads * qk));
  out.v.resize(static_cast<size_t>(n * heads * vd));
  for (int64_t t = 0; t < n; ++t) {
    const float* k_pe = projected.latent.data() + t * row_width + latent;  // [rope], shared by every head
    for (int64_t hd = 0; hd < heads; ++hd) {
      const float* head_kv = kv.data() + (t * heads + hd) * kv_width;
      float* key = out.k.data() + (t * heads + hd) * qk;
      std::copy_n(head_kv, nope, key);
      std::copy_n(k_pe, rope, key + nope);
      std::copy_n(head_kv + nope, vd, out.v.data() + (t * heads + hd) * vd);
    }
  }
  return out;
}

}  // namespace tachyon::model
