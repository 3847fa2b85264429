// The MoE kernels (kernels/cuda/moe.h) against plain loops written here: routing (ids exact,
// weights to f32 rounding; DeepSeek's group-limited routing against model/moe.h's CPU router
// itself, ids and their order exact), grouping (every pair once, in its expert's blocks, padding
// marked), the grouped GEMM (bf16 tolerance, padding rows never written), the decode-sized
// grouped GEMV (the same, plus: a token's rows bit-identical alone and in any batch, graph
// capture, argument checks), the same products over E4M3 experts (against the values the E4M3
// weights stand for), the combine (with and without the shared expert's addend), the
// expert-parallel window of the grouping and the combine, and the whole MoE block chained as a
// model runs it. Fresh random inputs every run (seed printed);
// outputs are poisoned first, so a row the kernels should write and do not shows up as NaN.
// Run: build-*/tests/gpu_moe_kernels (GPU machine); TACHYON_TEST_SEED=<seed> replays a failure.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <set>
#include <span>
#include <string>

#include "gpu_test_util.h"
#include "tachyon/kernels/cuda/activation.h"
#include "tachyon/kernels/cuda/fp8.h"
#include "tachyon/kernels/cuda/moe.h"
#include "tachyon/model/moe.h"
#include "tachyon/tensor/fp8.h"

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

// Expert parallelism: a window [begin, begin + count) groups only its experts' pairs, under local
// ids, into a capacity sized for its own experts; over the G windows of a split every pair is
// listed exactly once.
TEST(MoeAlign, AWindowGroupsOnlyItsExpertsPairsUnderLocalIds) {
  auto gen = rng(43);
  for (int experts : {8, 64, 256}) {
    for (int ranks : {2, 4}) {
      for (int64_t rows : {1, 6, 65, 3000}) {
        SCOPED_TRACE(testing::Message() << experts << " experts over " << ranks << " ranks, " << rows << " pairs");
        std::vector<int32_t> ids(static_cast<size_t>(rows));
        std::uniform_int_distribution<int32_t> pick(0, experts - 1);
        for (int32_t& id : ids) id = pick(gen);
        const DeviceArray<int32_t> ids_d = upload(ids);
        std::vector<int> seen(static_cast<size_t>(rows), 0);
        const int32_t count = experts / ranks;
        for (int r = 0; r < ranks; ++r) {
          const MoeExpertWindow window{r * count, count};
          const int64_t capacity = moe_sorted_capacity(rows, count);
          DeviceArray<int32_t> sorted(capacity), blocks(capacity / kMoeBlockM);
          moe_align(sorted.data(), blocks.data(), ids_d.data(), rows, experts, capacity, nullptr, window);
          const std::vector<int32_t> s = sorted.download(), b = blocks.download();
          int last = -1;
          for (size_t block = 0; block < b.size(); ++block) {
            if (b[block] < 0) {
              for (int i = 0; i < kMoeBlockM; ++i) ASSERT_EQ(s[block * kMoeBlockM + i], -1) << "block " << block;
              continue;
            }
            ASSERT_LT(b[block], count) << "a local id past the window";
            ASSERT_GE(b[block], last) << "experts out of order";
            last = b[block];
            for (int i = 0; i < kMoeBlockM; ++i) {
              const int32_t pair = s[block * kMoeBlockM + i];
              if (pair < 0) continue;
              ASSERT_EQ(ids[pair], window.begin + b[block]) << "pair " << pair << " under another local expert";
              ++seen[pair];
            }
          }
        }
        for (int64_t p = 0; p < rows; ++p) ASSERT_EQ(seen[p], 1) << "pair " << p << " (expert " << ids[p] << ")";
      }
    }
  }
  DeviceArray<int32_t> buffer(moe_sorted_capacity(4, 8));
  EXPECT_THROW(moe_align(buffer.data(), buffer.data(), buffer.data(), 4, 8, moe_sorted_capacity(4, 8), nullptr,
                         MoeExpertWindow{6, 4}),
               Error);  // past the experts
  EXPECT_THROW(moe_align(buffer.data(), buffer.data(), buffer.data(), 4, 8, moe_sorted_capacity(4, 8), nullptr,
                         MoeExpertWindow{0, 4}),
               Error);  // a capacity for 8 experts, not the window's 4
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

// A bf16 grouped GEMM (moe_grouped_gemm or moe_grouped_gemm_wgmma) against the reference over
// random routings, odd shapes and both a_row_divisors; the 8 elements past the rows stay poisoned.
using BlockGemm = std::function<void(bf16* out, const bf16* a, int64_t a_rows, const bf16* w, const int32_t* sorted,
                                     const int32_t* blocks, int64_t capacity, int64_t divisor, int64_t n, int64_t k)>;

void check_grouped_gemm(std::mt19937_64& gen, const BlockGemm& gemm) {
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
      gemm(out.data(), a_d.data(), rows / divisor, w_d.data(), sorted.data(), blocks.data(), capacity, divisor, sh.n,
           sh.k);
      std::vector<float> got = download_f32(out);
      for (size_t i = rows * sh.n; i < got.size(); ++i) ASSERT_TRUE(std::isnan(got[i])) << "guard element " << i;
      got.resize(rows * sh.n);
      EXPECT_LT(gpu_test::relative_error(got, grouped_reference(a, w, ids, divisor, sh.n, sh.k)), 5e-3);
    }
  }
}

TEST(MoeGroupedGemm, MatchesTheReferenceAndWritesOnlyListedRows) {
  auto gen = rng(43);
  check_grouped_gemm(gen, [](bf16* out, const bf16* a, int64_t, const bf16* w, const int32_t* sorted,
                             const int32_t* blocks, int64_t capacity, int64_t divisor, int64_t n, int64_t k) {
    moe_grouped_gemm(out, a, w, sorted, blocks, capacity, divisor, n, k, nullptr);
  });
}

// The same product on wgmma (moe_gemm_wgmma.cu).
TEST(MoeWgmmaGemm, MatchesTheReferenceAndWritesOnlyListedRows) {
  auto gen = rng(60);
  check_grouped_gemm(gen, [](bf16* out, const bf16* a, int64_t a_rows, const bf16* w, const int32_t* sorted,
                             const int32_t* blocks, int64_t capacity, int64_t divisor, int64_t n, int64_t k) {
    moe_grouped_gemm_wgmma(out, a, a_rows, w, sorted, blocks, capacity, divisor, n, k, nullptr);
  });
}

// --- moe_grouped_gemv: the same product for decode-sized steps (<= 8 pairs per expert).

// A layer's experts (experts, top_k, n x k each) read by pairs whose input row is pair / divisor.
struct ExpertsShape {
  int experts, top_k;
  int64_t n, k, divisor;
};

// bf16 values with full 8-bit significands (so f32 sums round, and a changed sum order shows),
// magnitudes in [2^-6, 2^-2), four per draw: V2-Lite's experts hold 370M weights.
std::vector<float> random_weight_values(std::mt19937_64& gen, size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; i += 4) {
    uint64_t bits = gen();
    for (size_t j = i; j < std::min(count, i + 4); ++j, bits >>= 16) {
      const uint32_t sign = bits & 0x8000u, exponent = 127 - 3 - ((bits >> 7) & 3u), mantissa = bits & 0x7fu;
      values[j] = bf16_to_f32(static_cast<uint16_t>(sign | exponent << 7 | mantissa));
    }
  }
  return values;
}

