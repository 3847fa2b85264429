// The absorbed MLA form on the CPU (see mla_absorbed.h): the per-head products with W_uk and
// W_uv read kv_b_proj's rows in place, as plain loops over tokens and heads.
#include "tachyon/model/mla_absorbed.h"

#include <algorithm>

#include "tachyon/base/check.h"

namespace tachyon::model {

std::vector<float> absorb_queries(const ModelConfig& c, const LayerWeights& w, std::span<const float> q) {
  const int64_t heads = c.num_attention_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim;
  const int64_t rank = c.kv_lora_rank, qk = c.head_dim, kv_width = nope + c.v_head_dim, out_width = rank + rope;
  TACHYON_CHECK(static_cast<int64_t>(q.size()) % (heads * qk) == 0)
      << "absorb_queries: " << q.size() << " values are not whole tokens of " << heads << " heads x " << qk;
  const int64_t n = static_cast<int64_t>(q.size()) / (heads * qk);
  std::vector<float> out(static_cast<size_t>(n * heads * out_width), 0.0f);  // [n, heads, rank + rope]
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* q_nope = q.data() + (t * heads + h) * qk;
      const float* w_uk = w.kv_b_proj.data() + h * kv_width * rank;  // [nope, rank]: head h's first rows
      float* q_latent = out.data() + (t * heads + h) * out_width;
      for (int64_t d = 0; d < nope; ++d) {
        for (int64_t r = 0; r < rank; ++r) q_latent[r] += q_nope[d] * w_uk[d * rank + r];
      }
      std::copy_n(q_nope + nope, rope, q_latent + rank);  // q_pe passes through
    }
  }
  return out;
}

std::vector<float> expand_attended(const ModelConfig& c, const LayerWeights& w, std::span<const float> out_latent) {
  const int64_t heads = c.num_attention_heads, nope = c.qk_nope_head_dim, vd = c.v_head_dim;
  const int64_t rank = c.kv_lora_rank, kv_width = nope + vd;
  TACHYON_CHECK(static_cast<int64_t>(out_latent.size()) % (heads * rank) == 0)
      << "expand_attended: " << out_latent.size() << " values are not whole tokens of " << heads << " heads x "
      << rank;
  const int64_t n = static_cast<int64_t>(out_latent.size()) / (heads * rank);
  std::vector<float> out(static_cast<size_t>(n * heads * vd));  // [n, heads, v_head_dim]
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* latent = out_latent.data() + (t * heads + h) * rank;
      const float* w_uv = w.kv_b_proj.data() + (h * kv_width + nope) * rank;  // [v_head_dim, rank]
      for (int64_t e = 0; e < vd; ++e) {
        float sum = 0.0f;
        for (int64_t r = 0; r < rank; ++r) sum += w_uv[e * rank + r] * latent[r];
        out[static_cast<size_t>((t * heads + h) * vd + e)] = sum;
      }
    }
  }
  return out;
}

std::vector<float> mla_attend_absorbed(const ModelConfig& c, const LayerWeights& w, int64_t layer,
                                       const MlaLatentProjections& projected, AttentionBackend& attention) {
  TACHYON_CHECK(attention.mla_form() == MlaAttentionForm::kAbsorbed)
      << "mla_attend_absorbed: the attention backend caches the decompressed form";
  const int64_t n = static_cast<int64_t>(projected.latent.size()) / (c.kv_lora_rank + c.qk_rope_head_dim);
  attention.store_latent(layer, projected.latent);
  const std::vector<float> q_latent = absorb_queries(c, w, projected.q);
  std::vector<float> out_latent(static_cast<size_t>(n * c.num_attention_heads * c.kv_lora_rank));
  attention.attend_latent(layer, q_latent, out_latent);
  return expand_attended(c, w, out_latent);
}

std::vector<float> mla_attend_sparse(const ModelConfig& c, const LayerWeights& w, int64_t layer,
                                     const MlaLatentProjections& projected, std::span<const int32_t> kept,
                                     AttentionBackend& attention) {
  TACHYON_CHECK(attention.mla_form() == MlaAttentionForm::kAbsorbed)
      << "mla_attend_sparse: the attention backend caches the decompressed form";
  const int64_t n = static_cast<int64_t>(projected.latent.size()) / (c.kv_lora_rank + c.qk_rope_head_dim);
  TACHYON_CHECK(static_cast<int64_t>(kept.size()) == n * c.index_topk)
      << "mla_attend_sparse: " << kept.size() << " kept entries for " << n << " tokens of top-" << c.index_topk;
  const std::vector<float> q_latent = absorb_queries(c, w, projected.q);
  std::vector<float> out_latent(static_cast<size_t>(n * c.num_attention_heads * c.kv_lora_rank));
  attention.attend_latent_sparse(layer, q_latent, kept, out_latent);
  return expand_attended(c, w, out_latent);
}

}  // namespace tachyon::model
