// The CPU linear's product (kernels/cpu/fixed_order_gemm.h): a row's result is bit-identical
// whatever product holds it (1, 2, 3, 7 or 64 rows, any place among them, any thread count, any
// column range), every instruction set this CPU runs gives the portable spec's bits, and the sums
// are right (against double precision). The speculative identity tests (a verify step's row equals
// the plain decode row) and batch invariance rest on the first property.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

#include "tachyon/kernels/attention.h"
#include "tachyon/kernels/cpu/fixed_order_gemm.h"
#include "tachyon/kernels/linear.h"

namespace tachyon::kernels::cpu {
namespace {

struct ProductShape {
  int64_t in_features, out_features;
};
// Awkward lengths (partial groups of 16 lanes, tiles cut short) and the canary's own.
constexpr ProductShape kShapes[] = {{1, 5}, {15, 7}, {16, 8}, {17, 97}, {64, 33}, {256, 512}, {768, 256}, {1000, 31}};

std::vector<float> random_values(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> values(count);
  for (float& v : values) v = normal(rng);
  return values;
}

// out: [rows, out_features] of linear() on the first `rows` rows of `in` starting at row `first`.
std::vector<float> product(const std::vector<float>& in, int64_t first, int64_t rows, const std::vector<float>& weight,
                           const std::vector<float>& bias, ProductShape s) {
  std::vector<float> out(static_cast<size_t>(rows * s.out_features), NAN);
  linear(out.data(), in.data() + first * s.in_features, weight.data(), bias.data(), rows, s.in_features,
         s.out_features);
  return out;
}

TEST(FixedOrderGemm, ARowIsTheSameInEveryProductThatHoldsIt) {
  std::mt19937 rng(23);
  for (const ProductShape s : kShapes) {
    const std::vector<float> in = random_values(static_cast<size_t>(64 * s.in_features), rng);
    const std::vector<float> weight = random_values(static_cast<size_t>(s.out_features * s.in_features), rng);
    const std::vector<float> bias = random_values(static_cast<size_t>(s.out_features), rng);
    std::vector<std::vector<float>> alone;  // [64] rows, each from a one-row product
    for (int64_t r = 0; r < 64; ++r) alone.push_back(product(in, r, 1, weight, bias, s));
    for (const int64_t rows : {2, 3, 7, 64}) {
      for (int64_t first = 0; first + rows <= 64; first += rows) {
        const std::vector<float> batch = product(in, first, rows, weight, bias, s);
        for (int64_t r = 0; r < rows; ++r) {
          const std::vector<float> row(batch.begin() + r * s.out_features, batch.begin() + (r + 1) * s.out_features);
          ASSERT_EQ(row, alone[static_cast<size_t>(first + r)])
              << "row " << first + r << " in a product of " << rows << " rows, shape [" << s.in_features << " -> "
              << s.out_features << "]";
        }
      }
    }
  }
}

TEST(FixedOrderGemm, ThreadsAndColumnRangesDoNotChangeABit) {
  std::mt19937 rng(29);
  const ProductShape s{256, 1000};  // 64 x 256 x 1000 multiply-adds: over the threshold that forks
  const std::vector<float> in = random_values(static_cast<size_t>(64 * s.in_features), rng);
  const std::vector<float> weight = random_values(static_cast<size_t>(s.out_features * s.in_features), rng);
  const std::vector<float> bias = random_values(static_cast<size_t>(s.out_features), rng);
  const int threads_before = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one_thread = product(in, 0, 64, weight, bias, s);
  omp_set_num_threads(3);  // more threads than the test machine's cores, uneven column shares
  const std::vector<float> three_threads = product(in, 0, 64, weight, bias, s);
  omp_set_num_threads(threads_before);
  EXPECT_EQ(three_threads, one_thread);

  // Columns computed a few at a time, in ranges that cut register tiles, equal the whole product.
  const GemmIsa isa = best_gemm_isa();
  std::vector<float> whole(static_cast<size_t>(64 * s.out_features), NAN), pieces(whole.size(), NAN);
  fixed_order_gemm_columns(isa, whole.data(), in.data(), weight.data(), 64, s.in_features, s.out_features, 0,
                           s.out_features);
  for (int64_t begin = 0; begin < s.out_features; begin += 13) {
    fixed_order_gemm_columns(isa, pieces.data(), in.data(), weight.data(), 64, s.in_features, s.out_features, begin,
                             std::min(s.out_features, begin + 13));
  }
  EXPECT_EQ(pieces, whole);
}

TEST(FixedOrderGemm, EveryInstructionSetGivesThePortableSpecsBits) {
  std::mt19937 rng(31);
  std::vector<GemmIsa> isas;
  for (GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (cpu_runs(isa)) isas.push_back(isa);
  }
  if (isas.empty()) GTEST_SKIP() << "this CPU runs only the portable product";
  for (const ProductShape s : kShapes) {
    for (const int64_t rows : {1, 3, 9}) {
      const std::vector<float> in = random_values(static_cast<size_t>(rows * s.in_features), rng);
      const std::vector<float> weight = random_values(static_cast<size_t>(s.out_features * s.in_features), rng);
      std::vector<float> spec(static_cast<size_t>(rows * s.out_features), NAN);
      fixed_order_gemm_columns(GemmIsa::kPortable, spec.data(), in.data(), weight.data(), rows, s.in_features,
                               s.out_features, 0, s.out_features);
      for (const GemmIsa isa : isas) {
        std::vector<float> got(spec.size(), NAN);
        fixed_order_gemm_columns(isa, got.data(), in.data(), weight.data(), rows, s.in_features, s.out_features, 0,
                                 s.out_features);
        ASSERT_EQ(got, spec) << gemm_isa_name(isa) << ", " << rows << " rows, shape [" << s.in_features << " -> "
                             << s.out_features << "]";
        // The lone dot product is the same element.
        EXPECT_EQ(fixed_order_dot(isa, in.data(), weight.data(), s.in_features), spec[0]) << gemm_isa_name(isa);
        std::vector<float> y = random_values(static_cast<size_t>(s.in_features), rng), y_spec = y;
        fused_axpy(isa, y.data(), 0.375f, in.data(), s.in_features);
        fused_axpy(GemmIsa::kPortable, y_spec.data(), 0.375f, in.data(), s.in_features);
        EXPECT_EQ(y, y_spec) << gemm_isa_name(isa) << " axpy of " << s.in_features;
      }
    }
  }
}

// The attention's batched forms (16 dot products reduced together; the weighted sum kept in
// registers) give each lone call's bits, on every instruction set, for rows anywhere in memory.
TEST(FixedOrderGemm, ManyDotsAndAWeightedSumAreTheLoneCallsBits) {
  std::mt19937 rng(43);
  std::vector<GemmIsa> isas{GemmIsa::kPortable};
  for (GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (cpu_runs(isa)) isas.push_back(isa);
  }
  for (const int64_t k : {1, 7, 16, 33, 64, 100, 128, 192, 300, 576}) {
    const std::vector<float> pool = random_values(static_cast<size_t>(64 * k), rng);
    const std::vector<float> x = random_values(static_cast<size_t>(k), rng);
    for (const int64_t count : {0, 1, 5, 16, 17, 40, 64}) {
      std::vector<const float*> rows;  // scattered, repeated and out of order, as a paged cache gives them
      std::uniform_int_distribution<int64_t> pick(0, 63);
      for (int64_t j = 0; j < count; ++j) rows.push_back(pool.data() + pick(rng) * k);
      std::vector<float> weights = random_values(static_cast<size_t>(count), rng);
      const std::vector<float> start = random_values(static_cast<size_t>(k), rng);  // a sum of rows before
      std::vector<float> lone_dots, lone_sum = start;
      for (int64_t j = 0; j < count; ++j) {
        lone_dots.push_back(fixed_order_dot(GemmIsa::kPortable, x.data(), rows[j], k) * 0.3f);
        fused_axpy(GemmIsa::kPortable, lone_sum.data(), weights[j], rows[j], k);
      }
      for (const GemmIsa isa : isas) {
        std::vector<float> dots(static_cast<size_t>(count) + 1, NAN), sum = start;
        sum.push_back(NAN);
        fixed_order_dots(isa, dots.data(), x.data(), rows.data(), count, k, 0.3f);
        fused_weighted_sum(isa, sum.data(), weights.data(), rows.data(), count, k);
        EXPECT_TRUE(std::isnan(dots.back()) && std::isnan(sum.back())) << "wrote past the end";
        dots.pop_back();
        sum.pop_back();
        ASSERT_EQ(dots, lone_dots) << gemm_isa_name(isa) << ", " << count << " rows of " << k;
        ASSERT_EQ(sum, lone_sum) << gemm_isa_name(isa) << ", " << count << " rows of " << k;
      }
    }
  }
}

TEST(FixedOrderGemm, SumsAgreeWithDoublePrecision) {
  std::mt19937 rng(37);
  for (const ProductShape s : kShapes) {
    const std::vector<float> in = random_values(static_cast<size_t>(3 * s.in_features), rng);
    const std::vector<float> weight = random_values(static_cast<size_t>(s.out_features * s.in_features), rng);
    const std::vector<float> bias = random_values(static_cast<size_t>(s.out_features), rng);
    const std::vector<float> got = product(in, 0, 3, weight, bias, s);
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t o = 0; o < s.out_features; ++o) {
        double exact = bias[static_cast<size_t>(o)], magnitude = std::abs(exact);
        for (int64_t i = 0; i < s.in_features; ++i) {
          const double term = double{in[static_cast<size_t>(r * s.in_features + i)]} *
                              weight[static_cast<size_t>(o * s.in_features + i)];
          exact += term;
          magnitude += std::abs(term);
        }
        ASSERT_NEAR(got[static_cast<size_t>(r * s.out_features + o)], exact, 1e-6 * magnitude + 1e-6)
            << "row " << r << " column " << o << " of [" << s.in_features << " -> " << s.out_features << "]";
      }
    }
  }
}