// Every expert's weight on the device, [experts, n, k] bf16. Large sets are built from 4 random
// matrices (drawing 64 V2-Lite experts would take seconds): expert e is matrix e % 4 with its
// rows rotated by shift(e), so an expert mixed up with another reads other rows and shows.
struct ExpertWeights {
  int experts, pools;
  int64_t n, k;
  std::vector<float> pool;   // [pools, n, k]
  DeviceArray<bf16> device;  // [experts, n, k]

  ExpertWeights(std::mt19937_64& gen, int experts_, int64_t n_, int64_t k_)
      : experts(experts_),
        pools(experts_ * n_ * k_ <= (int64_t{1} << 22) ? experts_ : std::min(experts_, 4)),
        n(n_),
        k(k_),
        pool(random_weight_values(gen, static_cast<size_t>(pools * n * k))),
        device(static_cast<size_t>(experts * n * k)) {
    TACHYON_CHECK(pools == experts || n > (experts - 1) / pools * 131) << "shifts must differ modulo n";
    DeviceArray<bf16> pool_d = gpu_test::upload_bf16(pool);
    for (int e = 0; e < experts; ++e) {
      const int64_t s = shift(e);
      bf16* dst = device.data() + e * n * k;
      const bf16* src = pool_d.data() + (e % pools) * n * k;
      TACHYON_CUDA_CHECK(cudaMemcpy(dst, src + s * k, (n - s) * k * sizeof(bf16), cudaMemcpyDeviceToDevice));
      TACHYON_CUDA_CHECK(cudaMemcpy(dst + (n - s) * k, src, s * k * sizeof(bf16), cudaMemcpyDeviceToDevice));
    }
    TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
  }
  int64_t shift(int e) const { return pools == experts ? 0 : e / pools * 131 % n; }
  // Row j of expert e's weight: [k].
  const float* row(int e, int64_t j) const { return pool.data() + ((e % pools) * n + (j + shift(e)) % n) * k; }
};

double dot(const float* x, const float* w, int64_t k) {  // k % 8 == 0; 8 chains, in double
  double acc[8] = {};
  for (int64_t i = 0; i < k; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += double(x[i + j]) * w[i + j];
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Each token's top_k distinct experts in random order; with common >= 0, that expert among them.
std::vector<int32_t> route_distinct(std::mt19937_64& gen, int64_t tokens, int experts, int top_k, int common = -1) {
  std::vector<int32_t> all(static_cast<size_t>(experts)), ids;
  std::iota(all.begin(), all.end(), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), gen);
    std::vector<int32_t> mine(all.begin(), all.begin() + top_k);
    if (common >= 0 && std::find(mine.begin(), mine.end(), common) == mine.end()) mine[gen() % top_k] = common;
    ids.insert(ids.end(), mine.begin(), mine.end());
  }
  return ids;
}

int32_t max_pairs_of(const std::vector<int32_t>& ids, int experts) {
  std::vector<int32_t> count(static_cast<size_t>(experts), 0);
  for (int32_t id : ids) ++count[id];
  return *std::max_element(count.begin(), count.end());
}

std::vector<uint16_t> bits_of(const std::vector<bf16>& values) {
  std::vector<uint16_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(uint16_t));
  return bits;
}

// The first element where two bf16 bit vectors differ (-1: none), so a failure prints one index.
int64_t first_difference(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  if (a.size() != b.size()) return 0;
  const auto mismatch = std::mismatch(a.begin(), a.end(), b.begin());
  return mismatch.first == a.end() ? -1 : mismatch.first - a.begin();
}

std::vector<float> floats_of(const std::vector<bf16>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = __bfloat162float(values[i]);
  return out;
}

// One grouped product into `out` [rows, n] over moe_align's grouping of the ids.
using GroupedProduct = std::function<void(bf16* out, const int32_t* sorted, const int32_t* blocks, int64_t capacity)>;

// Groups ids with moe_align, then runs `product` into a poisoned [rows, n] output with a guard
// that must stay poisoned.
std::vector<bf16> run_grouped_product(int experts, int64_t n, const std::vector<int32_t>& ids,
                                      const GroupedProduct& product) {
  const int64_t rows = static_cast<int64_t>(ids.size()), capacity = moe_sorted_capacity(rows, experts);
  DeviceArray<int32_t> ids_d = upload(ids), sorted(capacity), blocks(capacity / kMoeBlockM);
  moe_align(sorted.data(), blocks.data(), ids_d.data(), rows, experts, capacity, nullptr);
  DeviceArray<bf16> out(rows * n + 8);
  product(out.data(), sorted.data(), blocks.data(), capacity);
  std::vector<bf16> got = out.download();
  for (size_t i = rows * n; i < got.size(); ++i) EXPECT_TRUE(std::isnan(__bfloat162float(got[i]))) << "guard " << i;
  got.resize(rows * n);
  return got;
}

// moe_grouped_gemv at max_pairs (or moe_grouped_gemm when max_pairs is 0).
std::vector<bf16> run_grouped(const ExpertWeights& w, const DeviceArray<bf16>& a, const std::vector<int32_t>& ids,
                              int64_t divisor, int32_t max_pairs) {
  return run_grouped_product(w.experts, w.n, ids, [&](bf16* out, const int32_t* sorted, const int32_t* blocks,
                                                      int64_t capacity) {
    if (max_pairs > 0) {
      moe_grouped_gemv(out, a.data(), w.device.data(), sorted, blocks, capacity, divisor, w.n, w.k, max_pairs, nullptr);
    } else {
      moe_grouped_gemm(out, a.data(), w.device.data(), sorted, blocks, capacity, divisor, w.n, w.k, nullptr);
    }
  });
}

// The GEMV on routed pairs against the CPU per pair row, and against the GEMM as a whole.
void check_routed_gemv(std::mt19937_64& gen, const ExpertWeights& w, const std::vector<int32_t>& ids,
                       int64_t divisor, int32_t max_pairs) {
  const int64_t rows = static_cast<int64_t>(ids.size()), n = w.n, k = w.k;
  const std::vector<float> a = random_bf16_values(gen, static_cast<size_t>(rows / divisor * k));
  const DeviceArray<bf16> a_d = upload_bf16(a);
  const std::vector<float> got = floats_of(run_grouped(w, a_d, ids, divisor, max_pairs));
  double worst = 0.0;
  for (int64_t p = 0; p < rows; ++p) {
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) want[j] = static_cast<float>(dot(a.data() + p / divisor * k, w.row(ids[p], j), k));
    const std::vector<float> mine(got.begin() + p * n, got.begin() + (p + 1) * n);
    worst = std::max(worst, gpu_test::relative_error(mine, want));
  }
  EXPECT_LT(worst, 5e-3) << "worst pair row";
  EXPECT_LT(gpu_test::relative_error(got, floats_of(run_grouped(w, a_d, ids, divisor, 0))), 5e-3) << "against the GEMM";
}

