// The MoE kernels (kernels/cuda/moe.h) against plain loops written here: routing (ids exact,
// weights to f32 rounding; DeepSeek's group-limited routing against model/moe.h's CPU router
// itself, ids and their order exact), grouping (every pair once, in its expert's blocks, padding
// marked), the grouped GEMM (bf16 tolerance, padding rows never written), the combine (with and
// without the shared expert's addend), and the whole MoE block chained as a model runs it. Fresh random inputs every run (seed printed); outputs are
// poisoned first, so a row the kernels should write and do not shows up as NaN.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <span>

#include "gpu_test_util.h"
#include "tachyon/kernels/cuda/activation.h"
#include "tachyon/kernels/cuda/moe.h"
#include "tachyon/model/moe.h"

namespace tachyon::kernels::cuda {
namespace {

using gpu_test::DeviceArray;
using gpu_test::download_f32;
using gpu_test::random_bf16_values;
using gpu_test::rng;
using gpu_test::upload;
using gpu_test::upload_bf16;

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Softmax, top k by probability (ties: lower id), optional renormalization.
Routed route_reference(const std::vector<float>& logits, int64_t tokens, int experts, int k, bool renormalize) {
  Routed r;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits.data() + t * experts;
    const float max = *std::max_element(row, row + experts);
    std::vector<double> p(static_cast<size_t>(experts));
    double sum = 0;
    for (int e = 0; e < experts; ++e) sum += p[e] = std::exp(double(row[e]) - max);
    for (double& v : p) v /= sum;
    std::vector<int> order(static_cast<size_t>(experts));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    double chosen = 0;
    for (int j = 0; j < k; ++j) chosen += p[order[j]];
    for (int j = 0; j < k; ++j) {
      r.ids.push_back(order[j]);
      r.weights.push_back(static_cast<float>(renormalize ? p[order[j]] / chosen : p[order[j]]));
    }
  }
  return r;
}

// Distinct logits (no ties), so the top k is unambiguous.
std::vector<float> random_logits(std::mt19937_64& gen, int64_t tokens, int experts) {
  std::vector<float> logits = gpu_test::random_floats(gen, static_cast<size_t>(tokens * experts), 2.0f);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] += 1e-4f * static_cast<float>(i % experts);
  return logits;
}

TEST(MoeTopkSoftmax, MatchesTheReference) {
  auto gen = rng(41);
  for (int experts : {8, 60, 128, 256}) {
    for (int k : {1, 2, 8}) {
      for (bool renormalize : {false, true}) {
        for (int64_t tokens : {1, 7, 300}) {
          SCOPED_TRACE(testing::Message() << experts << " experts, top " << k << ", renormalize " << renormalize
                                          << ", " << tokens << " tokens");
          const std::vector<float> logits = random_logits(gen, tokens, experts);
          const Routed want = route_reference(logits, tokens, experts, k, renormalize);
          DeviceArray<float> logits_d = upload(logits);
          DeviceArray<int32_t> ids(tokens * k);
          DeviceArray<float> weights(tokens * k);
          moe_topk_softmax(ids.data(), weights.data(), logits_d.data(), tokens, experts, k, renormalize, nullptr);
          EXPECT_EQ(ids.download(), want.ids);
          const std::vector<float> got = weights.download();
          for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want.weights[i], 1e-6f * std::max(1.0f, want.weights[i])) << i;
        }
      }
    }
  }
}

TEST(MoeTopkSoftmax, EqualProbabilitiesPickTheLowerExpertFirst) {
  const std::vector<float> logits(64, 0.5f);  // one token, 64 experts, all equal
  DeviceArray<float> logits_d = upload(logits);
  DeviceArray<int32_t> ids(4);
  DeviceArray<float> weights(4);
  moe_topk_softmax(ids.data(), weights.data(), logits_d.data(), 1, 64, 4, true, nullptr);
  EXPECT_EQ(ids.download(), (std::vector<int32_t>{0, 1, 2, 3}));
  for (float w : weights.download()) EXPECT_FLOAT_EQ(w, 0.25f);
}