// The attention kernel's half of the same promise: a query's output inside a call of many
// queries (a prefill chunk, a verify step) equals the same query attended alone (a decode step).
TEST(FixedOrderGemm, AnAttentionQueryIsTheSameAloneAsAmongOthers) {
  std::mt19937 rng(41);
  const int64_t queries = 7, first = 20, heads = 4, kv_heads = 2, head_dim = 33;
  const int64_t total = first + queries;
  const std::vector<float> q = random_values(static_cast<size_t>(queries * heads * head_dim), rng);
  const std::vector<float> k = random_values(static_cast<size_t>(total * kv_heads * head_dim), rng);
  const std::vector<float> v = random_values(k.size(), rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  std::vector<float> together(q.size(), NAN);
  attention(together.data(), q.data(), k.data(), v.data(), {queries, first, heads, kv_heads, head_dim, 0, scale});
  const int64_t width = heads * head_dim;
  for (int64_t i = 0; i < queries; ++i) {
    std::vector<float> alone(static_cast<size_t>(width), NAN);
    attention(alone.data(), q.data() + i * width, k.data(), v.data(), {1, first + i, heads, kv_heads, head_dim, 0, scale});
    const std::vector<float> row(together.begin() + i * width, together.begin() + (i + 1) * width);
    ASSERT_EQ(row, alone) << "query " << i << " of " << queries;
  }
}

}  // namespace
}  // namespace tachyon::kernels::cpu