// DeepSeek-V2-Lite's experts (64, top 6): gate_up (n 2816, k 2048, each token's hidden row
// gathered for its 6 pairs) and down (n 2048, k 1408, a row per pair), for every T <= 8 at
// max_pairs_per_expert = T as the runner calls it; from T = 2 one expert has every token, so an
// expert block is full.
TEST(MoeGroupedGemv, MatchesTheReferenceAndTheGemmAtDeepSeekV2LiteShapes) {
  auto gen = rng(48);
  for (bool gate_up : {true, false}) {
    const ExpertWeights w(gen, 64, gate_up ? 2816 : 2048, gate_up ? 2048 : 1408);
    for (int64_t tokens = 1; tokens <= 8; ++tokens) {
      SCOPED_TRACE(testing::Message() << (gate_up ? "gate_up" : "down") << ", " << tokens << " tokens");
      const std::vector<int32_t> ids = route_distinct(gen, tokens, 64, 6, static_cast<int>(gen() % 64));
      check_routed_gemv(gen, w, ids, gate_up ? 6 : 1, static_cast<int32_t>(tokens));
      if (HasFailure()) return;
    }
  }
}

TEST(MoeGroupedGemv, MatchesTheReferenceOnAwkwardShapes) {
  auto gen = rng(49);
  {  // 40 experts of one pair each at M = 1: more than the 16 expert blocks the grid covers, so
     // blocks loop; k = 72 is 9 chunks for 32 lanes.
    SCOPED_TRACE("n 136, k 72, 40 experts of one pair");
    const ExpertWeights w(gen, 48, 136, 72);
    std::vector<int32_t> ids(48);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), gen);
    ids.resize(40);  // 20 tokens, top 2
    check_routed_gemv(gen, w, ids, 2, 1);
  }
  {  // a ragged last trip (125 chunks); max_pairs above the real counts
    SCOPED_TRACE("n 24, k 1000, 7 tokens top 2 of 5");
    const ExpertWeights w(gen, 5, 24, 1000);
    check_routed_gemv(gen, w, route_distinct(gen, 7, 5, 2), 1, 7);
  }
  {  // few rows: 2 warps split k, whose 273 chunks leave ragged slices
    SCOPED_TRACE("n 40, k 2184, 4 tokens top 2 of 6");
    const ExpertWeights w(gen, 6, 40, 2184);
    const std::vector<int32_t> ids = route_distinct(gen, 4, 6, 2);
    check_routed_gemv(gen, w, ids, 2, max_pairs_of(ids, 6));
  }
  {  // few rows: 4 warps split k
    SCOPED_TRACE("n 64, k 4096, 3 tokens top 3 of 8");
    const ExpertWeights w(gen, 8, 64, 4096);
    const std::vector<int32_t> ids = route_distinct(gen, 3, 8, 3);
    check_routed_gemv(gen, w, ids, 3, max_pairs_of(ids, 8));
  }
  {  // one chunk per row; 8 tokens on one expert
    SCOPED_TRACE("n 8, k 8, 8 tokens on one expert of 16");
    const ExpertWeights w(gen, 16, 8, 8);
    check_routed_gemv(gen, w, std::vector<int32_t>(8, 5), 1, 8);
  }
}

// The determinism rule: a token's rows are bit-identical alone (at max_pairs 1 and 8) and at
// any position of a batch whose other tokens share its experts (all of them, or one), at
// V2-Lite's shapes and at one where warps split k.
TEST(MoeGroupedGemv, ATokensRowsDoNotDependOnItsBatch) {
  auto gen = rng(50);
  const ExpertsShape shapes[] = {{64, 6, 2816, 2048, 6}, {64, 6, 2048, 1408, 1}, {8, 3, 64, 4096, 3},
                                 {8, 3, 64, 4096, 1}};
  for (const ExpertsShape& sh : shapes) {
    SCOPED_TRACE(testing::Message() << "n " << sh.n << " k " << sh.k << " divisor " << sh.divisor);
    const ExpertWeights w(gen, sh.experts, sh.n, sh.k);
    const int64_t a_rows_per_token = sh.top_k / sh.divisor, row = a_rows_per_token * sh.k;
    const std::vector<int32_t> mine = route_distinct(gen, 1, sh.experts, sh.top_k);
    const std::vector<float> my_a = random_bf16_values(gen, static_cast<size_t>(row));
    const DeviceArray<bf16> alone_a = upload_bf16(my_a);
    const std::vector<uint16_t> alone = bits_of(run_grouped(w, alone_a, mine, sh.divisor, 1));
    EXPECT_EQ(first_difference(bits_of(run_grouped(w, alone_a, mine, sh.divisor, 8)), alone), -1)
        << "alone at max_pairs 8";
    for (int64_t tokens : {2, 5, 8}) {
      const int64_t at = static_cast<int64_t>(gen() % tokens);
      std::vector<int32_t> ids;
      for (int64_t t = 0; t < tokens; ++t) {
        // Other even tokens have all of its experts, in another order; odd ones one of them.
        std::vector<int32_t> theirs = mine;
        if (t != at && t % 2 == 0) std::shuffle(theirs.begin(), theirs.end(), gen);
        if (t != at && t % 2 == 1) theirs = route_distinct(gen, 1, sh.experts, sh.top_k, mine[t % sh.top_k]);
        ids.insert(ids.end(), theirs.begin(), theirs.end());
      }
      std::vector<float> a = random_bf16_values(gen, static_cast<size_t>(tokens * row));
      std::copy(my_a.begin(), my_a.end(), a.begin() + at * row);
      const DeviceArray<bf16> a_d = upload_bf16(a);
      for (int32_t max_pairs : std::set<int32_t>{static_cast<int32_t>(tokens), 8}) {
        const std::vector<uint16_t> batch = bits_of(run_grouped(w, a_d, ids, sh.divisor, max_pairs));
        const std::vector<uint16_t> at_rows(batch.begin() + at * sh.top_k * sh.n,
                                            batch.begin() + (at + 1) * sh.top_k * sh.n);
        EXPECT_EQ(first_difference(at_rows, alone), -1)
            << "token " << at << " of " << tokens << ", max_pairs " << max_pairs;
      }
    }
  }
}

// A hand-made grouping: expert 3 lists pairs 5 and 1, expert 0 pair 2; the other five rows of
// out stay poisoned.
TEST(MoeGroupedGemv, WritesOnlyTheListedRows) {
  auto gen = rng(51);
  const int64_t n = 64, k = 128, rows = 8, capacity = 3 * kMoeBlockM;
  const ExpertWeights w(gen, 4, n, k);
  std::vector<int32_t> sorted(capacity, -1);
  sorted[0] = 5;
  sorted[1] = 1;
  sorted[kMoeBlockM] = 2;
  const std::vector<int32_t> blocks = {3, 0, -1};
  const std::vector<float> a = random_bf16_values(gen, static_cast<size_t>(rows * k));
  DeviceArray<int32_t> sorted_d = upload(sorted), blocks_d = upload(blocks);
  DeviceArray<bf16> a_d = upload_bf16(a), out(rows * n);
  moe_grouped_gemv(out.data(), a_d.data(), w.device.data(), sorted_d.data(), blocks_d.data(), capacity, 1, n, k, 2,
                   nullptr);
  const std::vector<float> got = download_f32(out);
  for (int64_t p = 0; p < rows; ++p) {
    const int expert = p == 5 || p == 1 ? 3 : p == 2 ? 0 : -1;
    std::vector<float> want(static_cast<size_t>(n)), mine(got.begin() + p * n, got.begin() + (p + 1) * n);
    if (expert < 0) {
      for (float v : mine) ASSERT_TRUE(std::isnan(v)) << "row " << p << " is not listed";
      continue;
    }
    for (int64_t j = 0; j < n; ++j) want[j] = static_cast<float>(dot(a.data() + p * k, w.row(expert, j), k));
    EXPECT_LT(gpu_test::relative_error(mine, want), 5e-3) << "row " << p;
  }
}

