// The paged attention kernel against the contiguous one (the spec), on awkward sizes: a
// sequence's keys scattered over shuffled blocks must give the same output bit for bit. And the
// softmax + weighted sum every CPU attention kernel ends with (kernels/cpu/softmax_weighted_sum.h).
#include "tachyon/kernels/attention.h"
#include "tachyon/kernels/cpu/softmax_weighted_sum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <span>
#include <tuple>
#include <vector>

namespace tachyon::kernels::cpu {
namespace {

TEST(PagedAttention, MatchesContiguousOnScatteredBlocks) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  struct Case {
    int64_t queries, first_position, heads, kv_heads, head_dim, window;
    int32_t block_size;
  };
  for (const Case& c : {Case{1, 96, 4, 2, 16, 0, 16}, Case{17, 0, 8, 1, 8, 0, 5}, Case{7, 40, 6, 3, 12, 9, 3},
                        Case{97, 3, 2, 2, 32, 0, 7}}) {
    const int64_t total = c.first_position + c.queries;
    const int64_t kv_size = c.kv_heads * c.head_dim;
    std::vector<float> q(static_cast<size_t>(c.queries * c.heads * c.head_dim));
    std::vector<float> k(static_cast<size_t>(total * kv_size)), v(k.size());
    for (auto* buffer : {&q, &k, &v}) {
      for (float& x : *buffer) x = normal(rng);
    }
    AttentionShape shape{c.queries, c.first_position, c.heads, c.kv_heads, c.head_dim, c.window,
                         1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    std::vector<float> expected(q.size(), NAN);
    attention(expected.data(), q.data(), k.data(), v.data(), shape);

    // Scatter the keys over a shuffled block table in a cache twice as large.
    const int64_t blocks_needed = (total + c.block_size - 1) / c.block_size;
    std::vector<int32_t> pool(static_cast<size_t>(2 * blocks_needed));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<int32_t> table(pool.begin(), pool.begin() + blocks_needed);
    std::vector<float> k_cache(pool.size() * static_cast<size_t>(c.block_size * kv_size), NAN), v_cache(k_cache.size(), NAN);
    std::vector<int64_t> slots(static_cast<size_t>(total));
    for (int64_t j = 0; j < total; ++j) slots[static_cast<size_t>(j)] = int64_t{table[static_cast<size_t>(j / c.block_size)]} * c.block_size + j % c.block_size;
    store_kv_paged(k_cache.data(), v_cache.data(), k.data(), v.data(), slots.data(), total, kv_size);

    std::vector<float> got(q.size(), NAN);  // poisoned: every element must be written
    paged_attention(got.data(), q.data(), k_cache.data(), v_cache.data(), table.data(), c.block_size, shape);
    ASSERT_EQ(got, expected) << "queries " << c.queries << " block_size " << c.block_size;
  }
}

// ---- softmax_weighted_sum --------------------------------------------------------------------

struct SoftmaxCase {
  std::vector<float> scores;  // [count]
  std::vector<float> values;  // [count, width]
  int64_t width;
};

SoftmaxCase softmax_case(int64_t count, int64_t width, float score_offset, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  SoftmaxCase c{std::vector<float>(static_cast<size_t>(count)), std::vector<float>(static_cast<size_t>(count * width)),
                width};
  for (float& x : c.scores) x = 3.0f * normal(rng) + score_offset;
  for (float& x : c.values) x = normal(rng);
  return c;
}

std::vector<float> run_softmax(const SoftmaxCase& c, ValueSum sum, GemmIsa isa) {
  std::vector<float> scores = c.scores, out(static_cast<size_t>(c.width), NAN);  // poisoned: every element written
  softmax_weighted_sum(out.data(), scores, c.width, sum, isa, [&](int64_t j) { return c.values.data() + j * c.width; });
  return out;
}

// Against softmax and sum in double precision; scores near 1000 would overflow exp in f32 unless
// the largest is subtracted first.
TEST(SoftmaxWeightedSum, MatchesDoublePrecision) {
  std::mt19937 rng(23);
  for (const auto& [count, width, offset] : {std::tuple{1, 17, 0.0f}, std::tuple{17, 1, 0.0f}, std::tuple{97, 33, 0.0f},
                                            std::tuple{40, 16, 1000.0f}}) {
    const SoftmaxCase c = softmax_case(count, width, offset, rng);
    double top = -INFINITY, total = 0.0;
    for (const float x : c.scores) top = std::max(top, double{x});
    for (const float x : c.scores) total += std::exp(double{x} - top);
    for (ValueSum sum : {ValueSum::kFused, ValueSum::kMultiplyThenAdd}) {
      const std::vector<float> got = run_softmax(c, sum, best_gemm_isa());
      for (int64_t d = 0; d < width; ++d) {
        double want = 0.0;
        for (int64_t j = 0; j < count; ++j) {
          want += std::exp(double{c.scores[static_cast<size_t>(j)]} - top) / total * c.values[static_cast<size_t>(j * width + d)];
        }
        ASSERT_NEAR(got[static_cast<size_t>(d)], want, 1e-5 * (1.0 + std::abs(want)))
            << "count " << count << " width " << width << " element " << d;
      }
    }
  }
}

// The kernels' outputs stay the bits they were before the helper: the fused sum is fused_axpy in
// the scores' order (the same bits on every instruction set), the other multiplies, rounds, adds.
TEST(SoftmaxWeightedSum, KeepsEachSumsOrderAndRounding) {
  std::mt19937 rng(29);
  const SoftmaxCase c = softmax_case(53, 37, 0.0f, rng);
  std::vector<float> weights = c.scores;
  float top = -INFINITY, denominator = 0.0f;
  for (const float x : weights) top = std::max(top, x);
  for (float& x : weights) denominator += (x = std::exp(x - top));
  std::vector<float> fused(static_cast<size_t>(c.width), 0.0f), plain(fused);
  for (size_t j = 0; j < weights.size(); ++j) {
    const float* value = c.values.data() + j * static_cast<size_t>(c.width);
    fused_axpy(GemmIsa::kPortable, fused.data(), weights[j] / denominator, value, c.width);
    for (int64_t d = 0; d < c.width; ++d) plain[static_cast<size_t>(d)] += weights[j] / denominator * value[d];
  }
  ASSERT_NE(fused, plain);  // the case tells the two roundings apart
  for (GemmIsa isa : {GemmIsa::kPortable, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (!cpu_runs(isa)) continue;
    EXPECT_EQ(run_softmax(c, ValueSum::kFused, isa), fused) << gemm_isa_name(isa);
    EXPECT_EQ(run_softmax(c, ValueSum::kMultiplyThenAdd, isa), plain) << gemm_isa_name(isa);
  }
}

TEST(SoftmaxWeightedSum, NoScoresGiveZeros) {
  std::vector<float> out(5, NAN);
  softmax_weighted_sum(out.data(), std::span<float>{}, 5, ValueSum::kFused, best_gemm_isa(),
                       [](int64_t) -> const float* { return nullptr; });
  EXPECT_EQ(out, std::vector<float>(5, 0.0f));
}

}  // namespace
}  // namespace tachyon::kernels::cpu
