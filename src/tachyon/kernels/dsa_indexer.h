// The lightning indexer of DeepSeek sparse attention (DSA, DeepSeek-V3.2): which earlier tokens
// each new token's latent attention reads. Per query token t at position p and cached token s <= p:
//   I(t, s) = sum_h w[t, h] * relu(scale * q[t, h] . k[s])
// with index_n_heads query heads q of index_head_dim, one index key k per token shared by the
// heads (cached beside the MLA latent), and per-head weights w that the model computes from the
// hidden state (model/dsa_indexer.h folds index_n_heads^-0.5 into them; scale = index_head_dim^-0.5).
// The top index_topk s by I(t, s) are kept, all of them when p + 1 <= index_topk.
// Why the kept set is returned sorted by position: with every token kept, the sparse attention
// (sparse_mla_attention.h) then sums in exactly the dense kernel's order, so DSA with a large
// top-k reproduces DeepSeek-V3's logits bit for bit. Ties in I go to the earlier token (torch's
// topk leaves their order unspecified).
// The reference for the GPU's indexer kernels: plain loops in f32, no fp8 and no Hadamard
// rotation (an orthonormal rotation of q and k leaves q . k unchanged; the reference implementation
// needs it only to make fp8 quantization accurate).
// Test: tests/unit/test_dsa.cpp (against a double-precision reimplementation).
#pragma once

#include <cstdint>

namespace tachyon::kernels::cpu {

struct DsaIndexerShape {
  int64_t num_queries = 0;     // new tokens of this sequence
  int64_t first_position = 0;  // position of query 0; query i sits at first_position + i
  int64_t num_heads = 0;       // index_n_heads
  int64_t head_dim = 0;        // index_head_dim
  int64_t topk = 0;            // index_topk
  float scale = 1.0f;          // index_head_dim^-0.5, applied to q . k before the relu
};

// scores: [num_queries, first_position + num_queries], row i's entries s > first_position + i set
// to -inf (causal); q: [num_queries, num_heads, head_dim]; weights: [num_queries, num_heads];
// key_cache: [>= first_position + num_queries, head_dim], rows 0 .. first_position + num_queries - 1
// written.
void dsa_index_scores(float* scores, const float* q, const float* weights, const float* key_cache,
                      const DsaIndexerShape& shape);

// The same for one sequence of a paged cache: key_cache: [num_blocks * block_size, head_dim];
// token j lives at row block_table[j / block_size] * block_size + j % block_size.
void paged_dsa_index_scores(float* scores, const float* q, const float* weights, const float* key_cache,
                            const int32_t* block_table, int32_t block_size, const DsaIndexerShape& shape);

// kept: [num_queries, topk] positions of the kept tokens, ascending, -1 past the
// min(topk, first_position + i + 1) kept by query i; scores as dsa_index_scores writes them.
void dsa_select_topk(int32_t* kept, const float* scores, const DsaIndexerShape& shape);

}  // namespace tachyon::kernels::cpu