// No allocation, no synchronization, nothing read back: global capture mode fails on any of them.
TEST(MoeGroupedGemv, RunsInsideCudaGraphCapture) {
  auto gen = rng(52);
  const ExpertWeights w(gen, 16, 256, 512);
  const std::vector<int32_t> ids = route_distinct(gen, 3, 16, 4, 7);
  const int64_t rows = 12, capacity = moe_sorted_capacity(rows, 16);
  const DeviceArray<bf16> a_d = upload_bf16(random_bf16_values(gen, static_cast<size_t>(3 * w.k)));
  const std::vector<uint16_t> eager = bits_of(run_grouped(w, a_d, ids, 4, 3));
  DeviceArray<int32_t> ids_d = upload(ids), sorted(capacity), blocks(capacity / kMoeBlockM);
  moe_align(sorted.data(), blocks.data(), ids_d.data(), rows, 16, capacity, nullptr);
  DeviceArray<bf16> out(rows * w.n);
  TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
  cudaStream_t stream = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamCreate(&stream));
  cudaGraph_t graph = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  moe_grouped_gemv(out.data(), a_d.data(), w.device.data(), sorted.data(), blocks.data(), capacity, 4, w.n, w.k, 3,
                   stream);
  TACHYON_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  TACHYON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    out.poison();
    TACHYON_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(first_difference(bits_of(out.download()), eager), -1) << "replay " << replay;
  }
  TACHYON_CUDA_CHECK(cudaGraphExecDestroy(exec));
  TACHYON_CUDA_CHECK(cudaGraphDestroy(graph));
  TACHYON_CUDA_CHECK(cudaStreamDestroy(stream));
}

using gpu_test::error_of;

TEST(MoeGroupedGemv, RejectsArgumentsWithClearMessages) {
  DeviceArray<bf16> buffer(64);
  bf16* p = buffer.data();
  const auto call = [&](bf16* out, int64_t capacity, int64_t divisor, int64_t n, int64_t k, int32_t max_pairs) {
    return error_of([&] { moe_grouped_gemv(out, p, p, nullptr, nullptr, capacity, divisor, n, k, max_pairs, nullptr); });
  };
  const auto says = [](const std::string& message, const char* what) {
    return message.find(what) != std::string::npos;
  };
  EXPECT_TRUE(says(call(p, 64, 1, 12, 64, 1), "n 12"));
  EXPECT_TRUE(says(call(p, 64, 1, 64, 60, 1), "k 60"));
  EXPECT_TRUE(says(call(p, 64, 0, 64, 64, 1), "a_row_divisor 0"));
  EXPECT_TRUE(says(call(p, 65, 1, 64, 64, 1), "capacity 65"));
  EXPECT_TRUE(says(call(p, 64, 1, 64, 64, 0), "max_pairs_per_expert 0"));
  EXPECT_TRUE(says(call(p, 64, 1, 64, 64, 9), "moe_grouped_gemm"));
  EXPECT_TRUE(says(call(p + 1, 64, 1, 64, 64, 1), "16-byte aligned"));
  EXPECT_EQ(call(p, 0, 1, 64, 64, 1), "");  // no pairs: nothing launched, nothing written
  for (float v : download_f32(buffer)) ASSERT_TRUE(std::isnan(v));
}

// --- moe_grouped_gemv_silu: the gate_up product with SwiGLU as its epilogue.

// moe_grouped_gemv_silu's [rows, n / 2] activations, and the two-kernel path's (moe_grouped_gemv
// into [rows, n], then silu_and_mul), both into poisoned outputs.
struct SiluRuns {
  std::vector<uint16_t> fused, separate;
};

SiluRuns run_silu_both_ways(const ExpertWeights& w, const DeviceArray<bf16>& a, const std::vector<int32_t>& ids,
                            int64_t divisor, int32_t max_pairs) {
  const int64_t rows = static_cast<int64_t>(ids.size()), capacity = moe_sorted_capacity(rows, w.experts);
  const int64_t inter = w.n / 2;
  DeviceArray<int32_t> ids_d = upload(ids), sorted(capacity), blocks(capacity / kMoeBlockM);
  moe_align(sorted.data(), blocks.data(), ids_d.data(), rows, w.experts, capacity, nullptr);
  DeviceArray<bf16> fused(rows * inter), gate_up(rows * w.n), separate(rows * inter);
  moe_grouped_gemv_silu(fused.data(), a.data(), w.device.data(), sorted.data(), blocks.data(), capacity, divisor,
                        inter, w.k, max_pairs, nullptr);
  moe_grouped_gemv(gate_up.data(), a.data(), w.device.data(), sorted.data(), blocks.data(), capacity, divisor, w.n,
                   w.k, max_pairs, nullptr);
  silu_and_mul(separate.data(), gate_up.data(), rows, inter, nullptr);
  return {bits_of(fused.download()), bits_of(separate.download())};
}

// Bit for bit the two-kernel path, at V2-Lite's gate_up for every T <= 8 and where warps split k
// (2 and 4 of them) or a warp holds 4 rows (M >= 4: two gate rows and their two up rows).
TEST(MoeGroupedGemvSilu, IsTheGemvThenSiluBitForBit) {
  auto gen = rng(53);
  struct Shape {
    int experts, top_k;
    int64_t n, k;
  };
  for (Shape sh : {Shape{64, 6, 2816, 2048}, Shape{6, 2, 48, 2184}, Shape{8, 3, 64, 4096}, Shape{16, 1, 16, 8}}) {
    const ExpertWeights w(gen, sh.experts, sh.n, sh.k);
    for (int64_t tokens : {1, 2, 3, 4, 6, 8}) {
      SCOPED_TRACE(testing::Message() << "n " << sh.n << " k " << sh.k << ", " << tokens << " tokens");
      const std::vector<int32_t> ids =
          sh.top_k == 1 ? std::vector<int32_t>(static_cast<size_t>(tokens), 5)
                        : route_distinct(gen, tokens, sh.experts, sh.top_k, static_cast<int>(gen() % sh.experts));
      const DeviceArray<bf16> a = upload_bf16(random_bf16_values(gen, static_cast<size_t>(tokens * sh.k)));
      const SiluRuns runs = run_silu_both_ways(w, a, ids, sh.top_k, static_cast<int32_t>(tokens));
      ASSERT_EQ(first_difference(runs.fused, runs.separate), -1);
      // Not vacuous: the activations are finite and not all zero (the outputs start poisoned).
      size_t nonzero = 0;
      for (uint16_t b : runs.fused) {
        ASSERT_NE(b & 0x7f80u, 0x7f80u) << "a NaN or infinity: an output left unwritten";
        nonzero += (b & 0x7fffu) != 0;
      }
      ASSERT_GT(nonzero, runs.fused.size() / 2);
    }
  }
}

