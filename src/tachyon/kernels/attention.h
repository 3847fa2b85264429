// Causal grouped-query attention over a contiguous per-sequence KV cache. The reference for the
// paged CUDA kernels: one loop per (query, head), softmax in f32 with the max subtracted; the q.k
// dot products and the weighted sum of values in the fixed order of kernels/cpu/fixed_order_gemm.h,
// so a query's output is the same whatever other queries share the call.
#pragma once

#include <cstdint>

namespace tachyon::kernels::cpu {

struct AttentionShape {
  int64_t num_queries = 0;    // new tokens of this sequence
  int64_t first_position = 0; // position of query 0; query i sits at first_position + i
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;   // num_heads % num_kv_heads == 0; head h reads kv head h / (num_heads / num_kv_heads)
  int64_t head_dim = 0;
  int64_t sliding_window = 0; // 0: full causal; else query at p sees keys in (p - window, p]
  float scale = 1.0f;         // usually 1 / sqrt(head_dim)
  int64_t v_head_dim = 0;     // value (and output) head width; 0: head_dim. MLA's differs from q/k's.
};

// out: [num_queries, num_heads, v_head_dim]; q: [num_queries, num_heads, head_dim];
// k_cache: [>= first_position + num_queries, num_kv_heads, head_dim], v_cache the same with
// v_head_dim; keys of positions 0 .. first_position + num_queries - 1 already written.
void attention(float* out, const float* q, const float* k_cache, const float* v_cache, const AttentionShape& shape);

// The same for one sequence of a paged cache: k_cache, v_cache: [num_blocks, block_size,
// num_kv_heads, head_dim]; key j lives at row block_table[j / block_size] * block_size +
// j % block_size. block_table: [ceil((first_position + num_queries) / block_size)].
void paged_attention(float* out, const float* q, const float* k_cache, const float* v_cache, const int32_t* block_table,
                     int32_t block_size, const AttentionShape& shape);

// Writes K/V rows into a paged cache: k, v: [num_tokens, kv_size]; slot_mapping: [num_tokens]
// (row of each token); k_cache, v_cache: [num_slots, kv_size].
void store_kv_paged(float* k_cache, float* v_cache, const float* k, const float* v, const int64_t* slot_mapping,
                    int64_t num_tokens, int64_t kv_size);
// One of the two: rows: [num_tokens, width] into cache: [num_slots, width] (K and V of different
// widths, as MLA's, are stored by two calls).
void store_rows_paged(float* cache, const float* rows, const int64_t* slot_mapping, int64_t num_tokens, int64_t width);

}  // namespace tachyon::kernels::cpu
