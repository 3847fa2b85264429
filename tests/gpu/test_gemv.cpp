// gemv (kernels/cuda/gemv.h) against its CPU twin kernels::cpu::linear for every m in 1..8 on
// model-sized and awkward shapes, both output types, with and without bias, outputs poisoned
// with a guard after them; the argument checks;
// graph capture; gemv_silu (the SwiGLU epilogue) bit for bit against gemv then silu_and_mul.
// Their timing beside GemmRunner::linear lives in bench/kernels/bench_gemv.cpp.
// Run: build-*/tests/gpu_gemv (GPU machine); TACHYON_TEST_SEED=<seed> replays a failure.
#include "tachyon/kernels/cuda/gemv.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "swiglu_epilogue_check.h"
#include "tachyon/kernels/cuda/gemm.h"
#include "tachyon/kernels/linear.h"

namespace tachyon::kernels::cuda {
namespace {

using gpu_test::DeviceArray;
using gpu_test::kBf16Tolerance;

constexpr double kF32Tolerance = 1e-4;  // bf16 operands are exact in f32: only the sum order differs
constexpr size_t kGuard = 64;           // poisoned elements after each output that must stay poisoned
constexpr int64_t kMaxRows = 8;

// A blocking stream: it waits for the legacy-stream memsets that poison DeviceArrays.
using gpu_test::Stream;

// One weight with 8 input rows; a product with m rows uses the first m (bf16-representable f32
// on the host, bf16 on the device).
struct Operands {
  int64_t n, k;
  std::vector<float> in, weight, bias;  // [8, k], [n, k], [n]
  DeviceArray<bf16> in_device, weight_device, bias_device;

  Operands(int64_t n_, int64_t k_, uint64_t salt) : Operands(n_, k_, gpu_test::rng(salt)) {}
  Operands(int64_t n_, int64_t k_, std::mt19937_64 gen)
      : n(n_), k(k_),
        in(gpu_test::random_bf16_values(gen, kMaxRows * k)),
        weight(gpu_test::random_bf16_values(gen, n * k, 0.05f)),
        bias(gpu_test::random_bf16_values(gen, n)),
        in_device(gpu_test::upload_bf16(in)),
        weight_device(gpu_test::upload_bf16(weight)),
        bias_device(gpu_test::upload_bf16(bias)) {}

