// The sparse absorbed MLA attention on the CPU (see sparse_mla_attention.h): mla_attention's loop
// with the token range replaced by each query's kept list. Shared by the contiguous and the paged
// cache, which differ only in where token t's latent row lives.
#include "tachyon/kernels/sparse_mla_attention.h"

#include <vector>

#include "tachyon/kernels/cpu/parallel_for.h"
#include "tachyon/kernels/cpu/softmax_weighted_sum.h"

namespace tachyon::kernels::cpu {
namespace {

template <typename LatentRow>
void sparse_mla_attention_impl(float* out, const float* q, const float* latent_cache, const int32_t* kept,
                               int64_t kept_width, const MlaAttentionShape& s, LatentRow latent_row) {
  const GemmIsa isa = best_gemm_isa();
  const int64_t rank = s.kv_lora_rank, row_width = s.kv_lora_rank + s.rope_dim;
  parallel_for(s.num_queries * s.num_heads, s.num_queries * s.num_heads > 1, [&](int64_t query_head) {
    const int64_t i = query_head / s.num_heads, h = query_head % s.num_heads;
    const int32_t* tokens = kept + i * kept_width;  // [kept_width], -1 past the kept ones
    const float* q_latent = q + (i * s.num_heads + h) * row_width;
    const float* q_pe = q_latent + rank;
    // The kept tokens' latent rows, in the list's order, the -1 entries dropped.
    std::vector<const float*> rows;
    rows.reserve(static_cast<size_t>(kept_width));
    for (int64_t j = 0; j < kept_width; ++j) {
      if (tokens[j] >= 0) rows.push_back(latent_cache + latent_row(tokens[j]) * row_width);
    }
    std::vector<float> scores(rows.size());
    for (size_t j = 0; j < rows.size(); ++j) {
      const float* c_kv = rows[j];
      const float* k_pe = c_kv + rank;
      float nope_part = 0.0f, rope_part = 0.0f;
      for (int64_t d = 0; d < rank; ++d) nope_part += q_latent[d] * c_kv[d];
      for (int64_t d = 0; d < s.rope_dim; ++d) rope_part += q_pe[d] * k_pe[d];
      scores[j] = (nope_part + rope_part) * s.scale;
    }
    softmax_weighted_sum(out + (i * s.num_heads + h) * rank, scores, rank, ValueSum::kMultiplyThenAdd, isa,
                         [&](int64_t j) { return rows[static_cast<size_t>(j)]; });
  });
}

}  // namespace

void sparse_mla_attention(float* out, const float* q, const float* latent_cache, const int32_t* kept,
                          int64_t kept_width, const MlaAttentionShape& s) {
  sparse_mla_attention_impl(out, q, latent_cache, kept, kept_width, s, [](int64_t t) { return t; });
}

void paged_sparse_mla_attention(float* out, const float* q, const float* latent_cache, const int32_t* kept,
                                int64_t kept_width, const int32_t* block_table, int32_t block_size,
                                const MlaAttentionShape& s) {
  sparse_mla_attention_impl(out, q, latent_cache, kept, kept_width, s, [block_table, block_size](int64_t t) {
    return static_cast<int64_t>(block_table[t / block_size]) * block_size + t % block_size;
  });
}

}  // namespace tachyon::kernels::cpu
