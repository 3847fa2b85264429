// The CPU product with bf16 weights (kernels/linear.h, kernels/cpu/fixed_order_gemm.h): on every
// instruction set this CPU runs, a product whose weight is given as bf16 bit patterns equals bit
// for bit the product on the same weight widened to f32, over awkward shapes (dot products that
// end inside a group of 16 lanes or an 8-lane half, register tiles cut short, column ranges that
// cut tiles), with bias, threads and the special values a bf16 can hold (-0, subnormals, the
// largest finite). Bits are compared, not values, so a -0 that became +0 fails too.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tachyon/kernels/cpu/fixed_order_gemm.h"
#include "tachyon/kernels/linear.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::kernels::cpu {
namespace {

struct ProductShape {
  int64_t in_features, out_features;
};
// in_features around the 8- and 16-lane groups, and the canary's own products.
constexpr ProductShape kShapes[] = {{1, 5},   {7, 9},    {8, 8},     {9, 3},    {15, 7},    {16, 8},   {17, 97},
                                    {24, 13}, {31, 17},  {33, 11},   {64, 33},  {100, 19},  {256, 512}, {256, 1536},
                                    {768, 256}, {1000, 31}};

// bf16 weights [count]: mostly normal values, with -0, +0, subnormals and the largest finite bf16.
std::vector<uint16_t> random_bf16(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> pick(0, 15);
  std::vector<uint16_t> bits(count);
  for (uint16_t& b : bits) {
    switch (pick(rng)) {
      case 0: b = 0x8000; break;  // -0
      case 1: b = 0x0000; break;  // +0
      case 2: b = 0x0001; break;  // the smallest subnormal
      case 3: b = 0x807f; break;  // a negative subnormal
      case 4: b = 0x7f7f; break;  // the largest finite bf16
      default: b = f32_to_bf16(normal(rng));
    }
  }
  return bits;
}

std::vector<float> widened(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  convert_to_f32(bits.data(), DType::kBF16, bits.size(), out.data());
  return out;
}

std::vector<float> random_values(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> values(count);
  for (float& v : values) v = normal(rng) * 1e-3f;  // small: x * the largest bf16 stays finite
  return values;
}

// Whether a and b hold the same bits (NaN-safe, and -0 differs from +0).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<GemmIsa> isas_this_cpu_runs() {
  std::vector<GemmIsa> isas;
  for (GemmIsa isa : {GemmIsa::kPortable, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (cpu_runs(isa)) isas.push_back(isa);
  }
  return isas;
}

TEST(Bf16WeightGemm, EqualsTheWidenedProductOnEveryInstructionSet) {
  std::mt19937 rng(43);
  for (const ProductShape s : kShapes) {
    const std::vector<uint16_t> weight = random_bf16(static_cast<size_t>(s.out_features * s.in_features), rng);
    const std::vector<float> weight_f32 = widened(weight);
    for (const int64_t rows : {1, 2, 3, 4, 5, 9}) {  // every register tile height of both x86 paths
      const std::vector<float> in = random_values(static_cast<size_t>(rows * s.in_features), rng);
      for (const GemmIsa isa : isas_this_cpu_runs()) {
        std::vector<float> want(static_cast<size_t>(rows * s.out_features), NAN), got(want.size(), NAN);
        fixed_order_gemm_columns(isa, want.data(), in.data(), weight_f32.data(), rows, s.in_features, s.out_features,
                                 0, s.out_features);
        fixed_order_gemm_columns(isa, got.data(), in.data(), weight.data(), rows, s.in_features, s.out_features, 0,
                                 s.out_features);
        ASSERT_TRUE(same_bits(got, want)) << gemm_isa_name(isa) << ", " << rows << " rows, shape [" << s.in_features
                                          << " -> " << s.out_features << "]";
      }
    }
  }
}

TEST(Bf16WeightGemm, ColumnRangesThatCutTilesEqualTheWidenedProduct) {
  std::mt19937 rng(47);
  const ProductShape s{97, 61};
  const std::vector<uint16_t> weight = random_bf16(static_cast<size_t>(s.out_features * s.in_features), rng);
  const std::vector<float> weight_f32 = widened(weight);
  const std::vector<float> in = random_values(static_cast<size_t>(7 * s.in_features), rng);
  for (const GemmIsa isa : isas_this_cpu_runs()) {
    std::vector<float> want(static_cast<size_t>(7 * s.out_features), NAN), got(want.size(), NAN);
    fixed_order_gemm_columns(isa, want.data(), in.data(), weight_f32.data(), 7, s.in_features, s.out_features, 0,
                             s.out_features);
    for (int64_t begin = 0; begin < s.out_features; begin += 5) {
      fixed_order_gemm_columns(isa, got.data(), in.data(), weight.data(), 7, s.in_features, s.out_features, begin,
                               std::min(s.out_features, begin + 5));
    }
    EXPECT_TRUE(same_bits(got, want)) << gemm_isa_name(isa);
  }
}

// linear() itself: bias added, the product forked over threads (over its size threshold) or not.
TEST(Bf16WeightGemm, LinearEqualsTheWidenedLinearWithBiasAndThreads) {
  std::mt19937 rng(53);
  const int threads_before = omp_get_max_threads();
  for (const ProductShape s : {ProductShape{17, 97}, ProductShape{256, 1000}}) {
    const std::vector<uint16_t> weight = random_bf16(static_cast<size_t>(s.out_features * s.in_features), rng);
    const std::vector<float> weight_f32 = widened(weight);
    const std::vector<float> bias = random_values(static_cast<size_t>(s.out_features), rng);
    for (const int64_t rows : {1, 64}) {
      const std::vector<float> in = random_values(static_cast<size_t>(rows * s.in_features), rng);
      std::vector<float> want(static_cast<size_t>(rows * s.out_features), NAN);
      omp_set_num_threads(1);
      linear(want.data(), in.data(), weight_f32.data(), bias.data(), rows, s.in_features, s.out_features);
      for (const int threads : {1, 3}) {
        omp_set_num_threads(threads);
        std::vector<float> got(want.size(), NAN);
        linear(got.data(), in.data(), weight.data(), bias.data(), rows, s.in_features, s.out_features);
        EXPECT_TRUE(same_bits(got, want)) << threads << " threads, " << rows << " rows, shape [" << s.in_features
                                          << " -> " << s.out_features << "]";
      }
    }
  }
  omp_set_num_threads(threads_before);
}

}  // namespace
}  // namespace tachyon::kernels::cpu