// --- DeepSeek-V3's group-limited sigmoid routing against model::route_token_group_limited.

struct GroupedCase {
  int experts, n_group, topk_group, k;
};

// The CPU router over every token: ids in its order (highest choice first) and final weights.
Routed route_grouped_cpu(const std::vector<float>& logits, const std::vector<float>& bias, int64_t tokens,
                         const GroupedCase& c, bool renormalize, float scaling) {
  const model::GroupLimitedRouting routing{.top_k = c.k,
                                           .n_group = c.n_group,
                                           .topk_group = c.topk_group,
                                           .norm_topk_prob = renormalize,
                                           .routed_scaling_factor = scaling};
  Routed r;
  for (int64_t t = 0; t < tokens; ++t) {
    const auto row = std::span<const float>(logits).subspan(t * c.experts, c.experts);
    for (const model::ExpertChoice& choice : model::route_token_group_limited(row, bias, routing)) {
      r.ids.push_back(static_cast<int32_t>(choice.expert));
      r.weights.push_back(choice.weight);
    }
  }
  return r;
}

// Runs the kernel (bias_on_device false: nullptr, the CPU then gets zeros) and compares.
void check_grouped(const GroupedCase& c, const std::vector<float>& logits, const std::vector<float>& bias,
                   bool bias_on_device, int64_t tokens, bool renormalize, float scaling) {
  const Routed want = route_grouped_cpu(logits, bias, tokens, c, renormalize, scaling);
  DeviceArray<float> logits_d = upload(logits), bias_d = upload(bias);
  DeviceArray<int32_t> ids(tokens * c.k);
  DeviceArray<float> weights(tokens * c.k);
  moe_topk_sigmoid_grouped(ids.data(), weights.data(), logits_d.data(), bias_on_device ? bias_d.data() : nullptr,
                           tokens, c.experts, c.k, c.n_group, c.topk_group, renormalize, scaling, nullptr);
  const std::vector<int32_t> got_ids = ids.download();
  const std::vector<float> got = weights.download();
  for (int64_t t = 0; t < tokens; ++t) {
    const auto at = [&](const auto& v) { return std::vector(v.begin() + t * c.k, v.begin() + (t + 1) * c.k); };
    ASSERT_EQ(at(got_ids), at(want.ids)) << "token " << t;
    for (int j = 0; j < c.k; ++j) {
      const size_t i = static_cast<size_t>(t * c.k + j);
      ASSERT_NEAR(got[i], want.weights[i], 1e-6f * std::abs(want.weights[i])) << "token " << t << " choice " << j;
    }
  }
}