TEST(MoeGroupedGemvSilu, RejectsAnIntermediateSizeItCannotPair) {
  DeviceArray<bf16> buffer(64);
  const std::string message = error_of([&] {
    moe_grouped_gemv_silu(buffer.data(), buffer.data(), buffer.data(), nullptr, nullptr, 64, 1, 6, 64, 1, nullptr);
  });
  EXPECT_NE(message.find("intermediate 6"), std::string::npos) << message;
}

// --- E4M3 experts (an FP8 run, model/fp8_projections.h): the grouped GEMV, its SwiGLU form and
// the GEMM, against the values the E4M3 weights stand for.

// Experts [experts, n, k] in the GPU FP8 form (E4M3 with one factor per row and 128 columns, from
// tensor/fp8.h's quantizer), and their values e4m3 * factor, which the reference multiplies by.
struct Fp8Experts {
  int experts;
  int64_t n, k;
  std::vector<float> values;  // [experts, n, k]
  DeviceArray<uint8_t> data;
  DeviceArray<float> scale;   // [experts * n, ceil(k / 128)]

  Fp8Experts(std::mt19937_64& gen, int experts_, int64_t n_, int64_t k_)
      : experts(experts_),
        n(n_),
        k(k_),
        values(static_cast<size_t>(experts_ * n_ * k_)),
        data(values.size()),
        scale(static_cast<size_t>(experts_ * n_ * ((k_ + 127) / 128))) {
    const std::vector<float> w = random_weight_values(gen, values.size());
    const Fp8BlockWeight q = quantize_fp8_blocks(w, experts * n, k, 1, 128);
    dequantize_fp8_blocks(q.data, q.scale_inv, experts * n, k, 1, 128, values);
    data.upload(q.data);
    scale.upload(q.scale_inv);
  }
  const float* row(int e, int64_t j) const { return values.data() + (e * n + j) * k; }
};

std::vector<bf16> run_fp8_grouped(const Fp8Experts& w, const DeviceArray<bf16>& a, const std::vector<int32_t>& ids,
                                  int64_t divisor, int32_t max_pairs) {
  return run_grouped_product(w.experts, w.n, ids, [&](bf16* out, const int32_t* sorted, const int32_t* blocks,
                                                      int64_t capacity) {
    if (max_pairs > 0) {
      moe_grouped_gemv(out, a.data(), w.data.data(), w.scale.data(), sorted, blocks, capacity, divisor, w.n, w.k,
                       max_pairs, nullptr);
    } else {
      moe_grouped_gemm(out, a.data(), w.data.data(), w.scale.data(), sorted, blocks, capacity, divisor, w.n, w.k,
                       nullptr);
    }
  });
}

// Every pair row of the E4M3 GEMV (max_pairs > 0) or GEMM (0) against the reference in double.
void check_fp8_routed(std::mt19937_64& gen, const Fp8Experts& w, const std::vector<int32_t>& ids, int64_t divisor,
                      int32_t max_pairs) {
  const int64_t rows = static_cast<int64_t>(ids.size()), n = w.n, k = w.k;
  const std::vector<float> a = random_bf16_values(gen, static_cast<size_t>(rows / divisor * k));
  const std::vector<float> got = floats_of(run_fp8_grouped(w, upload_bf16(a), ids, divisor, max_pairs));
  std::vector<float> want(static_cast<size_t>(rows * n));
  for (int64_t p = 0; p < rows; ++p) {
    for (int64_t j = 0; j < n; ++j) {
      want[p * n + j] = static_cast<float>(dot(a.data() + p / divisor * k, w.row(ids[p], j), k));
    }
  }
  EXPECT_LT(gpu_test::relative_error(got, want), 5e-3) << (max_pairs > 0 ? "the GEMV" : "the GEMM");
}

TEST(MoeFp8Experts, GemvAndGemmMatchTheReferenceOnTheValuesTheWeightsStandFor) {
  auto gen = rng(57);
  // V2-Lite's gate_up and down widths (8 experts, to keep the CPU quantizer quick); a k that ends
  // 16 values into a factor block (2192 = 17 * 128 + 16); k 96 (one factor block, the GEMM's
  // second 64-wide slice partial); k 32, the tiny DeepSeek models' expert width.
  const ExpertsShape shapes[] = {{8, 6, 2816, 2048, 6}, {8, 6, 2048, 1408, 1}, {6, 2, 40, 2192, 2}, {16, 4, 200, 96, 1},
                                 {16, 4, 64, 32, 4}};
  for (const ExpertsShape& sh : shapes) {
    const Fp8Experts w(gen, sh.experts, sh.n, sh.k);
    for (int64_t tokens : {1, 3, 8, 130}) {
      SCOPED_TRACE(testing::Message() << sh.experts << " experts, n " << sh.n << " k " << sh.k << ", divisor "
                                      << sh.divisor << ", " << tokens << " tokens");
      const std::vector<int32_t> ids = route_distinct(gen, tokens, sh.experts, sh.top_k);
      if (tokens <= 8) check_fp8_routed(gen, w, ids, sh.divisor, static_cast<int32_t>(tokens));
      check_fp8_routed(gen, w, ids, sh.divisor, 0);
      if (HasFailure()) return;
    }
  }
}

// The SwiGLU epilogue is bit for bit the E4M3 GEMV then silu_and_mul, and a token's rows are the
// same bits alone and in a batch that shares its experts (the bf16 kernel's determinism rule).
TEST(MoeFp8Experts, SiluIsTheGemvThenSiluAndATokensRowsDoNotDependOnItsBatch) {
  auto gen = rng(58);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{2816, 2048}, {48, 2192}, {64, 32}}) {
    SCOPED_TRACE(testing::Message() << "n " << n << " k " << k);
    const int experts = 8, top_k = 3;
    const Fp8Experts w(gen, experts, n, k);
    const std::vector<int32_t> mine = route_distinct(gen, 1, experts, top_k);
    const std::vector<float> my_a = random_bf16_values(gen, static_cast<size_t>(k));
    const std::vector<uint16_t> alone = bits_of(run_fp8_grouped(w, upload_bf16(my_a), mine, top_k, 1));
    for (int64_t tokens : {1, 4, 8}) {
      const int64_t at = static_cast<int64_t>(gen() % tokens);
      std::vector<int32_t> ids;
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<int32_t> theirs = mine;
        if (t != at) std::shuffle(theirs.begin(), theirs.end(), gen);
        ids.insert(ids.end(), theirs.begin(), theirs.end());
      }
      std::vector<float> a = random_bf16_values(gen, static_cast<size_t>(tokens * k));
      std::copy(my_a.begin(), my_a.end(), a.begin() + at * k);
      const DeviceArray<bf16> a_d = upload_bf16(a);
      const int32_t max_pairs = static_cast<int32_t>(tokens);
      const std::vector<uint16_t> batch = bits_of(run_fp8_grouped(w, a_d, ids, top_k, max_pairs));
      const std::vector<uint16_t> at_rows(batch.begin() + at * top_k * n, batch.begin() + (at + 1) * top_k * n);
      EXPECT_EQ(first_difference(at_rows, alone), -1) << "token " << at << " of " << tokens;

      const int64_t rows = tokens * top_k, capacity = moe_sorted_capacity(rows, experts);
      DeviceArray<int32_t> ids_d = upload(ids), sorted(capacity), blocks(capacity / kMoeBlockM);
      moe_align(sorted.data(), blocks.data(), ids_d.data(), rows, experts, capacity, nullptr);
      DeviceArray<bf16> fused(rows * n / 2), gate_up(rows * n), separate(rows * n / 2);
      moe_grouped_gemv_silu(fused.data(), a_d.data(), w.data.data(), w.scale.data(), sorted.data(), blocks.data(),
                            capacity, top_k, n / 2, k, max_pairs, nullptr);
      moe_grouped_gemv(gate_up.data(), a_d.data(), w.data.data(), w.scale.data(), sorted.data(), blocks.data(),
                       capacity, top_k, n, k, max_pairs, nullptr);
      silu_and_mul(separate.data(), gate_up.data(), rows, n / 2, nullptr);
      const std::vector<uint16_t> fused_bits = bits_of(fused.download());
      ASSERT_EQ(first_difference(fused_bits, bits_of(separate.download())), -1) << tokens << " tokens";
      for (uint16_t b : fused_bits) ASSERT_NE(b & 0x7f80u, 0x7f80u) << "a NaN or infinity: an output left unwritten";
    }
  }
}

