// Causal grouped-query attention over a contiguous per-sequence KV cache. The reference for the
// paged CUDA kernels: plain loops, softmax in f32 with the max subtracted.
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
};

// out: [num_queries, num_heads, head_dim]; q: [num_queries, num_heads, head_dim];
// k_cache, v_cache: [>= first_position + num_queries, num_kv_heads, head_dim], keys of positions
// 0 .. first_position + num_queries - 1 already written.
void attention(float* out, const float* q, const float* k_cache, const float* v_cache, const AttentionShape& shape);

}  // namespace tachyon::kernels::cpu