TEST(MoeTopkSigmoidGrouped, MatchesTheCpuRouter) {
  auto gen = rng(46);
  // DeepSeek-V3 (256 / 8 groups / 4 kept / top 8), a tiny one, n_group 1, groups of a size and
  // count that are not powers of two (60 / 5), 32 groups of 2, and a top k larger than the kept
  // groups hold (8 experts kept, 10 chosen: masked 0.0 values fill the rest, as on the CPU).
  const std::vector<GroupedCase> cases = {{256, 8, 4, 8}, {16, 4, 2, 4},  {64, 1, 1, 6},  {256, 1, 1, 8},
                                          {60, 5, 3, 7},  {64, 32, 5, 16}, {64, 32, 4, 10}, {2, 1, 1, 1}};
  for (const GroupedCase& c : cases) {
    for (int64_t tokens : {1, 7, 300}) {
      for (int bias_kind = 0; bias_kind < 3; ++bias_kind) {
        for (bool renormalize : {true, false}) {
          SCOPED_TRACE(testing::Message() << c.experts << " experts in " << c.n_group << " groups, keep "
                                          << c.topk_group << ", top " << c.k << ", " << tokens << " tokens, bias "
                                          << bias_kind << ", renormalize " << renormalize);
          const std::vector<float> logits = gpu_test::random_floats(gen, static_cast<size_t>(tokens * c.experts), 2.0f);
          // 0: no bias (nullptr); 1: small biases, as trained ones; 2: all choices negative, so the
          // masked groups' 0.0 beats every kept expert and the k fill up from the masked ones.
          std::vector<float> bias(static_cast<size_t>(c.experts), 0.0f);
          if (bias_kind == 1) bias = gpu_test::random_floats(gen, bias.size(), 0.3f);
          if (bias_kind == 2) {
            bias = gpu_test::random_floats(gen, bias.size(), 0.5f);
            for (float& b : bias) b = -2.0f - std::abs(b);
          }
          check_grouped(c, logits, bias, bias_kind != 0, tokens, renormalize, 2.5f);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(MoeTopkSigmoidGrouped, EqualValuesPickTheLowerGroupAndExpert) {
  // Every logit 0 and no bias: all groups tie, so groups 0..topk_group-1 stay, and the experts
  // come out in id order, as the CPU's partial_sort orders them; then half the logits tie higher.
  for (const GroupedCase& c : {GroupedCase{256, 8, 4, 8}, GroupedCase{16, 4, 2, 4}, GroupedCase{64, 1, 1, 6}}) {
    SCOPED_TRACE(testing::Message() << c.experts << " experts in " << c.n_group << " groups");
    std::vector<float> logits(static_cast<size_t>(2 * c.experts), 0.0f);
    for (int e = 0; e < c.experts; e += 2) logits[static_cast<size_t>(c.experts + e + 1)] = 1.0f;
    check_grouped(c, logits, std::vector<float>(static_cast<size_t>(c.experts), 0.0f), false, 2, true, 1.0f);
  }
}

TEST(MoeTopkSigmoidGrouped, RejectsShapesItCannotServe) {
  EXPECT_THROW(moe_topk_sigmoid_grouped(nullptr, nullptr, nullptr, nullptr, 1, 256, 8, 7, 4, true, 1.0f, nullptr),
               Error);  // 256 % 7
  EXPECT_THROW(moe_topk_sigmoid_grouped(nullptr, nullptr, nullptr, nullptr, 1, 64, 8, 64, 4, true, 1.0f, nullptr),
               Error);  // groups of 1, and more than 32
  EXPECT_THROW(moe_topk_sigmoid_grouped(nullptr, nullptr, nullptr, nullptr, 1, 256, 8, 8, 9, true, 1.0f, nullptr),
               Error);  // topk_group > n_group
  EXPECT_THROW(moe_topk_sigmoid_grouped(nullptr, nullptr, nullptr, nullptr, 1, 256, 17, 8, 4, true, 1.0f, nullptr),
               Error);  // top_k > 16
  moe_topk_sigmoid_grouped(nullptr, nullptr, nullptr, nullptr, 0, 256, 8, 8, 4, true, 1.0f, nullptr);  // no tokens
}

TEST(MoeAlign, EveryPairLandsOnceInItsExpertsBlocks) {
  auto gen = rng(42);
  for (int experts : {1, 8, 128, 256}) {
    for (int64_t rows : {0, 1, 5, 64, 65, 3000}) {
      SCOPED_TRACE(testing::Message() << experts << " experts, " << rows << " pairs");
      std::vector<int32_t> ids(static_cast<size_t>(rows));
      std::uniform_int_distribution<int32_t> pick(0, experts - 1);
      for (int32_t& id : ids) id = pick(gen);
      if (rows > 10) std::fill(ids.begin(), ids.begin() + rows / 2, 0);  // one crowded expert
      const int64_t capacity = moe_sorted_capacity(rows, experts);
      DeviceArray<int32_t> ids_d = upload(ids.empty() ? std::vector<int32_t>{0} : ids);
      DeviceArray<int32_t> sorted(capacity);
      DeviceArray<int32_t> blocks(capacity / kMoeBlockM);
      moe_align(sorted.data(), blocks.data(), ids_d.data(), rows, experts, capacity, nullptr);
      const std::vector<int32_t> s = sorted.download(), b = blocks.download();
      std::vector<int> seen(static_cast<size_t>(rows), 0);
      int last_expert = -1;
      bool ended = false;
      for (size_t block = 0; block < b.size(); ++block) {
        if (b[block] < 0) {
          ended = true;
          for (int i = 0; i < kMoeBlockM; ++i) ASSERT_EQ(s[block * kMoeBlockM + i], -1) << "block " << block;
          continue;
        }
        ASSERT_FALSE(ended) << "an expert block after the end marker";
        ASSERT_GE(b[block], last_expert) << "experts out of order";
        last_expert = b[block];
        for (int i = 0; i < kMoeBlockM; ++i) {
          const int32_t pair = s[block * kMoeBlockM + i];
          if (pair < 0) continue;
          ASSERT_LT(pair, rows);
          ASSERT_EQ(ids[pair], b[block]) << "pair " << pair << " in another expert's block";
          ++seen[pair];
        }
      }
      for (int64_t p = 0; p < rows; ++p) ASSERT_EQ(seen[p], 1) << "pair " << p;
    }
  }
}

// out[p] = a[p / divisor] @ w[ids[p]]^T in double over the bf16 values.
std::vector<float> grouped_reference(const std::vector<float>& a, const std::vector<float>& w,
                                     const std::vector<int32_t>& ids, int64_t divisor, int64_t n, int64_t k) {
  std::vector<float> out(ids.size() * n);
  for (size_t p = 0; p < ids.size(); ++p) {
    const float* x = a.data() + (p / divisor) * k;
    for (int64_t j = 0; j < n; ++j) {
      const float* row = w.data() + (ids[p] * n + j) * k;
      double acc = 0;
      for (int64_t i = 0; i < k; ++i) acc += double(x[i]) * row[i];
      out[p * n + j] = static_cast<float>(acc);
    }
  }
  return out;
}

TEST(MoeGroupedGemm, MatchesTheReferenceAndWritesOnlyListedRows) {
  auto gen = rng(43);
  struct Shape {
    int experts, top_k;
    int64_t tokens, n, k;
  };
  for (Shape sh : {Shape{8, 2, 1, 72, 136}, Shape{8, 2, 5, 64, 64}, Shape{16, 4, 130, 200, 96},
                   Shape{128, 8, 3, 256, 512}, Shape{4, 1, 300, 48, 1000}}) {
    for (int64_t divisor : {int64_t{1}, int64_t{sh.top_k}}) {
      SCOPED_TRACE(testing::Message() << sh.experts << " experts top " << sh.top_k << ", " << sh.tokens
                                      << " tokens, n " << sh.n << " k " << sh.k << ", divisor " << divisor);
      const int64_t rows = sh.tokens * sh.top_k;
      std::vector<int32_t> ids(static_cast<size_t>(rows));
      std::uniform_int_distribution<int32_t> pick(0, sh.experts - 1);
      for (int32_t& id : ids) id = pick(gen);
      const std::vector<float> a = random_bf16_values(gen, static_cast<size_t>(rows / divisor * sh.k));
      const std::vector<float> w = random_bf16_values(gen, static_cast<size_t>(sh.experts * sh.n * sh.k), 0.05f);
      const int64_t capacity = moe_sorted_capacity(rows, sh.experts);
      DeviceArray<int32_t> ids_d = upload(ids);
      DeviceArray<int32_t> sorted(capacity);
      DeviceArray<int32_t> blocks(capacity / kMoeBlockM);
      moe_align(sorted.data(), blocks.data(), ids_d.data(), rows, sh.experts, capacity, nullptr);
      DeviceArray<bf16> a_d = upload_bf16(a), w_d = upload_bf16(w);
      DeviceArray<bf16> out(rows * sh.n + 8);  // 8 guard elements past the end stay poisoned
      moe_grouped_gemm(out.data(), a_d.data(), w_d.data(), sorted.data(), blocks.data(), capacity, divisor, sh.n, sh.k,
                       nullptr);
      std::vector<float> got = download_f32(out);
      for (size_t i = rows * sh.n; i < got.size(); ++i) ASSERT_TRUE(std::isnan(got[i])) << "guard element " << i;
      got.resize(rows * sh.n);
      EXPECT_LT(gpu_test::relative_error(got, grouped_reference(a, w, ids, divisor, sh.n, sh.k)), 5e-3);
    }
  }
}

TEST(MoeCombine, WeightedSumOfEachTokensRows) {
  auto gen = rng(44);
  for (int k : {1, 2, 8}) {
    const int64_t tokens = 37, hidden = 264;
    const std::vector<float> rows = random_bf16_values(gen, static_cast<size_t>(tokens * k * hidden));
    std::vector<float> weights = gpu_test::random_floats(gen, static_cast<size_t>(tokens * k), 0.5f);
    std::vector<float> want(static_cast<size_t>(tokens * hidden), 0.0f);
    for (int64_t t = 0; t < tokens; ++t)
      for (int j = 0; j < k; ++j)
        for (int64_t h = 0; h < hidden; ++h) want[t * hidden + h] += weights[t * k + j] * rows[(t * k + j) * hidden + h];
    DeviceArray<bf16> rows_d = upload_bf16(rows);
    DeviceArray<float> weights_d = upload(weights);
    DeviceArray<bf16> out(tokens * hidden);
    moe_combine(out.data(), rows_d.data(), weights_d.data(), tokens, k, hidden, nullptr);
    EXPECT_LT(gpu_test::relative_error(download_f32(out), want), 5e-3) << "top " << k;
  }
}

// The shared expert's row joins in the same pass: out = routed sum + addend, rounded once; in
// place (addend == out) as well.
TEST(MoeCombine, AddsTheAddendRowAfterTheRoutedSum) {
  auto gen = rng(47);
  for (int k : {1, 8}) {
    const int64_t tokens = 37, hidden = 264;
    const std::vector<float> rows = random_bf16_values(gen, static_cast<size_t>(tokens * k * hidden));
    const std::vector<float> addend = random_bf16_values(gen, static_cast<size_t>(tokens * hidden), 2.0f);
    std::vector<float> weights = gpu_test::random_floats(gen, static_cast<size_t>(tokens * k), 0.5f);
    std::vector<float> want(static_cast<size_t>(tokens * hidden), 0.0f);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < hidden; ++h) {
        float sum = 0.0f;
        for (int j = 0; j < k; ++j) sum += weights[t * k + j] * rows[(t * k + j) * hidden + h];
        want[t * hidden + h] = sum + addend[t * hidden + h];
      }
    }
    DeviceArray<bf16> rows_d = upload_bf16(rows), addend_d = upload_bf16(addend);
    DeviceArray<float> weights_d = upload(weights);
    DeviceArray<bf16> out(tokens * hidden);
    moe_combine(out.data(), rows_d.data(), weights_d.data(), addend_d.data(), tokens, k, hidden, nullptr);
    const std::vector<float> got = download_f32(out);
    EXPECT_LT(gpu_test::relative_error(got, want), 5e-3) << "top " << k;
    moe_combine(addend_d.data(), rows_d.data(), weights_d.data(), addend_d.data(), tokens, k, hidden, nullptr);
    EXPECT_TRUE(download_f32(addend_d) == got) << "in place, top " << k;
    // A null addend is the plain combine, bit for bit.
    DeviceArray<bf16> plain(tokens * hidden), no_addend(tokens * hidden);
    moe_combine(plain.data(), rows_d.data(), weights_d.data(), tokens, k, hidden, nullptr);
    moe_combine(no_addend.data(), rows_d.data(), weights_d.data(), nullptr, tokens, k, hidden, nullptr);
    EXPECT_TRUE(download_f32(plain) == download_f32(no_addend)) << "top " << k;
  }
}

// route -> align -> gate_up (gathered by token) -> SiLU -> down -> combine, as a layer runs it,
// against the same MoE computed with loops (bf16 rounding where the GPU rounds).
TEST(MoeBlock, ChainedKernelsMatchTheReferenceMoe) {
  auto gen = rng(45);
  const int experts = 16, k = 4;
  const int64_t tokens = 23, hidden = 128, inter = 64;
  const std::vector<float> logits = random_logits(gen, tokens, experts);
  const std::vector<float> x = random_bf16_values(gen, static_cast<size_t>(tokens * hidden));
  const std::vector<float> w_gate_up = random_bf16_values(gen, static_cast<size_t>(experts * 2 * inter * hidden), 0.1f);
  const std::vector<float> w_down = random_bf16_values(gen, static_cast<size_t>(experts * hidden * inter), 0.1f);
  const Routed routed = route_reference(logits, tokens, experts, k, true);

  std::vector<float> want(static_cast<size_t>(tokens * hidden), 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < k; ++j) {
      const int e = routed.ids[t * k + j];
      std::vector<float> act(static_cast<size_t>(inter));
      for (int64_t i = 0; i < inter; ++i) {
        double g = 0, u = 0;
        for (int64_t h = 0; h < hidden; ++h) {
          g += double(x[t * hidden + h]) * w_gate_up[(e * 2 * inter + i) * hidden + h];
          u += double(x[t * hidden + h]) * w_gate_up[(e * 2 * inter + inter + i) * hidden + h];
        }
        act[i] = gpu_test::round_to_bf16({static_cast<float>(g / (1 + std::exp(-g)) * u)})[0];
      }
      for (int64_t h = 0; h < hidden; ++h) {
        double d = 0;
        for (int64_t i = 0; i < inter; ++i) d += double(act[i]) * w_down[(e * hidden + h) * inter + i];
        want[t * hidden + h] += routed.weights[t * k + j] * static_cast<float>(d);
      }
    }
  }

  const int64_t rows = tokens * k, capacity = moe_sorted_capacity(rows, experts);
  DeviceArray<float> logits_d = upload(logits);
  DeviceArray<int32_t> ids(rows), sorted(capacity), blocks(capacity / kMoeBlockM);
  DeviceArray<float> weights(rows);
  DeviceArray<bf16> x_d = upload_bf16(x), wgu_d = upload_bf16(w_gate_up), wd_d = upload_bf16(w_down);
  DeviceArray<bf16> gate_up(rows * 2 * inter), act(rows * inter), down(rows * hidden), out(tokens * hidden);
  moe_topk_softmax(ids.data(), weights.data(), logits_d.data(), tokens, experts, k, true, nullptr);
  moe_align(sorted.data(), blocks.data(), ids.data(), rows, experts, capacity, nullptr);
  moe_grouped_gemm(gate_up.data(), x_d.data(), wgu_d.data(), sorted.data(), blocks.data(), capacity, k, 2 * inter,
                   hidden, nullptr);
  silu_and_mul(act.data(), gate_up.data(), rows, inter, nullptr);
  moe_grouped_gemm(down.data(), act.data(), wd_d.data(), sorted.data(), blocks.data(), capacity, 1, hidden, inter, nullptr);
  moe_combine(out.data(), down.data(), weights.data(), tokens, k, hidden, nullptr);
  EXPECT_EQ(ids.download(), routed.ids);
  EXPECT_LT(gpu_test::relative_error(download_f32(out), want), 1e-2);
}

}  // namespace
}  // namespace tachyon::kernels::cuda
