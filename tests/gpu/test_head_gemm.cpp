// HeadGemm (kernels/cuda/head_gemm.h) against per-head loops on the CPU, on MLA's two uses: the
// query absorption (B_h [k, n] row blocks of kv_b_proj) and the value expansion (B_h^T), with
// operands that are strided slices of wider rows, as the runner passes them.
// Run: build-*/tests/gpu_head_gemm (GPU machine); TACHYON_TEST_SEED=<seed> replays a failure.
#include "tachyon/kernels/cuda/head_gemm.h"

#include <vector>

#include "gpu_test_util.h"

namespace tachyon::kernels::cuda {
namespace {

using gpu_test::kBf16Tolerance;

struct MlaDims {
  int64_t tokens, heads, nope, rope, rank, v;
};

class HeadGemmTest : public ::testing::TestWithParam<MlaDims> {};

TEST_P(HeadGemmTest, AbsorbsQueriesAndExpandsLatentsLikeTheCpu) {
  const MlaDims d = GetParam();
  auto gen = gpu_test::rng(static_cast<uint64_t>(d.tokens * 131 + d.heads));
  const int64_t qk = d.nope + d.rope, qa = d.rank + d.rope, kvb = d.nope + d.v;
  const std::vector<float> q = gpu_test::random_bf16_values(gen, static_cast<size_t>(d.tokens * d.heads * qk));
  const std::vector<float> kv_b = gpu_test::random_bf16_values(gen, static_cast<size_t>(d.heads * kvb * d.rank), 0.1f);
  const std::vector<float> latent = gpu_test::random_bf16_values(gen, static_cast<size_t>(d.tokens * d.heads * d.rank));
  auto q_dev = gpu_test::upload_bf16(q), kv_b_dev = gpu_test::upload_bf16(kv_b), latent_dev = gpu_test::upload_bf16(latent);
  gpu_test::DeviceArray<bf16> absorbed(static_cast<size_t>(d.tokens * d.heads * qa));  // poisoned
  gpu_test::DeviceArray<bf16> expanded(static_cast<size_t>(d.tokens * d.heads * d.v));
  HeadGemm gemm;
  // q_latent[t, h, :rank] = q[t, h, :nope] @ W_uk_h, W_uk_h = kv_b rows h * kvb .. + nope.
  gemm.run(absorbed.data(), d.heads * qa, qa, {q_dev.data(), d.heads * qk, qk}, {kv_b_dev.data(), d.rank, kvb * d.rank},
           HeadGemmB::kNone, d.tokens, d.rank, d.nope, d.heads, nullptr);
  // out[t, h, :v] = latent[t, h] @ W_uv_h^T, W_uv_h = kv_b rows h * kvb + nope .. + v.
  gemm.run(expanded.data(), d.heads * d.v, d.v, {latent_dev.data(), d.heads * d.rank, d.rank},
           {kv_b_dev.data() + d.nope * d.rank, d.rank, kvb * d.rank}, HeadGemmB::kTransposed, d.tokens, d.v, d.rank,
           d.heads, nullptr);
  const std::vector<float> got_absorbed = gpu_test::download_f32(absorbed);
  const std::vector<float> got_expanded = gpu_test::download_f32(expanded);

  std::vector<float> want_absorbed, got_part, want_expanded;
  for (int64_t t = 0; t < d.tokens; ++t) {
    for (int64_t h = 0; h < d.heads; ++h) {
      for (int64_t r = 0; r < d.rank; ++r) {
        double sum = 0.0;
        for (int64_t i = 0; i < d.nope; ++i) {
          sum += static_cast<double>(q[static_cast<size_t>((t * d.heads + h) * qk + i)]) *
                 kv_b[static_cast<size_t>((h * kvb + i) * d.rank + r)];
        }
        want_absorbed.push_back(static_cast<float>(sum));
        got_part.push_back(got_absorbed[static_cast<size_t>((t * d.heads + h) * qa + r)]);
      }
      // The rope tail of each absorbed row is not the product's: it must stay poisoned (NaN).
      for (int64_t r = d.rank; r < qa; ++r) {
        EXPECT_TRUE(std::isnan(got_absorbed[static_cast<size_t>((t * d.heads + h) * qa + r)])) << "wrote past rank";
      }
      for (int64_t j = 0; j < d.v; ++j) {
        double sum = 0.0;
        for (int64_t r = 0; r < d.rank; ++r) {
          sum += static_cast<double>(latent[static_cast<size_t>((t * d.heads + h) * d.rank + r)]) *
                 kv_b[static_cast<size_t>((h * kvb + d.nope + j) * d.rank + r)];
        }
        want_expanded.push_back(static_cast<float>(sum));
      }
    }
  }
  EXPECT_LT(gpu_test::relative_error(got_part, want_absorbed), kBf16Tolerance);
  EXPECT_LT(gpu_test::relative_error(got_expanded, want_expanded), kBf16Tolerance);
}

INSTANTIATE_TEST_SUITE_P(Shapes, HeadGemmTest,
                         ::testing::Values(MlaDims{1, 16, 128, 64, 512, 128},   // DeepSeek-V2-Lite decode (head_gemv.cu)
                                           MlaDims{8, 16, 128, 64, 512, 128},   // the largest decode batch it takes
                                           MlaDims{37, 16, 128, 64, 512, 128},  // a prefill chunk
                                           MlaDims{5, 4, 16, 8, 16, 16},        // tiny-deepseek
                                           MlaDims{3, 128, 128, 64, 512, 128}));  // DeepSeek-V3's heads

// Up to 8 rows run head_gemv.cu's kernels: a row's product must not depend on how many rows
// share the launch (batch invariance of decode), for both layouts.
TEST(HeadGemm, DecodeRowsGetTheSameBitsAloneOrInABatch) {
  const MlaDims d{8, 16, 128, 64, 512, 128};
  auto gen = gpu_test::rng(77);
  const int64_t qk = d.nope + d.rope, kvb = d.nope + d.v;
  auto q = gpu_test::upload_bf16(gpu_test::random_bf16_values(gen, static_cast<size_t>(d.tokens * d.heads * qk)));
  auto kv_b = gpu_test::upload_bf16(gpu_test::random_bf16_values(gen, static_cast<size_t>(d.heads * kvb * d.rank), 0.1f));
  auto latent = gpu_test::upload_bf16(gpu_test::random_bf16_values(gen, static_cast<size_t>(d.tokens * d.heads * d.rank)));
  HeadGemm gemm;
  auto absorb = [&](int64_t m) {
    gpu_test::DeviceArray<bf16> out(static_cast<size_t>(m * d.heads * d.rank));
    gemm.run(out.data(), d.heads * d.rank, d.rank, {q.data(), d.heads * qk, qk}, {kv_b.data(), d.rank, kvb * d.rank},
             HeadGemmB::kNone, m, d.rank, d.nope, d.heads, nullptr);
    return gpu_test::download_f32(out);
  };
  auto expand = [&](int64_t m) {
    gpu_test::DeviceArray<bf16> out(static_cast<size_t>(m * d.heads * d.v));
    gemm.run(out.data(), d.heads * d.v, d.v, {latent.data(), d.heads * d.rank, d.rank},
             {kv_b.data() + d.nope * d.rank, d.rank, kvb * d.rank}, HeadGemmB::kTransposed, m, d.v, d.rank, d.heads,
             nullptr);
    return gpu_test::download_f32(out);
  };
  const std::vector<float> absorbed_8 = absorb(8), expanded_8 = expand(8);
  for (int64_t m = 1; m < 8; ++m) {
    const std::vector<float> absorbed = absorb(m), expanded = expand(m);
    for (size_t i = 0; i < absorbed.size(); ++i) {
      ASSERT_EQ(absorbed[i], absorbed_8[i]) << "absorption, m " << m << ", element " << i;
    }
    for (size_t i = 0; i < expanded.size(); ++i) {
      ASSERT_EQ(expanded[i], expanded_8[i]) << "expansion, m " << m << ", element " << i;
    }
  }
}

TEST(HeadGemm, EmptyBatchLaunchesNothingAndBadShapesAreRefused) {
  HeadGemm gemm;
  EXPECT_NO_THROW(gemm.run(nullptr, 8, 8, {nullptr, 8, 8}, {nullptr, 8, 64}, HeadGemmB::kNone, 0, 8, 8, 2, nullptr));
  EXPECT_THROW(gemm.run(nullptr, 8, 8, {nullptr, 8, 8}, {nullptr, 8, 64}, HeadGemmB::kNone, 1, 0, 8, 2, nullptr), Error);
}

}  // namespace
}  // namespace tachyon::kernels::cuda
