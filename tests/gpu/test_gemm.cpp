// GemmRunner (kernels/cuda/gemm.h) against its CPU twin kernels::cpu::linear: model-sized and
// awkward shapes, both output types, with and without bias, outputs poisoned with a guard
// after them, after tune(), inside a CUDA graph, and the algorithm cache's round trip.
// Run: build-*/tests/gpu_gemm (GPU machine); TACHYON_TEST_SEED=<seed> replays a failure.
#include "tachyon/kernels/cuda/gemm.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu_test_util.h"
#include "tachyon/kernels/linear.h"

namespace tachyon::kernels::cuda {
namespace {

using gpu_test::DeviceArray;
using gpu_test::kBf16Tolerance;

// bf16 operands are exact in f32, so an f32 output differs from the CPU's f32 product
// (kernels/cpu/fixed_order_gemm.h) only by the order of the f32 sums.
constexpr double kF32Tolerance = 1e-4;
constexpr size_t kGuard = 64;  // poisoned elements after each output that must stay poisoned

// A blocking stream: it waits for the legacy-stream memsets that poison DeviceArrays.
using gpu_test::Stream;

// One product's operands on the host (bf16-representable f32) and on the device.
struct Operands {
  int64_t m, n, k;
  std::vector<float> in, weight, bias;  // [m, k], [n, k], [n]
  DeviceArray<bf16> in_device, weight_device, bias_device;

  Operands(int64_t m_, int64_t n_, int64_t k_, uint64_t salt)
      : Operands(m_, n_, k_, gpu_test::rng(salt)) {}
  Operands(int64_t m_, int64_t n_, int64_t k_, std::mt19937_64 gen)
      : m(m_), n(n_), k(k_),
        in(gpu_test::random_bf16_values(gen, m * k)),
        weight(gpu_test::random_bf16_values(gen, n * k, 0.05f)),
        bias(gpu_test::random_bf16_values(gen, n)),
        in_device(gpu_test::upload_bf16(in)),
        weight_device(gpu_test::upload_bf16(weight)),
        bias_device(gpu_test::upload_bf16(bias)) {}

  // out[m, n] = in @ weight^T (+ bias), the CPU reference.
  std::vector<float> reference(bool with_bias) const {
    std::vector<float> out(m * n);
    cpu::linear(out.data(), in.data(), weight.data(), with_bias ? bias.data() : nullptr, m, k, n);
    return out;
  }
};

// Runs runner.linear into a poisoned output and returns it as f32; checks that the guard
// elements after the output were not written.
std::vector<float> run_linear(GemmRunner& runner, const Operands& ops, GemmOutputType out_type, bool with_bias,
                              cudaStream_t stream) {
  const size_t count = ops.m * ops.n;
  const bf16* bias = with_bias ? ops.bias_device.data() : nullptr;
  std::vector<float> values(count);
  if (out_type == GemmOutputType::kBF16) {
    DeviceArray<bf16> out(count + kGuard);
    runner.linear(out.data(), out_type, ops.in_device.data(), ops.weight_device.data(), bias, ops.m, ops.n, ops.k,
                  stream);
    const std::vector<float> all = gpu_test::download_f32(out);
    for (size_t i = count; i < all.size(); ++i) EXPECT_TRUE(std::isnan(all[i])) << "guard element " << i - count;
    std::copy(all.begin(), all.begin() + count, values.begin());
  } else {
    DeviceArray<float> out(count + kGuard);
    runner.linear(out.data(), out_type, ops.in_device.data(), ops.weight_device.data(), bias, ops.m, ops.n, ops.k,
                  stream);
    const std::vector<float> all = out.download();
    for (size_t i = count; i < all.size(); ++i) EXPECT_TRUE(std::isnan(all[i])) << "guard element " << i - count;
    std::copy(all.begin(), all.begin() + count, values.begin());
  }
  return values;
}

struct Variant {
  GemmOutputType out_type;
  bool with_bias;
};
// A bf16 bias with an f32 output is its own test: cuBLASLt documents the bias type as the
// output's, and whether it takes bf16 there is for the GPU to tell.
const std::vector<Variant> kCommonVariants = {
    {GemmOutputType::kBF16, false}, {GemmOutputType::kBF16, true}, {GemmOutputType::kF32, false}};

// The given variants of one product against the CPU.
void expect_matches_cpu(GemmRunner& runner, const Operands& ops, const std::vector<Variant>& variants,
                        cudaStream_t stream) {
  const std::vector<float> plain = ops.reference(false);
  std::vector<float> biased = plain;  // the same sums plus the bias: one sgemm, not two
  for (size_t i = 0; i < biased.size(); ++i) biased[i] += ops.bias[i % ops.n];
  for (const Variant& v : variants) {
    const GemmProblem problem{.m = ops.m, .n = ops.n, .k = ops.k, .out_type = v.out_type, .has_bias = v.with_bias};
    const double tolerance = v.out_type == GemmOutputType::kF32 ? kF32Tolerance : kBf16Tolerance;
    const double error = gpu_test::relative_error(run_linear(runner, ops, v.out_type, v.with_bias, stream),
                                                  v.with_bias ? biased : plain);
    EXPECT_LT(error, tolerance) << to_string(problem);
  }
}

// The variant a problem names, against the CPU.
void expect_matches_cpu(GemmRunner& runner, const GemmProblem& p, uint64_t salt, cudaStream_t stream) {
  expect_matches_cpu(runner, Operands(p.m, p.n, p.k, salt), {{p.out_type, p.has_bias}}, stream);
}

using gpu_test::error_of;

int count_lines_with(const std::string& text, const std::string& word) {
  int count = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++count;
  return count;
}

std::string temporary_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + std::to_string(gpu_test::test_seed()) + ".json")).string();
}