  // out[m, n] = in[:m] @ weight^T (+ bias), the CPU reference.
  std::vector<float> reference(int64_t m, bool with_bias) const {
    std::vector<float> out(m * n);
    cpu::linear(out.data(), in.data(), weight.data(), with_bias ? bias.data() : nullptr, m, k, n);
    return out;
  }
};

// gemv into a poisoned output, returned as f32; checks that the guard after it stays poisoned.
std::vector<float> run_gemv(const Operands& ops, int64_t m, GemmOutputType out_type, bool with_bias,
                            cudaStream_t stream) {
  const size_t count = m * ops.n;
  const bf16* bias = with_bias ? ops.bias_device.data() : nullptr;
  std::vector<float> all;
  if (out_type == GemmOutputType::kBF16) {
    DeviceArray<bf16> out(count + kGuard);
    gemv(out.data(), out_type, ops.in_device.data(), ops.weight_device.data(), bias, m, ops.n, ops.k, stream);
    all = gpu_test::download_f32(out);
  } else {
    DeviceArray<float> out(count + kGuard);
    gemv(out.data(), out_type, ops.in_device.data(), ops.weight_device.data(), bias, m, ops.n, ops.k, stream);
    all = out.download();
  }
  for (size_t i = count; i < all.size(); ++i) EXPECT_TRUE(std::isnan(all[i])) << "guard element " << i - count;
  all.resize(count);
  return all;
}

struct Variant {
  GemmOutputType out_type;
  bool with_bias;
};
const std::vector<Variant> kAllVariants = {
    {GemmOutputType::kBF16, false}, {GemmOutputType::kBF16, true}, {GemmOutputType::kF32, false}};

void expect_matches_cpu(const Operands& ops, const std::vector<Variant>& variants, cudaStream_t stream) {
  for (int64_t m = 1; m <= kMaxRows; ++m) {
    const std::vector<float> plain = ops.reference(m, false);
    std::vector<float> biased = plain;
    for (size_t i = 0; i < biased.size(); ++i) biased[i] += ops.bias[i % ops.n];
    for (const Variant& v : variants) {
      const double tolerance = v.out_type == GemmOutputType::kF32 ? kF32Tolerance : kBf16Tolerance;
      const double error =
          gpu_test::relative_error(run_gemv(ops, m, v.out_type, v.with_bias, stream), v.with_bias ? biased : plain);
      EXPECT_LT(error, tolerance) << "m=" << m << " n=" << ops.n << " k=" << ops.k
                                  << " out=" << (v.out_type == GemmOutputType::kF32 ? "f32" : "bf16")
                                  << " bias=" << (v.with_bias ? "yes" : "no");
    }
  }
}

// Llama-3-8B's qkv, o_proj and down projections, then awkward ones: n not a multiple of the
// rows a warp owns, k not a multiple of a warp's 32 chunks, a single chunk per lane or less,
// and (200, 4104): few rows, so 2-4 warps split k, whose 513 chunks leave ragged slices.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{4096, 4096}, {6144, 4096}, {4096, 14336},
                                                          {2048, 2048}, {136, 200},   {97, 1000},
                                                          {200, 4104},  {8, 16},      {3, 8}};

TEST(Gemv, MatchesCpuLinearForEveryRowCount) {
  Stream stream;
  uint64_t salt = 0;
  for (auto [n, k] : kShapes) expect_matches_cpu(Operands(n, k, ++salt), kAllVariants, stream.stream);
}

TEST(Gemv, LmHeadWithF32Logits) {
  Stream stream;
  expect_matches_cpu(Operands(32000, 2048, 100), {{GemmOutputType::kF32, false}}, stream.stream);
}

using gpu_test::error_of;

TEST(Gemv, SupportsAndRejectsWithClearMessages) {
  EXPECT_TRUE(gemv_supports(1, 4096, 4096));
  EXPECT_TRUE(gemv_supports(8, 97, 8));
  EXPECT_FALSE(gemv_supports(0, 4096, 4096));
  EXPECT_FALSE(gemv_supports(9, 4096, 4096));
  EXPECT_FALSE(gemv_supports(1, 4096, 4092));
  EXPECT_FALSE(gemv_supports(1, 0, 4096));

  Operands ops(136, 200, 200);
  DeviceArray<bf16> out(8 * 136);
  DeviceArray<float> out_f32(8 * 136);
  const bf16* in = ops.in_device.data();
  const bf16* w = ops.weight_device.data();
  auto call = [&](int64_t m, const bf16* in_, const bf16* w_, const bf16* b, GemmOutputType type, int64_t k) {
    void* o = type == GemmOutputType::kBF16 ? static_cast<void*>(out.data()) : static_cast<void*>(out_f32.data());
    return error_of([&] { gemv(o, type, in_, w_, b, m, 136, k, nullptr); });
  };
  EXPECT_NE(call(9, in, w, nullptr, GemmOutputType::kBF16, 200).find("m=9"), std::string::npos);
  EXPECT_NE(call(1, in, w, nullptr, GemmOutputType::kBF16, 196).find("k=196"), std::string::npos);
  EXPECT_NE(call(1, in + 1, w, nullptr, GemmOutputType::kBF16, 200).find("in ("), std::string::npos);
  EXPECT_NE(call(1, in, w + 4, nullptr, GemmOutputType::kBF16, 200).find("weight ("), std::string::npos);
  EXPECT_NE(call(1, in, w, ops.bias_device.data(), GemmOutputType::kF32, 200).find("bias"), std::string::npos);
  EXPECT_EQ(call(1, in, w, ops.bias_device.data(), GemmOutputType::kBF16, 200), "");
  out.poison();  // m == 0 writes nothing
  gemv(out.data(), GemmOutputType::kBF16, in, w, nullptr, 0, 136, 200, nullptr);
  for (float v : gpu_test::download_f32(out)) ASSERT_TRUE(std::isnan(v));
}

// No allocation, no synchronization: global capture mode fails on any unsafe call.
TEST(Gemv, RunsInsideCudaGraphCapture) {
  Stream stream;
  Operands ops(6144, 4096, 300);
  const int64_t m = 3;
  DeviceArray<bf16> out(m * ops.n);
  cudaGraph_t graph = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamBeginCapture(stream.stream, cudaStreamCaptureModeGlobal));
  gemv(out.data(), GemmOutputType::kBF16, ops.in_device.data(), ops.weight_device.data(), ops.bias_device.data(), m,
       ops.n, ops.k, stream.stream);
  TACHYON_CUDA_CHECK(cudaStreamEndCapture(stream.stream, &graph));
  cudaGraphExec_t exec = nullptr;
  TACHYON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    out.poison();
    TACHYON_CUDA_CHECK(cudaGraphLaunch(exec, stream.stream));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream.stream));
    EXPECT_LT(gpu_test::relative_error(gpu_test::download_f32(out), ops.reference(m, true)), kBf16Tolerance);
  }
  TACHYON_CUDA_CHECK(cudaGraphExecDestroy(exec));
  TACHYON_CUDA_CHECK(cudaGraphDestroy(graph));
}

