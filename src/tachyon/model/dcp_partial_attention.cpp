// DCP's partial latent attention and LSE merge (see dcp_partial_attention.h): plain loops.
#include "tachyon/model/dcp_partial_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tachyon::model {

void partial_latent_attention(float* out, float* lse, const float* q, const float* latent_cache,
                              std::span<const int64_t> rows, const kernels::cpu::MlaAttentionShape& s) {
  const int64_t rank = s.kv_lora_rank, row_width = s.kv_lora_rank + s.rope_dim;
  const size_t count = rows.size();
  std::vector<float> scores(count);
  for (int64_t h = 0; h < s.num_heads; ++h) {
    float* o = out + h * rank;
    std::fill(o, o + rank, 0.0f);
    if (count == 0) {  // this rank holds none of the query's tokens: weight 0 in the merge
      lse[h] = -INFINITY;
      continue;
    }
    const float* q_latent = q + h * row_width;
    const float* q_pe = q_latent + rank;
    float max_score = -INFINITY;
    for (size_t j = 0; j < count; ++j) {  // the absorbed kernel's score, term for term
      const float* c_kv = latent_cache + rows[j] * row_width;
      const float* k_pe = c_kv + rank;
      float nope_part = 0.0f, rope_part = 0.0f;
      for (int64_t d = 0; d < rank; ++d) nope_part += q_latent[d] * c_kv[d];
      for (int64_t d = 0; d < s.rope_dim; ++d) rope_part += q_pe[d] * k_pe[d];
      scores[j] = (nope_part + rope_part) * s.scale;
      max_score = std::max(max_score, scores[j]);
    }
    float denominator = 0.0f;
    for (float& score : scores) {
      score = std::exp(score - max_score);
      denominator += score;
    }
    for (size_t j = 0; j < count; ++j) {
      const float weight = scores[j] / denominator;
      const float* c_kv = latent_cache + rows[j] * row_width;
      for (int64_t d = 0; d < rank; ++d) o[d] += weight * c_kv[d];
    }
    lse[h] = max_score + std::log(denominator);
  }
}

void merge_attention_partials(float* out, const float* partial_out, const float* partial_lse,
                              const PartialsShape& s) {
  const int64_t per_source_lse = s.num_tokens * s.all_heads;
  std::vector<float> weights(static_cast<size_t>(s.sources));
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t head = s.head_begin + h, lse_index = t * s.all_heads + head;
      float max_lse = -INFINITY;
      for (int64_t r = 0; r < s.sources; ++r) max_lse = std::max(max_lse, partial_lse[r * per_source_lse + lse_index]);
      float total = 0.0f;
      for (int64_t r = 0; r < s.sources; ++r) {
        const float lse = partial_lse[r * per_source_lse + lse_index];
        weights[static_cast<size_t>(r)] = lse == -INFINITY ? 0.0f : std::exp(lse - max_lse);
        total += weights[static_cast<size_t>(r)];
      }
      float* o = out + (t * s.heads + h) * s.width;
      std::fill(o, o + s.width, 0.0f);
      for (int64_t r = 0; r < s.sources; ++r) {
        const float weight = weights[static_cast<size_t>(r)] / total;
        if (weight == 0.0f) continue;
        const float* partial = partial_out + (r * per_source_lse + lse_index) * s.width;
        for (int64_t d = 0; d < s.width; ++d) o[d] += weight * partial[d];
      }
    }
  }
}

}  // namespace tachyon::model
