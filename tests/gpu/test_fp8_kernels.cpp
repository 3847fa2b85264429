// The FP8 weight kernels against their CPU twins on fresh random FP8 weights (tensor/fp8.h's
// quantizer; factors per row and 128 columns as model/fp8_projections.h makes them), outputs
// poisoned with a guard after them:
// - fp8_gemv (kernels/cuda/gemv.h) for every m in 1..8 on model-sized and awkward shapes, both
//   output types, with and without bias, against dequantize + kernels::cpu::linear in f32;
// - fp8_gemv_silu (the SwiGLU epilogue) bit for bit against fp8_gemv then silu_and_mul;
// - fp8_dequantize (kernels/cuda/fp8.h) bit for bit against bf16(fp8 * factor);
// - both inside CUDA graph capture; the argument checks.
// Run: build-*/tests/gpu_fp8_kernels (GPU machine); TACHYON_TEST_SEED=<seed> replays a failure.
#include <cmath>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "swiglu_epilogue_check.h"
#include "tachyon/kernels/cuda/fp8.h"
#include "tachyon/kernels/cuda/gemv.h"
#include "tachyon/kernels/linear.h"
#include "tachyon/tensor/fp8.h"

namespace tachyon::kernels::cuda {
namespace {

using gpu_test::DeviceArray;
using gpu_test::kBf16Tolerance;

constexpr double kF32Tolerance = 1e-4;  // the weights are exact in f32 on both sides: only sum order differs
constexpr size_t kGuard = 64;
constexpr int64_t kMaxRows = 8;

using gpu_test::Stream;

// An FP8 weight [n, k] in the GPU form with 8 bf16 input rows; `dequantized` is what the CPU
// reference multiplies by.
struct Fp8Operands {
  int64_t n, k;
  std::vector<float> in, bias, dequantized;
  Fp8BlockWeight weight;
  DeviceArray<bf16> in_device, bias_device;
  DeviceArray<uint8_t> weight_device;
  DeviceArray<float> scale_device;

  Fp8Operands(int64_t n_, int64_t k_, uint64_t salt) : Fp8Operands(n_, k_, gpu_test::rng(salt)) {}
  Fp8Operands(int64_t n_, int64_t k_, std::mt19937_64 gen)
      : n(n_), k(k_), in(gpu_test::random_bf16_values(gen, kMaxRows * k)), bias(gpu_test::random_bf16_values(gen, n)),
        weight(make_weight(gen, n_, k_)), in_device(gpu_test::upload_bf16(in)), bias_device(gpu_test::upload_bf16(bias)),
        weight_device(gpu_test::upload(weight.data)), scale_device(gpu_test::upload(weight.scale_inv)) {
    dequantized.resize(static_cast<size_t>(n * k));
    dequantize_fp8_blocks(weight.data, weight.scale_inv, n, k, 1, 128, dequantized);
  }

  // Rows with magnitudes spread over 4 decades, so the factors differ by row and by column span.
  static Fp8BlockWeight make_weight(std::mt19937_64& gen, int64_t n, int64_t k) {
    std::vector<float> w = gpu_test::random_floats(gen, static_cast<size_t>(n * k), 0.05f);
    std::uniform_real_distribution<float> decade(-2.0f, 2.0f);
    for (int64_t r = 0; r < n; ++r) {
      const float row_scale = std::pow(10.0f, decade(gen));
      for (int64_t c = 0; c < k; ++c) w[r * k + c] *= row_scale * (c / 128 % 2 == 0 ? 1.0f : 3.0f);
    }
    return quantize_fp8_blocks(w, n, k, 1, 128);
  }