// Llama-3.2-1B's and Llama-3-8B's gate_up, then few rows (warps split k) and k not a multiple
// of a warp's chunks.
const std::vector<std::pair<int64_t, int64_t>> kGateUpShapes = {{16384, 2048}, {28672, 4096}, {80, 200}, {208, 1000}};

TEST(GemvSilu, EqualsGemvThenSiluAndMulBitForBit) {
  Stream stream;
  uint64_t salt = 400;
  for (auto [n, k] : kGateUpShapes) {
    const Operands ops(n, k, ++salt);
    for (int64_t m = 1; m <= kMaxRows; ++m) {
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(testing::Message() << "m=" << m << " n=" << n << " k=" << k << " bias=" << with_bias);
        const bf16* bias = with_bias ? ops.bias_device.data() : nullptr;
        gpu_test::expect_swiglu_epilogue_matches_product_then_silu(
            m, n,
            [&](bf16* out) {
              gemv(out, GemmOutputType::kBF16, ops.in_device.data(), ops.weight_device.data(), bias, m, n, k,
                   stream.stream);
            },
            [&](bf16* act) {
              gemv_silu(act, ops.in_device.data(), ops.weight_device.data(), bias, m, n, k, stream.stream);
            });
      }
    }
  }
}

TEST(GemvSilu, SupportsAndRejectsWithClearMessages) {
  EXPECT_TRUE(gemv_silu_supports(8, 28672, 4096));
  EXPECT_FALSE(gemv_silu_supports(1, 28680, 4096));  // 14340 activations: not a multiple of 8
  EXPECT_FALSE(gemv_silu_supports(9, 28672, 4096));
  Operands ops(80, 200, 500);
  DeviceArray<bf16> act(8 * 40);
  const bf16* in = ops.in_device.data();
  const bf16* w = ops.weight_device.data();
  EXPECT_NE(error_of([&] { gemv_silu(act.data(), in, w, nullptr, 1, 72, 200, nullptr); }).find("n=72"),
            std::string::npos);
  EXPECT_NE(error_of([&] { gemv_silu(act.data(), in + 1, w, nullptr, 1, 80, 200, nullptr); }).find("in ("),
            std::string::npos);
  EXPECT_EQ(error_of([&] { gemv_silu(act.data(), in, w, nullptr, 2, 80, 200, nullptr); }), "");
}

}  // namespace
}  // namespace tachyon::kernels::cuda