// moe_grouped_gemm_fp8: the inputs quantized per row and 128 columns on the GPU
// (fp8_quantize_rows, byte for byte the CPU quantizer) times the E4M3 experts, against the
// reference in double over the values both operands stand for. The error left is the output's
// bf16 rounding; a product that kept the bf16 inputs (or lost a factor) is an FP8 rounding or more
// away, several times the bound.
std::vector<bf16> run_fp8_by_fp8(const Fp8Experts& w, const std::vector<float>& a, int64_t a_rows,
                                 const std::vector<int32_t>& ids, int64_t divisor) {
  const DeviceArray<bf16> a_d = upload_bf16(a);
  DeviceArray<uint8_t> a8(static_cast<size_t>(a_rows * w.k));
  DeviceArray<float> a_scale(static_cast<size_t>(a_rows * ((w.k + 127) / 128)));
  fp8_quantize_rows(a8.data(), a_scale.data(), a_d.data(), a_rows, a_rows, w.k, nullptr);
  return run_grouped_product(w.experts, w.n, ids, [&](bf16* out, const int32_t* sorted, const int32_t* blocks,
                                                      int64_t capacity) {
    moe_grouped_gemm_fp8(out, a8.data(), a_scale.data(), a_rows, w.data.data(), w.scale.data(), sorted, blocks,
                         capacity, divisor, w.n, w.k, nullptr);
  });
}

TEST(MoeFp8ByFp8Gemm, MatchesTheReferenceOnTheValuesBothOperandsStandFor) {
  auto gen = rng(59);
  // As MoeFp8Experts' shapes, plus n 264 (a third 128-column tile with 8 columns) and k 256.
  const ExpertsShape shapes[] = {{8, 6, 2816, 2048, 6}, {8, 6, 2048, 1408, 1}, {6, 2, 40, 2192, 2}, {16, 4, 200, 96, 1},
                                 {16, 4, 64, 32, 4}, {4, 2, 264, 256, 2}};
  for (const ExpertsShape& sh : shapes) {
    const Fp8Experts w(gen, sh.experts, sh.n, sh.k);
    for (int64_t tokens : {1, 9, 130}) {
      SCOPED_TRACE(testing::Message() << sh.experts << " experts, n " << sh.n << " k " << sh.k << ", divisor "
                                      << sh.divisor << ", " << tokens << " tokens");
      const std::vector<int32_t> ids = route_distinct(gen, tokens, sh.experts, sh.top_k);
      const int64_t rows = static_cast<int64_t>(ids.size()), a_rows = rows / sh.divisor, n = sh.n, k = sh.k;
      const std::vector<float> a = random_bf16_values(gen, static_cast<size_t>(a_rows * k));
      std::vector<float> a_values(a.size());
      const Fp8BlockWeight q = quantize_fp8_blocks(a, a_rows, k, 1, 128);
      dequantize_fp8_blocks(q.data, q.scale_inv, a_rows, k, 1, 128, a_values);
      const std::vector<float> got = floats_of(run_fp8_by_fp8(w, a, a_rows, ids, sh.divisor));
      std::vector<float> want(static_cast<size_t>(rows * n));
      for (int64_t p = 0; p < rows; ++p) {
        for (int64_t j = 0; j < n; ++j) {
          want[p * n + j] = static_cast<float>(dot(a_values.data() + p / sh.divisor * k, w.row(ids[p], j), k));
        }
      }
      EXPECT_LT(gpu_test::relative_error(got, want), 5e-3);
      if (HasFailure()) return;
    }
  }
}

TEST(MoeFp8ByFp8Gemm, RejectsWhatItCannotServe) {
  DeviceArray<bf16> out(4096);
  DeviceArray<uint8_t> bytes(4096);
  DeviceArray<float> scale(64);
  const std::string odd_k = error_of([&] {
    moe_grouped_gemm_fp8(out.data(), bytes.data(), scale.data(), 8, bytes.data(), scale.data(), nullptr, nullptr, 64,
                         1, 64, 40, nullptr);
  });
  EXPECT_NE(odd_k.find("k 40"), std::string::npos) << odd_k;
  const std::string no_factors = error_of([&] {
    moe_grouped_gemm_fp8(out.data(), bytes.data(), nullptr, 8, bytes.data(), scale.data(), nullptr, nullptr, 64, 1,
                         64, 64, nullptr);
  });
  EXPECT_NE(no_factors.find("no factors"), std::string::npos) << no_factors;
}

TEST(MoeFp8Experts, RejectWhatTheyCannotServe) {
  DeviceArray<bf16> buffer(4096);
  DeviceArray<uint8_t> weight(4096);
  DeviceArray<float> scale(64);
  const std::string odd_k = error_of([&] {
    moe_grouped_gemv(buffer.data(), buffer.data(), weight.data(), scale.data(), nullptr, nullptr, 64, 1, 64, 24, 1,
                     nullptr);
  });
  EXPECT_NE(odd_k.find("k 24"), std::string::npos) << odd_k;
  const std::string odd_gemm_k = error_of([&] {
    moe_grouped_gemm(buffer.data(), buffer.data(), weight.data(), scale.data(), nullptr, nullptr, 64, 1, 64, 40,
                     nullptr);
  });
  EXPECT_NE(odd_gemm_k.find("k 40"), std::string::npos) << odd_gemm_k;
  const std::string no_factors = error_of([&] {
    moe_grouped_gemm(buffer.data(), buffer.data(), weight.data(), nullptr, nullptr, nullptr, 64, 1, 64, 64, nullptr);
  });
  EXPECT_NE(no_factors.find("no factors"), std::string::npos) << no_factors;
}

// --- moe_route_decode: router product, top-k and align in one launch.

struct RouteCase {
  int experts, top_k;
  int64_t hidden;
  bool sigmoid_grouped, renormalize;
  int n_group = 1, topk_group = 1;
};

struct RouteResult {
  std::vector<float> logits, weights;
  std::vector<int32_t> ids, sorted, blocks;
};