  std::vector<float> reference(int64_t m, bool with_bias) const {
    std::vector<float> out(m * n);
    cpu::linear(out.data(), in.data(), dequantized.data(), with_bias ? bias.data() : nullptr, m, k, n);
    return out;
  }
};

std::vector<float> run_fp8_gemv(const Fp8Operands& ops, int64_t m, GemmOutputType out_type, bool with_bias,
                                cudaStream_t stream) {
  const size_t count = m * ops.n;
  const bf16* bias = with_bias ? ops.bias_device.data() : nullptr;
  std::vector<float> all;
  if (out_type == GemmOutputType::kBF16) {
    DeviceArray<bf16> out(count + kGuard);
    fp8_gemv(out.data(), out_type, ops.in_device.data(), ops.weight_device.data(), ops.scale_device.data(), bias, m,
             ops.n, ops.k, stream);
    all = gpu_test::download_f32(out);
  } else {
    DeviceArray<float> out(count + kGuard);
    fp8_gemv(out.data(), out_type, ops.in_device.data(), ops.weight_device.data(), ops.scale_device.data(), bias, m,
             ops.n, ops.k, stream);
    all = out.download();
  }
  for (size_t i = count; i < all.size(); ++i) EXPECT_TRUE(std::isnan(all[i])) << "guard element " << i - count;
  all.resize(count);
  return all;
}

// Llama-3-8B's qkv, o and down projections, DeepSeek's q_b and kv_a, then awkward ones: k not a
// multiple of 128 (a last factor over a partial span), n not a multiple of a warp's rows, few rows
// so warps split k, and one 16-value chunk per row.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{6144, 4096}, {4096, 4096}, {4096, 14336}, {24576, 1536},
                                                          {576, 7168},  {136, 208},   {97, 1040},    {200, 4112},
                                                          {8, 16}};

TEST(Fp8Gemv, MatchesDequantizedCpuLinearForEveryRowCount) {
  Stream stream;
  uint64_t salt = 0;
  for (auto [n, k] : kShapes) {
    const Fp8Operands ops(n, k, ++salt);
    for (int64_t m = 1; m <= kMaxRows; ++m) {
      const std::vector<float> plain = ops.reference(m, false);
      std::vector<float> biased = plain;
      for (size_t i = 0; i < biased.size(); ++i) biased[i] += ops.bias[i % ops.n];
      for (auto [type, with_bias] : {std::pair{GemmOutputType::kBF16, false}, std::pair{GemmOutputType::kBF16, true},
                                     std::pair{GemmOutputType::kF32, false}}) {
        const double tolerance = type == GemmOutputType::kF32 ? kF32Tolerance : kBf16Tolerance;
        const double error =
            gpu_test::relative_error(run_fp8_gemv(ops, m, type, with_bias, stream.stream), with_bias ? biased : plain);
        EXPECT_LT(error, tolerance) << "m=" << m << " n=" << n << " k=" << k
                                    << " out=" << (type == GemmOutputType::kF32 ? "f32" : "bf16")
                                    << " bias=" << (with_bias ? "yes" : "no");
      }
    }
  }
}

// Llama-3.2-1B's and Llama-3-8B's gate_up, then few rows (warps split k) and k not a multiple of 128.
TEST(Fp8GemvSilu, EqualsFp8GemvThenSiluAndMulBitForBit) {
  Stream stream;
  uint64_t salt = 600;
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{16384, 2048}, {28672, 4096}, {80, 208}, {208, 1008}}) {
    const Fp8Operands ops(n, k, ++salt);
    for (int64_t m = 1; m <= kMaxRows; ++m) {
      for (const bf16* bias : {static_cast<const bf16*>(nullptr), static_cast<const bf16*>(ops.bias_device.data())}) {
        SCOPED_TRACE(testing::Message() << "m=" << m << " n=" << n << " k=" << k << " bias=" << (bias != nullptr));
        gpu_test::expect_swiglu_epilogue_matches_product_then_silu(
            m, n,
            [&](bf16* out) {
              fp8_gemv(out, GemmOutputType::kBF16, ops.in_device.data(), ops.weight_device.data(),
                       ops.scale_device.data(), bias, m, n, k, stream.stream);
            },
            [&](bf16* act) {
              fp8_gemv_silu(act, ops.in_device.data(), ops.weight_device.data(), ops.scale_device.data(), bias, m, n,
                            k, stream.stream);
            });
      }
    }
  }
  EXPECT_FALSE(fp8_gemv_silu_supports(1, 28680, 4096));
  EXPECT_FALSE(fp8_gemv_silu_supports(1, 28672, 4104));  // k a multiple of 8, not of 16
}

