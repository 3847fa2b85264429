#include "tachyon/kernels/attention.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tachyon/kernels/cpu/fixed_order_gemm.h"
#include "tachyon/kernels/cpu/parallel_for.h"
#include "tachyon/kernels/cpu/softmax_weighted_sum.h"

namespace tachyon::kernels::cpu {
namespace {

// The one attention loop; `key_row(j)` says where key/value j lives, which is all that differs
// between a contiguous and a paged cache. Each (query, head) is computed alone, so a query's
// output does not depend on the other queries of the call (a decode row equals the same row of a
// verify step); its q.k scores use the fixed-order dot product of fixed_order_gemm.h and its
// weighted sum of values fused multiply-adds (softmax_weighted_sum.h), vectorized on every
// instruction set alike.
template <typename KeyRow>
void attention_impl(float* out, const float* q, const float* k_cache, const float* v_cache, const AttentionShape& s,
                    KeyRow key_row) {
  const GemmIsa isa = best_gemm_isa();
  const int64_t group = s.num_heads / s.num_kv_heads;
  const int64_t v_dim = s.v_head_dim > 0 ? s.v_head_dim : s.head_dim;
  const int64_t kv_stride = s.num_kv_heads * s.head_dim;
  const int64_t v_stride = s.num_kv_heads * v_dim;
  parallel_for(s.num_queries * s.num_heads, s.num_queries * s.num_heads > 1, [&](int64_t query_head) {
    const int64_t i = query_head / s.num_heads, h = query_head % s.num_heads;
    const int64_t position = s.first_position + i;
    const int64_t first_key = s.sliding_window > 0 ? std::max<int64_t>(0, position - s.sliding_window + 1) : 0;
    const int64_t kv_head = h / group;
    const float* qv = q + (i * s.num_heads + h) * s.head_dim;
    std::vector<float> scores(static_cast<size_t>(position - first_key + 1));
    for (int64_t j = first_key; j <= position; ++j) {
      const float* kv = k_cache + key_row(j) * kv_stride + kv_head * s.head_dim;
      scores[static_cast<size_t>(j - first_key)] = fixed_order_dot(isa, qv, kv, s.head_dim) * s.scale;
    }
    softmax_weighted_sum(out + (i * s.num_heads + h) * v_dim, scores, v_dim, ValueSum::kFused, isa,
                         [&](int64_t j) { return v_cache + key_row(first_key + j) * v_stride + kv_head * v_dim; });
  });
}

}  // namespace

void attention(float* out, const float* q, const float* k_cache, const float* v_cache, const AttentionShape& s) {
  attention_impl(out, q, k_cache, v_cache, s, [](int64_t j) { return j; });
}

void paged_attention(float* out, const float* q, const float* k_cache, const float* v_cache, const int32_t* block_table,
                     int32_t block_size, const AttentionShape& s) {
  attention_impl(out, q, k_cache, v_cache, s, [block_table, block_size](int64_t j) {
    return static_cast<int64_t>(block_table[j / block_size]) * block_size + j % block_size;
  });
}

void store_rows_paged(float* cache, const float* rows, const int64_t* slot_mapping, int64_t num_tokens,
                      int64_t width) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::memcpy(cache + slot_mapping[t] * width, rows + t * width, sizeof(float) * static_cast<size_t>(width));
  }
}

void store_kv_paged(float* k_cache, float* v_cache, const float* k, const float* v, const int64_t* slot_mapping,
                    int64_t num_tokens, int64_t kv_size) {
  store_rows_paged(k_cache, k, slot_mapping, num_tokens, kv_size);
  store_rows_paged(v_cache, v, slot_mapping, num_tokens, kv_size);
}

}  // namespace tachyon::kernels::cpu