// One moe_route_decode launch into poisoned outputs.
RouteResult run_route(const RouteCase& c, const bf16* hidden, const DeviceArray<bf16>& weight, const float* bias,
                      int64_t tokens, unsigned int* arrivals, cudaStream_t stream = nullptr,
                      MoeExpertWindow window = {}) {
  const int64_t capacity = moe_sorted_capacity(tokens * c.top_k, window.count > 0 ? window.count : c.experts);
  DeviceArray<float> logits(tokens * c.experts), weights(tokens * c.top_k);
  DeviceArray<int32_t> ids(tokens * c.top_k), sorted(capacity), blocks(capacity / kMoeBlockM);
  MoeRouting routing;
  routing.sigmoid_grouped = c.sigmoid_grouped;
  routing.top_k = c.top_k;
  routing.renormalize = c.renormalize;
  routing.correction_bias = bias;
  routing.n_group = c.n_group;
  routing.topk_group = c.topk_group;
  routing.routed_scaling_factor = 2.5f;
  routing.window = window;
  moe_route_decode({logits.data(), ids.data(), weights.data(), sorted.data(), blocks.data(), capacity}, hidden,
                   weight.data(), tokens, c.hidden, c.experts, routing, arrivals, stream);
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream));
  return {logits.download(), weights.download(), ids.download(), sorted.download(), blocks.download()};
}

// Each block's listed pairs as a sorted set (the order within an expert is free).
std::vector<std::vector<int32_t>> pairs_by_block(const std::vector<int32_t>& sorted) {
  std::vector<std::vector<int32_t>> blocks(sorted.size() / kMoeBlockM);
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] >= 0) blocks[i / kMoeBlockM].push_back(sorted[i]);
  }
  for (auto& b : blocks) std::sort(b.begin(), b.end());
  return blocks;
}

// The fused launch against its parts: logits against double dot products, ids and weights bit
// for bit those of the top-k kernel on the same logits, the grouping that of moe_align on those
// ids, and each token's logits the same bits when it is routed alone.
void check_route(std::mt19937_64& gen, const RouteCase& c, int64_t tokens, unsigned int* arrivals) {
  const std::vector<float> hidden = random_bf16_values(gen, static_cast<size_t>(tokens * c.hidden));
  const std::vector<float> weight = random_bf16_values(gen, static_cast<size_t>(c.experts * c.hidden), 0.05f);
  std::vector<float> bias = gpu_test::random_floats(gen, static_cast<size_t>(c.experts), 0.3f);
  const DeviceArray<bf16> hidden_d = upload_bf16(hidden), weight_d = upload_bf16(weight);
  const DeviceArray<float> bias_d = upload(bias);
  const float* bias_ptr = c.sigmoid_grouped ? bias_d.data() : nullptr;
  const RouteResult got = run_route(c, hidden_d.data(), weight_d, bias_ptr, tokens, arrivals);

  for (int64_t t = 0; t < tokens; ++t) {
    for (int e = 0; e < c.experts; ++e) {
      const float* x = hidden.data() + t * c.hidden;
      const float* w = weight.data() + e * c.hidden;
      double magnitude = 0;
      for (int64_t i = 0; i < c.hidden; ++i) magnitude += std::abs(double(x[i]) * w[i]);
      const float logit = got.logits[static_cast<size_t>(t * c.experts + e)];
      ASSERT_NEAR(logit, dot(x, w, c.hidden), 1e-5 * magnitude + 1e-30) << "token " << t << " expert " << e;
    }
  }

  // The separate kernels on the fused launch's own logits.
  const DeviceArray<float> logits_d = upload(got.logits);
  DeviceArray<int32_t> ids_d(tokens * c.top_k);
  DeviceArray<float> weights_d(tokens * c.top_k);
  if (c.sigmoid_grouped) {
    moe_topk_sigmoid_grouped(ids_d.data(), weights_d.data(), logits_d.data(), bias_ptr, tokens, c.experts, c.top_k,
                             c.n_group, c.topk_group, c.renormalize, 2.5f, nullptr);
  } else {
    moe_topk_softmax(ids_d.data(), weights_d.data(), logits_d.data(), tokens, c.experts, c.top_k, c.renormalize,
                     nullptr);
  }
  ASSERT_EQ(got.ids, ids_d.download());
  const std::vector<float> want_weights = weights_d.download();
  ASSERT_EQ(std::memcmp(got.weights.data(), want_weights.data(), want_weights.size() * sizeof(float)), 0);
  const int64_t capacity = moe_sorted_capacity(tokens * c.top_k, c.experts);
  DeviceArray<int32_t> sorted_d(capacity), blocks_d(capacity / kMoeBlockM);
  moe_align(sorted_d.data(), blocks_d.data(), ids_d.data(), tokens * c.top_k, c.experts, capacity, nullptr);
  ASSERT_EQ(got.blocks, blocks_d.download());
  ASSERT_EQ(pairs_by_block(got.sorted), pairs_by_block(sorted_d.download()));

  // Expert parallelism: with a window (the second half of the experts) the same ids and weights,
  // and the grouping moe_align makes with that window.
  if (c.experts % 2 == 0) {
    const MoeExpertWindow window{c.experts / 2, c.experts / 2};
    const RouteResult half = run_route(c, hidden_d.data(), weight_d, bias_ptr, tokens, arrivals, nullptr, window);
    ASSERT_EQ(half.ids, got.ids);
    ASSERT_EQ(std::memcmp(half.weights.data(), got.weights.data(), got.weights.size() * sizeof(float)), 0);
    const int64_t half_capacity = moe_sorted_capacity(tokens * c.top_k, window.count);
    DeviceArray<int32_t> half_sorted(half_capacity), half_blocks(half_capacity / kMoeBlockM);
    moe_align(half_sorted.data(), half_blocks.data(), ids_d.data(), tokens * c.top_k, c.experts, half_capacity,
              nullptr, window);
    ASSERT_EQ(half.blocks, half_blocks.download());
    ASSERT_EQ(pairs_by_block(half.sorted), pairs_by_block(half_sorted.download()));
  }

  for (int64_t t = 0; t < tokens; ++t) {
    const RouteResult alone = run_route(c, hidden_d.data() + t * c.hidden, weight_d, bias_ptr, 1, arrivals);
    ASSERT_EQ(std::memcmp(alone.logits.data(), got.logits.data() + t * c.experts, c.experts * sizeof(float)), 0)
        << "token " << t << " alone";
  }
}

