// The absorbed MLA attention on the CPU (see mla_attention.h): one loop, shared by the contiguous
// and the paged cache, which differ only in where token j's latent row lives.
#include "tachyon/kernels/mla_attention.h"

#include <vector>

#include "tachyon/kernels/cpu/parallel_for.h"
#include "tachyon/kernels/cpu/softmax_weighted_sum.h"

namespace tachyon::kernels::cpu {
namespace {

template <typename LatentRow>
void mla_attention_impl(float* out, const float* q, const float* latent_cache, const MlaAttentionShape& s,
                        LatentRow latent_row) {
  const GemmIsa isa = best_gemm_isa();
  const int64_t rank = s.kv_lora_rank, row_width = s.kv_lora_rank + s.rope_dim;
  parallel_for(s.num_queries * s.num_heads, s.num_queries * s.num_heads > 1, [&](int64_t query_head) {
    const int64_t i = query_head / s.num_heads, h = query_head % s.num_heads;
    const int64_t position = s.first_position + i;
    const float* q_latent = q + (i * s.num_heads + h) * row_width;  // [rank]: q_nope @ W_uk
    const float* q_pe = q_latent + rank;                             // [rope_dim]
    std::vector<float> scores(static_cast<size_t>(position + 1));
    for (int64_t t = 0; t <= position; ++t) {
      const float* c_kv = latent_cache + latent_row(t) * row_width;
      const float* k_pe = c_kv + rank;
      float nope_part = 0.0f, rope_part = 0.0f;
      for (int64_t d = 0; d < rank; ++d) nope_part += q_latent[d] * c_kv[d];
      for (int64_t d = 0; d < s.rope_dim; ++d) rope_part += q_pe[d] * k_pe[d];
      scores[static_cast<size_t>(t)] = (nope_part + rope_part) * s.scale;
    }
    // The value of token t is its c_kv: the output stays in the latent space until W_uv.
    softmax_weighted_sum(out + (i * s.num_heads + h) * rank, scores, rank, ValueSum::kMultiplyThenAdd, isa,
                         [&](int64_t t) { return latent_cache + latent_row(t) * row_width; });
  });
}

}  // namespace

void mla_attention(float* out, const float* q, const float* latent_cache, const MlaAttentionShape& s) {
  mla_attention_impl(out, q, latent_cache, s, [](int64_t t) { return t; });
}

void paged_mla_attention(float* out, const float* q, const float* latent_cache, const int32_t* block_table,
                         int32_t block_size, const MlaAttentionShape& s) {
  mla_attention_impl(out, q, latent_cache, s, [block_table, block_size](int64_t t) {
    return static_cast<int64_t>(block_table[t / block_size]) * block_size + t % block_size;
  });
}

}  // namespace tachyon::kernels::cpu