TEST(Fp8Dequantize, IsBf16OfTheValueTimesItsFactor) {
  Stream stream;
  uint64_t salt = 100;
  for (auto [n, k] : std::vector<std::pair<int64_t, int64_t>>{{4096, 4096}, {97, 1000}, {3, 8}, {136, 208}}) {
    const Fp8Operands ops(n, k, ++salt);
    DeviceArray<bf16> out(static_cast<size_t>(n * k) + kGuard);
    fp8_dequantize(out.data(), ops.weight_device.data(), ops.scale_device.data(), n, k, stream.stream);
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream.stream));
    const std::vector<float> got = gpu_test::download_f32(out);
    for (size_t i = 0; i < ops.dequantized.size(); ++i) {
      ASSERT_EQ(got[i], bf16_to_f32(f32_to_bf16(ops.dequantized[i]))) << "n=" << n << " k=" << k << " [" << i << "]";
    }
    for (size_t i = ops.dequantized.size(); i < got.size(); ++i) ASSERT_TRUE(std::isnan(got[i])) << "guard " << i;
  }
}

TEST(Fp8Gemv, SupportsAndRejectsWithClearMessages) {
  EXPECT_TRUE(fp8_gemv_supports(1, 4096, 4096));
  EXPECT_TRUE(fp8_gemv_supports(8, 97, 16));
  EXPECT_FALSE(fp8_gemv_supports(9, 4096, 4096));
  EXPECT_FALSE(fp8_gemv_supports(1, 4096, 4104));  // a multiple of 8, not of 16
  EXPECT_FALSE(fp8_gemv_supports(0, 4096, 4096));
  const Fp8Operands ops(136, 208, 200);
  DeviceArray<bf16> out(8 * 136);
  auto call = [&](int64_t m, const bf16* in, const uint8_t* w, const float* s, int64_t k) {
    return gpu_test::error_of([&] { fp8_gemv(out.data(), GemmOutputType::kBF16, in, w, s, nullptr, m, 136, k, nullptr); });
  };
  const bf16* in = ops.in_device.data();
  const uint8_t* w = ops.weight_device.data();
  const float* s = ops.scale_device.data();
  EXPECT_NE(call(9, in, w, s, 208).find("m=9"), std::string::npos);
  EXPECT_NE(call(1, in, w, s, 200).find("k=200"), std::string::npos);
  EXPECT_NE(call(1, in + 1, w, s, 208).find("in ("), std::string::npos);
  EXPECT_NE(call(1, in, w + 8, s, 208).find("weight ("), std::string::npos);
  EXPECT_NE(call(1, in, w, nullptr, 208).find("factors"), std::string::npos);
  EXPECT_EQ(call(1, in, w, s, 208), "");
  EXPECT_NE(gpu_test::error_of([&] { fp8_dequantize(out.data(), w, s, 4, 12, nullptr); }).find("multiple of 8"),
            std::string::npos);
}

TEST(Fp8Gemv, RunsInsideCudaGraphCapture) {
  Stream stream;
  const Fp8Operands ops(6144, 4096, 300);
  const int64_t m = 3;
  DeviceArray<bf16> out(m * ops.n);
  DeviceArray<bf16> dequantized(static_cast<size_t>(ops.n * ops.k));
  cudaGraph_t graph = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamBeginCapture(stream.stream, cudaStreamCaptureModeGlobal));
  fp8_gemv(out.data(), GemmOutputType::kBF16, ops.in_device.data(), ops.weight_device.data(), ops.scale_device.data(),
           ops.bias_device.data(), m, ops.n, ops.k, stream.stream);
  fp8_dequantize(dequantized.data(), ops.weight_device.data(), ops.scale_device.data(), ops.n, ops.k, stream.stream);
  TACHYON_CUDA_CHECK(cudaStreamEndCapture(stream.stream, &graph));
  cudaGraphExec_t exec = nullptr;
  TACHYON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    out.poison();
    dequantized.poison();
    TACHYON_CUDA_CHECK(cudaGraphLaunch(exec, stream.stream));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream.stream));
    EXPECT_LT(gpu_test::relative_error(gpu_test::download_f32(out), ops.reference(m, true)), kBf16Tolerance);
    EXPECT_LT(gpu_test::relative_error(gpu_test::download_f32(dequantized), ops.dequantized), 4e-3);
  }
  TACHYON_CUDA_CHECK(cudaGraphExecDestroy(exec));
  TACHYON_CUDA_CHECK(cudaGraphDestroy(graph));
}

}  // namespace
}  // namespace tachyon::kernels::cuda
