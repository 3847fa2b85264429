// MLA's absorbed attention (mla_attention.h) over a chosen subset of the cached tokens: DeepSeek
// sparse attention (DSA, DeepSeek-V3.2), where the lightning indexer (dsa_indexer.h) picks, per
// query token, the index_topk tokens it may attend. Identical to mla_attention except that the
// softmax runs over the listed tokens instead of every token up to the query's position:
//   score(i, h, t) = scale * (q[i, h, :rank] . c_kv[t] + q[i, h, rank:] . k_pe[t]),  t in kept[i]
//   out[i, h]      = sum_{t in kept[i]} softmax_t(score) * c_kv[t]
// transformers computes the same by adding -inf to the causal mask outside the kept set.
// Tokens are visited in the list's order; listed in ascending position and covering every token,
// this is the dense kernel's loop exactly.
// Test: tests/unit/test_dsa.cpp (against a double-precision reference over the kept set).
#pragma once

#include <cstdint>

#include "tachyon/kernels/mla_attention.h"

namespace tachyon::kernels::cpu {

// out: [num_queries, num_heads, kv_lora_rank]; q: [num_queries, num_heads, kv_lora_rank + rope_dim];
// latent_cache: as mla_attention's; kept: [num_queries, kept_width] token positions, each <= the
// query's position, -1 entries skipped (at least one entry per query is a token).
void sparse_mla_attention(float* out, const float* q, const float* latent_cache, const int32_t* kept,
                          int64_t kept_width, const MlaAttentionShape& shape);

// The same for one sequence of a paged cache (rows as paged_mla_attention finds them).
void paged_sparse_mla_attention(float* out, const float* q, const float* latent_cache, const int32_t* kept,
                                int64_t kept_width, const int32_t* block_table, int32_t block_size,
                                const MlaAttentionShape& shape);

}  // namespace tachyon::kernels::cpu
