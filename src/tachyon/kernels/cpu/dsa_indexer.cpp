// The lightning indexer on the CPU (see dsa_indexer.h): one scoring loop shared by the contiguous
// and the paged cache, which differ only in where token s's index key lives, and a selection
// that sorts each query's candidates.
#include "tachyon/kernels/dsa_indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "tachyon/kernels/cpu/parallel_for.h"

namespace tachyon::kernels::cpu {
namespace {

template <typename KeyRow>
void index_scores_impl(float* scores, const float* q, const float* weights, const float* key_cache,
                       const DsaIndexerShape& s, KeyRow key_row) {
  const int64_t total = s.first_position + s.num_queries;
  parallel_for(s.num_queries, s.num_queries > 1, [&](int64_t i) {
    const int64_t position = s.first_position + i;
    float* row = scores + i * total;
    for (int64_t t = 0; t < total; ++t) {
      if (t > position) {
        row[t] = -INFINITY;  // causal: a query never selects a later token
        continue;
      }
      const float* key = key_cache + key_row(t) * s.head_dim;
      float score = 0.0f;
      for (int64_t h = 0; h < s.num_heads; ++h) {
        const float* q_head = q + (i * s.num_heads + h) * s.head_dim;
        float dot = 0.0f;
        for (int64_t d = 0; d < s.head_dim; ++d) dot += q_head[d] * key[d];
        score += weights[i * s.num_heads + h] * std::max(dot * s.scale, 0.0f);
      }
      row[t] = score;
    }
  });
}

}  // namespace

void dsa_index_scores(float* scores, const float* q, const float* weights, const float* key_cache,
                      const DsaIndexerShape& s) {
  index_scores_impl(scores, q, weights, key_cache, s, [](int64_t t) { return t; });
}

void paged_dsa_index_scores(float* scores, const float* q, const float* weights, const float* key_cache,
                            const int32_t* block_table, int32_t block_size, const DsaIndexerShape& s) {
  index_scores_impl(scores, q, weights, key_cache, s, [block_table, block_size](int64_t t) {
    return static_cast<int64_t>(block_table[t / block_size]) * block_size + t % block_size;
  });
}

void dsa_select_topk(int32_t* kept, const float* scores, const DsaIndexerShape& s) {
  const int64_t total = s.first_position + s.num_queries;
  for (int64_t i = 0; i < s.num_queries; ++i) {
    const int64_t candidates = s.first_position + i + 1;
    const int64_t count = std::min(s.topk, candidates);
    const float* row = scores + i * total;
    std::vector<int32_t> order(static_cast<size_t>(candidates));
    std::iota(order.begin(), order.end(), 0);
    // Highest score first; equal scores keep position order (stable), so the earlier token wins.
    std::stable_sort(order.begin(), order.end(), [row](int32_t a, int32_t b) { return row[a] > row[b]; });
    order.resize(static_cast<size_t>(count));
    std::sort(order.begin(), order.end());
    int32_t* out = kept + i * s.topk;
    std::fill(out, out + s.topk, -1);
    std::copy(order.begin(), order.end(), out);
  }
}

}  // namespace tachyon::kernels::cpu