// Qwen3-MoE-like softmax (128 experts, top 8, renormalized), V2-Lite's (64, top 6), Mixtral's (8,
// top 2), a ragged one (5 experts, hidden 72: 9 chunks for 32 lanes), DeepSeek-V3's grouped
// sigmoid (256 in 8 groups, 4 kept, top 8, hidden 7168) and a tiny grouped one. One counter for
// every launch: a launch that left it non-zero would leave the next one without a last CTA.
TEST(MoeRouteDecode, MatchesTheSeparateKernelsAndLeavesTheCounterAtZero) {
  auto gen = rng(54);
  DeviceArray<unsigned int> arrivals(1);
  TACHYON_CUDA_CHECK(cudaMemset(arrivals.data(), 0, sizeof(unsigned int)));
  const std::vector<RouteCase> cases = {
      {128, 8, 2048, false, true}, {64, 6, 2048, false, false},     {8, 2, 4096, false, true},
      {5, 2, 72, false, false},    {256, 8, 7168, true, true, 8, 4}, {16, 4, 64, true, false, 4, 2}};
  for (const RouteCase& c : cases) {
    for (int64_t tokens : {1, 3, 8}) {
      SCOPED_TRACE(testing::Message() << c.experts << " experts, top " << c.top_k << ", hidden " << c.hidden
                                      << (c.sigmoid_grouped ? ", grouped sigmoid" : ", softmax") << ", " << tokens
                                      << " tokens");
      check_route(gen, c, tokens, arrivals.data());
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_EQ(arrivals.download()[0], 0u);
}

TEST(MoeRouteDecode, ReplaysInsideACudaGraph) {
  auto gen = rng(55);
  const RouteCase c{64, 6, 2048, false, false};
  DeviceArray<unsigned int> arrivals(1);
  TACHYON_CUDA_CHECK(cudaMemset(arrivals.data(), 0, sizeof(unsigned int)));
  DeviceArray<bf16> hidden(2 * c.hidden);
  const DeviceArray<bf16> weight = upload_bf16(random_bf16_values(gen, static_cast<size_t>(c.experts * c.hidden)));
  const int64_t capacity = moe_sorted_capacity(2 * c.top_k, c.experts);
  DeviceArray<float> logits(2 * c.experts), weights(2 * c.top_k);
  DeviceArray<int32_t> ids(2 * c.top_k), sorted(capacity), blocks(capacity / kMoeBlockM);
  MoeRouting routing;
  routing.top_k = c.top_k;
  cudaStream_t stream = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  moe_route_decode({logits.data(), ids.data(), weights.data(), sorted.data(), blocks.data(), capacity},
                   hidden.data(), weight.data(), 2, c.hidden, c.experts, routing, arrivals.data(), stream);
  TACHYON_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  TACHYON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {  // new hidden rows each time, checked against an eager launch
    SCOPED_TRACE(testing::Message() << "replay " << replay);
    const DeviceArray<bf16> fresh = upload_bf16(random_bf16_values(gen, static_cast<size_t>(2 * c.hidden)));
    TACHYON_CUDA_CHECK(cudaMemcpy(hidden.data(), fresh.data(), 2 * c.hidden * sizeof(bf16), cudaMemcpyDeviceToDevice));
    ids.poison();
    TACHYON_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream));
    const RouteResult eager = run_route(c, hidden.data(), weight, nullptr, 2, arrivals.data());
    EXPECT_EQ(ids.download(), eager.ids);
    EXPECT_EQ(pairs_by_block(sorted.download()), pairs_by_block(eager.sorted));
  }
  EXPECT_EQ(arrivals.download()[0], 0u);
  TACHYON_CUDA_CHECK(cudaGraphExecDestroy(exec));
  TACHYON_CUDA_CHECK(cudaGraphDestroy(graph));
  TACHYON_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(MoeRouteDecode, RejectsWhatItCannotServe) {
  DeviceArray<bf16> buffer(64);
  DeviceArray<unsigned int> arrivals(1);
  MoeRouting routing;
  routing.top_k = 2;
  const auto call = [&](int64_t tokens, int64_t hidden, int32_t experts, unsigned int* counter) {
    const int64_t capacity = moe_sorted_capacity(std::max<int64_t>(tokens, 0) * 2, std::max(experts, 1));
    return error_of([&] {
      moe_route_decode({nullptr, nullptr, nullptr, nullptr, nullptr, capacity}, buffer.data(), buffer.data(), tokens,
                       hidden, experts, routing, counter, nullptr);
    });
  };
  EXPECT_NE(call(9, 64, 8, arrivals.data()).find("9 tokens"), std::string::npos);
  EXPECT_NE(call(0, 64, 8, arrivals.data()).find("0 tokens"), std::string::npos);
  EXPECT_NE(call(1, 60, 8, arrivals.data()).find("hidden_size 60"), std::string::npos);
  EXPECT_NE(call(1, 64, 300, arrivals.data()).find("300 experts"), std::string::npos);
  EXPECT_NE(call(1, 64, 8, nullptr).find("arrivals"), std::string::npos);
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

// Expert parallelism: with a window the combine adds only the pairs of its experts, in the same
// order, and never reads the other pairs' rows (NaN here: another rank's, never written). A
// window holding every expert is the plain combine bit for bit.
TEST(MoeCombine, AWindowAddsOnlyItsExpertsPairs) {
  auto gen = rng(48);
  const int experts = 16, k = 4;
  const int64_t tokens = 29, hidden = 264;
  std::vector<int32_t> ids(static_cast<size_t>(tokens * k));
  std::uniform_int_distribution<int32_t> pick(0, experts - 1);
  for (int32_t& id : ids) id = pick(gen);
  const std::vector<float> rows = random_bf16_values(gen, static_cast<size_t>(tokens * k * hidden));
  const std::vector<float> addend = random_bf16_values(gen, static_cast<size_t>(tokens * hidden));
  const std::vector<float> weights = gpu_test::random_floats(gen, static_cast<size_t>(tokens * k), 0.5f);
  const DeviceArray<int32_t> ids_d = upload(ids);
  const DeviceArray<float> weights_d = upload(weights);
  const DeviceArray<bf16> addend_d = upload_bf16(addend);
  for (const MoeExpertWindow window : {MoeExpertWindow{0, 4}, MoeExpertWindow{4, 4}, MoeExpertWindow{8, 8}}) {
    SCOPED_TRACE(testing::Message() << "experts [" << window.begin << ", " << window.begin + window.count << ")");
    auto mine = [&](int64_t pair) { return ids[pair] >= window.begin && ids[pair] < window.begin + window.count; };
    std::vector<float> poisoned = rows, want(static_cast<size_t>(tokens * hidden), 0.0f);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < hidden; ++h) {
        float sum = 0.0f;
        for (int j = 0; j < k; ++j) {
          const int64_t pair = t * k + j;
          if (mine(pair)) sum += weights[pair] * rows[pair * hidden + h];
        }
        want[t * hidden + h] = sum + addend[t * hidden + h];
      }
      for (int j = 0; j < k; ++j) {
        if (!mine(t * k + j)) std::fill_n(poisoned.begin() + (t * k + j) * hidden, hidden, NAN);
      }
    }
    const DeviceArray<bf16> rows_d = upload_bf16(poisoned);
    DeviceArray<bf16> out(tokens * hidden);
    moe_combine(out.data(), rows_d.data(), weights_d.data(), addend_d.data(), tokens, k, hidden, nullptr, ids_d.data(),
                window);
    const std::vector<float> got = download_f32(out);
    ASSERT_TRUE(std::all_of(got.begin(), got.end(), [](float v) { return std::isfinite(v); }))
        << "another rank's row was read";
    EXPECT_LT(gpu_test::relative_error(got, want), 5e-3);
  }
  const DeviceArray<bf16> rows_d = upload_bf16(rows);
  DeviceArray<bf16> plain(tokens * hidden), all(tokens * hidden);
  moe_combine(plain.data(), rows_d.data(), weights_d.data(), addend_d.data(), tokens, k, hidden, nullptr);
  moe_combine(all.data(), rows_d.data(), weights_d.data(), addend_d.data(), tokens, k, hidden, nullptr, ids_d.data(),
              MoeExpertWindow{0, experts});
  EXPECT_TRUE(download_f32(plain) == download_f32(all));
  EXPECT_THROW(moe_combine(all.data(), rows_d.data(), weights_d.data(), nullptr, tokens, k, hidden, nullptr, nullptr,
                           MoeExpertWindow{0, 4}),
               Error);  // a window without the ids
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