// n, k pairs: Llama-8B's square and fused-QKV projections, a Qwen2-1.5B-like MLP, and an
// awkward small one (multiples of 8 but of nothing larger).
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{4096, 4096}, {6144, 4096}, {896, 1536}, {136, 200}};
const std::vector<int64_t> kRows = {1, 3, 17, 64, 300};

TEST(Gemm, MatchesCpuLinearOnModelShapes) {
  Stream stream;
  GemmRunner runner;
  uint64_t salt = 0;
  for (auto [n, k] : kShapes) {
    for (int64_t m : kRows) expect_matches_cpu(runner, Operands(m, n, k, ++salt), kCommonVariants, stream.stream);
  }
  std::printf("%s", runner.algo_summary().c_str());
}

// cuBLASLt wants the bias in the output type (bf16 bias, f32 out is refused on the H200); the
// runner says so up front instead of failing inside cuBLASLt. No LM head has a bias.
TEST(Gemm, F32OutputWithBf16BiasIsRefusedWithAClearMessage) {
  Stream stream;
  GemmRunner runner;
  Operands op(1, 4096, 4096, 50);
  DeviceArray<float> out(4096);
  try {
    runner.linear(out.data(), GemmOutputType::kF32, op.in_device.data(), op.weight_device.data(),
                  op.bias_device.data(), 1, 4096, 4096, stream.stream);
    FAIL() << "f32 output with a bf16 bias must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bias"), std::string::npos) << e.what();
  }
}

TEST(Gemm, RejectsUnsupportedShapesAndUnalignedPointers) {
  GemmRunner runner;
  Operands ops(3, 136, 200, 100);
  DeviceArray<bf16> out(3 * 136 + 8);
  auto call = [&](void* o, const bf16* in, const bf16* w, const bf16* b, int64_t n, int64_t k) {
    return error_of([&] { runner.linear(o, GemmOutputType::kBF16, in, w, b, 3, n, k, nullptr); });
  };
  const bf16* in = ops.in_device.data();
  const bf16* w = ops.weight_device.data();
  EXPECT_NE(call(out.data(), in, w, nullptr, 97, 200).find("multiples of 8"), std::string::npos);
  EXPECT_NE(call(out.data(), in, w, nullptr, 136, 196).find("multiples of 8"), std::string::npos);
  EXPECT_NE(call(out.data(), in + 1, w, nullptr, 136, 200).find("in ("), std::string::npos);
  EXPECT_NE(call(out.data(), in, w + 4, nullptr, 136, 200).find("weight ("), std::string::npos);
  EXPECT_NE(call(out.data() + 2, in, w, nullptr, 136, 200).find("out ("), std::string::npos);
  EXPECT_NE(call(out.data(), in, w, ops.bias_device.data() + 1, 136, 200).find("bias ("), std::string::npos);
  EXPECT_EQ(call(out.data(), in, w, nullptr, 136, 200), "");  // the aligned call runs
  // m == 0 is a no-op that writes nothing.
  out.poison();
  runner.linear(out.data(), GemmOutputType::kBF16, in, w, nullptr, 0, 136, 200, nullptr);
  for (float v : gpu_test::download_f32(out)) ASSERT_TRUE(std::isnan(v));
}

