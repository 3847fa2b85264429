#include "tachyon/kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "tachyon/kernels/cpu/fixed_order_gemm.h"
#include "tachyon/kernels/cpu/parallel_for.h"
#include "tachyon/kernels/cpu/softmax_weighted_sum.h"

namespace tachyon::kernels::cpu {
namespace {

// The one attention loop; `key_row(j)` says where key/value j lives, which is all that differs
// between a contiguous and a paged cache. Each (query, head) is computed alone, so a query's
// output does not depend on the other queries of the call (a decode row equals the same row of a
// verify step); its q.k scores are fixed-order dot products (fixed_order_gemm.h) and its weighted
// sum of values fused multiply-adds in the keys' order (fused_weighted_sum), the same bits on
// every instruction set. Only the order in which the work is visited is blocked: a task takes a
// few queries and the heads that share a KV head, and walks the keys a cache-sized chunk at a
// time, every query-head of the task using the chunk while it is near (streaming the whole
// cache once per query and head made a prefill chunk wait on memory).
template <typename KeyRow>
void attention_impl(float* out, const float* q, const float* k_cache, const float* v_cache, const AttentionShape& s,
                    KeyRow key_row) {
  constexpr int64_t kQueriesPerTask = 8;
  const GemmIsa isa = best_gemm_isa();
  const int64_t group = s.num_heads / s.num_kv_heads;
  const int64_t v_dim = s.v_head_dim > 0 ? s.v_head_dim : s.head_dim;
  const int64_t kv_stride = s.num_kv_heads * s.head_dim;
  const int64_t v_stride = s.num_kv_heads * v_dim;
  // Keys per chunk: a chunk's key and value rows (16 KiB each at head_dim 64) stay in L1.
  const int64_t chunk = std::max<int64_t>(16, 4096 / std::max(s.head_dim, v_dim) / 16 * 16);
  const int64_t num_keys = s.first_position + s.num_queries;  // the last query sees them all
  // keys[kv_head * num_keys + j], values[...]: where key and value j of a KV head are, found once.
  std::vector<const float*> keys(static_cast<size_t>(s.num_kv_heads * num_keys));
  std::vector<const float*> values(keys.size());
  for (int64_t j = 0; j < num_keys; ++j) {
    const int64_t row = key_row(j);
    for (int64_t kv_head = 0; kv_head < s.num_kv_heads; ++kv_head) {
      keys[static_cast<size_t>(kv_head * num_keys + j)] = k_cache + row * kv_stride + kv_head * s.head_dim;
      values[static_cast<size_t>(kv_head * num_keys + j)] = v_cache + row * v_stride + kv_head * v_dim;
    }
  }
  // A task: up to kQueriesPerTask queries x the heads of one KV head; or one head each, where
  // that leaves the threads idle (a decode step's lone query).
  const int64_t query_blocks = (s.num_queries + kQueriesPerTask - 1) / kQueriesPerTask;
  const int64_t heads_per_task = query_blocks * s.num_kv_heads >= omp_get_max_threads() ? group : 1;
  const int64_t head_sets = s.num_heads / heads_per_task;
  parallel_for(query_blocks * head_sets, query_blocks * head_sets > 1, [&](int64_t task) {
    const int64_t first_query = task / head_sets * kQueriesPerTask, first_head = task % head_sets * heads_per_task;
    const int64_t rows = std::min(kQueriesPerTask, s.num_queries - first_query) * heads_per_task;
    // Query-head r: query first_query + r / heads_per_task, head first_head + r % heads_per_task;
    // it sees keys [first_key(r), last_key(r)], all of one KV head.
    const float* const* head_keys = &keys[static_cast<size_t>(first_head / group * num_keys)];
    const float* const* head_values = &values[static_cast<size_t>(first_head / group * num_keys)];
    auto query_head = [&](int64_t r) {
      return (first_query + r / heads_per_task) * s.num_heads + first_head + r % heads_per_task;
    };
    auto last_key = [&](int64_t r) { return s.first_position + first_query + r / heads_per_task; };
    auto first_key = [&](int64_t r) {
      return s.sliding_window > 0 ? std::max<int64_t>(0, last_key(r) - s.sliding_window + 1) : 0;
    };
    thread_local std::vector<float> scores;  // query-head r's from scores[offsets[r]]
    thread_local std::vector<int64_t> offsets;
    offsets.assign(1, 0);
    for (int64_t r = 0; r < rows; ++r) offsets.push_back(offsets.back() + last_key(r) - first_key(r) + 1);
    scores.resize(static_cast<size_t>(offsets.back()));
    auto scores_of = [&](int64_t r, int64_t key) {  // where query-head r's score for `key` is
      return &scores[static_cast<size_t>(offsets[static_cast<size_t>(r)] + key - first_key(r))];
    };
    // visit(r, first, count) for each chunk of keys, each query-head's part of it.
    auto for_each_chunk = [&](const auto& visit) {
      for (int64_t begin = first_key(0); begin <= last_key(rows - 1); begin += chunk) {
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t lo = std::max(begin, first_key(r)), hi = std::min(begin + chunk, last_key(r) + 1);
          if (lo < hi) visit(r, lo, hi - lo);
        }
      }
    };
    for_each_chunk([&](int64_t r, int64_t first, int64_t count) {
      fixed_order_dots(isa, scores_of(r, first), q + query_head(r) * s.head_dim, head_keys + first, count,
                       s.head_dim, s.scale);
    });
    for (int64_t r = 0; r < rows; ++r) {
      const auto count = static_cast<size_t>(last_key(r) - first_key(r) + 1);
      softmax_in_place(std::span<float>(scores_of(r, first_key(r)), count));
      std::fill_n(out + query_head(r) * v_dim, v_dim, 0.0f);
    }
    for_each_chunk([&](int64_t r, int64_t first, int64_t count) {
      fused_weighted_sum(isa, out + query_head(r) * v_dim, scores_of(r, first), head_values + first, count, v_dim);
    });
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