const std::vector<GemmProblem> kTuneProblems = {
    {.m = 1, .n = 4096, .k = 4096},
    {.m = 64, .n = 6144, .k = 4096, .has_bias = true},
    {.m = 17, .n = 896, .k = 1536, .out_type = GemmOutputType::kF32},
    {.m = 300, .n = 136, .k = 200, .has_bias = true},
};

TEST(Gemm, TunedAlgorithmsStayCorrect) {
  Stream stream;
  GemmRunner runner;
  runner.tune(kTuneProblems, stream.stream, {.candidates = 8, .warmup = 2, .repeats = 5});
  const std::string summary = runner.algo_summary();
  std::printf("%s", summary.c_str());
  EXPECT_EQ(count_lines_with(summary, "tuned"), static_cast<int>(kTuneProblems.size()));
  uint64_t salt = 200;
  for (const GemmProblem& p : kTuneProblems) expect_matches_cpu(runner, p, ++salt, stream.stream);
}

TEST(Gemm, CacheRoundTripNeedsTheSameKey) {
  Stream stream;
  const std::string path = temporary_path("tachyon_gemm_cache_");
  const std::string key = "plan-hash-1234";
  GemmRunner tuned;
  tuned.tune(kTuneProblems, stream.stream, {.candidates = 4, .warmup = 1, .repeats = 3});
  tuned.save_cache(path, key);

  GemmRunner loaded;
  ASSERT_TRUE(loaded.load_cache(path, key));
  EXPECT_EQ(loaded.algo_summary(), tuned.algo_summary());
  uint64_t salt = 300;
  for (const GemmProblem& p : kTuneProblems) expect_matches_cpu(loaded, p, ++salt, stream.stream);

  GemmRunner other;
  EXPECT_FALSE(other.load_cache(path, "plan-hash-5678"));
  EXPECT_FALSE(other.load_cache(path + ".missing", key));
  EXPECT_EQ(other.algo_summary(), "");  // a refused file changes nothing

  // A file from another cuBLASLt, with a damaged algorithm, or not JSON at all: refused.
  nlohmann::json file = nlohmann::json::parse(std::ifstream(path));
  auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  nlohmann::json old_version = file;
  old_version["cublaslt_version"] = 1;
  write(old_version.dump());
  EXPECT_FALSE(other.load_cache(path, key));
  nlohmann::json damaged = file;
  damaged["entries"][0]["algo"] = "zz";
  write(damaged.dump());
  EXPECT_FALSE(other.load_cache(path, key));
  write("{ not json");
  EXPECT_FALSE(other.load_cache(path, key));
  write(file.dump());
  EXPECT_TRUE(other.load_cache(path, key));
  std::filesystem::remove(path);
}

// A steady-state linear() (shape seen before) records into a CUDA graph: no allocation, no
// synchronization. Global capture mode makes any unsafe call anywhere fail the capture.
TEST(Gemm, RunsInsideCudaGraphCapture) {
  Stream stream;
  GemmRunner runner;
  Operands ops(17, 896, 1536, 400);
  run_linear(runner, ops, GemmOutputType::kBF16, true, stream.stream);  // warm-up, eager
  DeviceArray<bf16> out(ops.m * ops.n);
  cudaGraph_t graph = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamBeginCapture(stream.stream, cudaStreamCaptureModeGlobal));
  runner.linear(out.data(), GemmOutputType::kBF16, ops.in_device.data(), ops.weight_device.data(),
                ops.bias_device.data(), ops.m, ops.n, ops.k, stream.stream);
  TACHYON_CUDA_CHECK(cudaStreamEndCapture(stream.stream, &graph));
  cudaGraphExec_t exec = nullptr;
  TACHYON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    out.poison();
    TACHYON_CUDA_CHECK(cudaGraphLaunch(exec, stream.stream));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream.stream));
    EXPECT_LT(gpu_test::relative_error(gpu_test::download_f32(out), ops.reference(true)), kBf16Tolerance);
  }
  TACHYON_CUDA_CHECK(cudaGraphExecDestroy(exec));
  TACHYON_CUDA_CHECK(cudaGraphDestroy(graph));
}

}  // namespace
}  // namespace tachyon::kernels::cuda
