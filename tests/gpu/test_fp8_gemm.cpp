// The FP8 product for more rows than the decode GEMV serves, against the CPU on fresh random
// inputs with outputs poisoned first:
// - fp8_quantize_rows (kernels/cuda/fp8.h) byte for byte and factor for factor against the CPU's
//   quantize_fp8_blocks(in, m, k, 1, 128) (tensor/fp8.h);
// - GemmRunner::linear_fp8 (kernels/cuda/gemm.h) against kernels::cpu::linear over the
//   dequantized quantized inputs and weights, with and without bias, on model shapes (which must
//   have a cuBLASLt algorithm on the GPU machine) and awkward ones (which may answer "no
//   algorithm", and must then leave the output untouched);
// - tune() over FP8 products and its cache; both inside CUDA graph capture; the argument checks.
// Run: build-*/tests/gpu_fp8_gemm (GPU machine); TACHYON_TEST_SEED=<seed> replays a failure.
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/kernels/cuda/fp8.h"
#include "tachyon/kernels/cuda/gemm.h"
#include "tachyon/kernels/linear.h"
#include "tachyon/tensor/fp8.h"

namespace tachyon::kernels::cuda {
namespace {

using gpu_test::DeviceArray;
using gpu_test::kBf16Tolerance;

constexpr size_t kGuard = 64;

using gpu_test::Stream;

int64_t blocks_of(int64_t k) { return (k + 127) / 128; }

// [rows, cols] values whose magnitudes differ by row (4 decades) and by 128-column span, with one
// all-zero span when there is room: every factor differs, and the all-zero rule is exercised.
std::vector<float> spread_values(std::mt19937_64& gen, int64_t rows, int64_t cols, float scale) {
  std::vector<float> v = gpu_test::random_bf16_values(gen, static_cast<size_t>(rows * cols), scale);
  std::uniform_real_distribution<float> decade(-2.0f, 2.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::pow(10.0f, decade(gen));
    for (int64_t c = 0; c < cols; ++c) {
      float& x = v[static_cast<size_t>(r * cols + c)];
      x = bf16_to_f32(f32_to_bf16(x * row_scale * (c / 128 % 2 == 0 ? 1.0f : 3.0f)));
      if (r == 1 && c < 128 && cols > 128) x = 0.0f;
    }
  }
  return v;
}

// The factors of a [rows, k] operand as cuBLASLt reads them: [ceil(k / 128), rows].
std::vector<float> by_block(const Fp8BlockWeight& q) {
  const int64_t blocks = q.scale_cols();
  std::vector<float> out(q.scale_inv.size());
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) out[b * q.rows + r] = q.scale_inv[r * blocks + b];
  }
  return out;
}

TEST(Fp8QuantizeRows, EqualsTheCpuQuantizerByteForByte) {
  Stream stream;
  uint64_t salt = 0;
  for (auto [m, k] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 4096}, {37, 14336}, {5, 208}, {300, 1040}, {3, 16}, {2, 7168}, {9, 1536}}) {
    std::mt19937_64 gen = gpu_test::rng(++salt);
    const std::vector<float> in = spread_values(gen, m, k, 2.0f);
    const Fp8BlockWeight cpu = quantize_fp8_blocks(in, m, k, 1, 128);
    const std::vector<float> cpu_scales = by_block(cpu);
    const DeviceArray<bf16> in_device = gpu_test::upload_bf16(in);
    DeviceArray<uint8_t> out(static_cast<size_t>(m * k) + kGuard);
    DeviceArray<float> scales(cpu_scales.size() + kGuard);
    fp8_quantize_rows(out.data(), scales.data(), in_device.data(), m, m, k, stream.stream);
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream.stream));
    const std::vector<uint8_t> got = out.download();
    const std::vector<float> got_scales = scales.download();
    size_t byte_mismatches = 0;
    for (size_t i = 0; i < cpu.data.size(); ++i) byte_mismatches += got[i] != cpu.data[i];
    EXPECT_EQ(byte_mismatches, 0u) << "m=" << m << " k=" << k;
    for (size_t i = 0; i < cpu_scales.size(); ++i) {
      ASSERT_EQ(got_scales[i], cpu_scales[i]) << "m=" << m << " k=" << k << " factor " << i;
    }
    // Past the outputs, the poison stays (0xFF bytes are E4M3 NaN; NaN factors).
    for (size_t i = cpu.data.size(); i < got.size(); ++i) ASSERT_EQ(got[i], 0xFF) << "guard byte " << i;
    for (size_t i = cpu_scales.size(); i < got_scales.size(); ++i) ASSERT_TRUE(std::isnan(got_scales[i]));
  }
}

// `quantize` (fp8_quantize_rows or its per-token form) of [m, k] spread values into padded_m rows
// against the CPU's quantize_fp8_blocks(in, m, k, 1, block_cols): the real rows' codes and
// factors (laid out [ceil(k / block_cols), padded_m]), the padding rows' zero codes with factor 1,
// nothing written past them (the guards keep their poison).
template <typename Quantize>
void expect_quantized_rows(int64_t m, int64_t padded_m, int64_t k, int64_t block_cols, uint64_t salt,
                           const Quantize& quantize) {
  Stream stream;
  std::mt19937_64 gen = gpu_test::rng(salt);
  const std::vector<float> in = spread_values(gen, m, k, 2.0f);
  const Fp8BlockWeight cpu = quantize_fp8_blocks(in, m, k, 1, block_cols);
  const int64_t blocks = (k + block_cols - 1) / block_cols;
  const DeviceArray<bf16> in_device = gpu_test::upload_bf16(in);
  DeviceArray<uint8_t> out(static_cast<size_t>(padded_m * k) + kGuard);
  DeviceArray<float> scales(static_cast<size_t>(padded_m * blocks) + kGuard);
  quantize(out.data(), scales.data(), in_device.data(), m, padded_m, k, stream.stream);
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream.stream));
  const std::vector<uint8_t> got = out.download();
  const std::vector<float> got_scales = scales.download();
  const std::string shape = "m=" + std::to_string(m) + " padded to " + std::to_string(padded_m) +
                            " k=" + std::to_string(k) + " factors per " + std::to_string(block_cols);
  size_t byte_mismatches = 0;
  for (size_t i = 0; i < cpu.data.size(); ++i) byte_mismatches += got[i] != cpu.data[i];
  EXPECT_EQ(byte_mismatches, 0u) << shape;
  for (size_t i = cpu.data.size(); i < static_cast<size_t>(padded_m * k); ++i) ASSERT_EQ(got[i], 0) << shape;
  for (size_t i = static_cast<size_t>(padded_m * k); i < got.size(); ++i) ASSERT_EQ(got[i], 0xFF) << shape;
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t r = 0; r < padded_m; ++r) {
      const float want = r < m ? cpu.scale_inv[static_cast<size_t>(r * blocks + b)] : 1.0f;
      ASSERT_EQ(got_scales[static_cast<size_t>(b * padded_m + r)], want) << shape << " row " << r << " block " << b;
    }
  }
  for (size_t i = static_cast<size_t>(padded_m * blocks); i < got_scales.size(); ++i) {
    ASSERT_TRUE(std::isnan(got_scales[i])) << shape;
  }
}

// Padded to more rows (the runner's products of row counts cuBLASLt refuses): the real rows as
// without padding, in the padded layout [ceil(k / 128), padded_m]; the padding rows zero codes
// with factor 1; nothing written past them.
TEST(Fp8QuantizeRows, PadsWithZeroRowsOfFactorOne) {
  uint64_t salt = 50;
  for (auto [m, padded_m, k] : std::vector<std::array<int64_t, 3>>{{281, 288, 4096}, {5, 16, 208}, {17, 48, 1040}}) {
    expect_quantized_rows(m, padded_m, k, 128, ++salt, fp8_quantize_rows);
  }
}

// One product's operands: input rows and a weight, both quantized as the runner quantizes them.
struct Fp8Product {
  int64_t m, n, k;
  Fp8BlockWeight in_q, weight_q;
  std::vector<float> bias;
  DeviceArray<bf16> bias_device;
  DeviceArray<uint8_t> in_device, weight_device;
  DeviceArray<float> in_scale, weight_scale;

  bool per_row;  // one factor per row of each operand (linear_fp8_per_row) instead of per 128 columns

  Fp8Product(int64_t m_, int64_t n_, int64_t k_, std::mt19937_64 gen, bool per_row_ = false)
      : m(m_), n(n_), k(k_),
        in_q(quantize_fp8_blocks(spread_values(gen, m_, k_, 1.0f), m_, k_, 1, per_row_ ? k_ : 128)),
        weight_q(quantize_fp8_blocks(spread_values(gen, n_, k_, 0.05f), n_, k_, 1, per_row_ ? k_ : 128)),
        bias(gpu_test::random_bf16_values(gen, static_cast<size_t>(n_))), bias_device(gpu_test::upload_bf16(bias)),
        in_device(gpu_test::upload(in_q.data)), weight_device(gpu_test::upload(weight_q.data)),
        in_scale(gpu_test::upload(by_block(in_q))), weight_scale(gpu_test::upload(by_block(weight_q))),
        per_row(per_row_) {}

  // dequant(in) @ dequant(weight)^T (+ bias) in f32, with the factors looked up by `factor`
  // (operand rows, row, block): the layout under test, or another one for the failure message.
  std::vector<float> reference(bool with_bias,
                               const std::function<float(const Fp8BlockWeight&, int64_t, int64_t)>& factor) const {
    auto expand = [&](const Fp8BlockWeight& q) {
      std::vector<float> out(q.data.size());
      for (int64_t r = 0; r < q.rows; ++r) {
        for (int64_t c = 0; c < q.cols; ++c) {
          out[r * q.cols + c] = fp8_e4m3_to_f32(q.data[r * q.cols + c]) * factor(q, r, c / q.block_cols);
        }
      }
      return out;
    };
    const std::vector<float> a = expand(in_q), w = expand(weight_q);
    std::vector<float> out(static_cast<size_t>(m * n));
    cpu::linear(out.data(), a.data(), w.data(), with_bias ? bias.data() : nullptr, m, k, n);
    return out;
  }
  std::vector<float> reference(bool with_bias) const {
    return reference(with_bias, [](const Fp8BlockWeight& q, int64_t r, int64_t b) {
      return q.scale_inv[r * q.scale_cols() + b];
    });
  }
  // What the product would be if cuBLASLt read the [ceil(k / 128), rows] buffers as [rows,
  // ceil(k / 128)]: named in the message when the layout is the failure.
  std::vector<float> reference_transposed_factors(bool with_bias) const {
    const std::vector<float> in_uploaded = by_block(in_q), weight_uploaded = by_block(weight_q);
    return reference(with_bias, [&](const Fp8BlockWeight& q, int64_t r, int64_t b) {
      const std::vector<float>& uploaded = &q == &in_q ? in_uploaded : weight_uploaded;
      return uploaded[static_cast<size_t>(r * q.scale_cols() + b)];
    });
  }

  bool run(GemmRunner& gemm, DeviceArray<bf16>& out, bool with_bias, cudaStream_t stream) const {
    const auto product = per_row ? &GemmRunner::linear_fp8_per_row : &GemmRunner::linear_fp8;
    return (gemm.*product)(out.data(), in_device.data(), in_scale.data(), weight_device.data(), weight_scale.data(),
                           with_bias ? bias_device.data() : nullptr, m, n, k, stream);
  }
};

// (m, n, k): Llama-3-8B's qkv, o, down and gate_up at prefill and batch sizes, DeepSeek's kv_a,
// q_b and o; each must have an algorithm as given or, where cuBLASLt refuses the row count (every
// m % 4 != 0 on the H100: bench_fp8_gemm), padded to a multiple of 16 rows as the runner pads it
// (runner/cuda/cuda_model_runner.cpp linear_fp8).
const std::vector<std::array<int64_t, 3>> kModelShapes = {
    {9, 6144, 4096},   {16, 4096, 4096},  {24, 4096, 4096},    {64, 6144, 4096},   {100, 4096, 14336},
    {128, 4096, 4096}, {512, 28672, 4096}, {2048, 6144, 4096}, {33, 576, 7168},    {20, 24576, 1536},
    {64, 7168, 16384}, {281, 6144, 4096}};
// Awkward: k not a multiple of 128, tiny n and k; an algorithm may be missing.
const std::vector<std::array<int64_t, 3>> kAwkwardShapes = {{17, 208, 1040}, {9, 16, 16}, {300, 64, 64}};

// The product of one shape against the CPU, with and without bias; false (output untouched) where
// cuBLASLt has no algorithm for it.
bool product_matches_the_cpu(GemmRunner& gemm, int64_t m, int64_t n, int64_t k, uint64_t salt, cudaStream_t stream,
                             bool per_row = false) {
  const Fp8Product product(m, n, k, gpu_test::rng(salt), per_row);
  bool ran_every_time = true;
  for (bool with_bias : {false, true}) {
    DeviceArray<bf16> out(static_cast<size_t>(m * n) + kGuard);
    const bool ran = product.run(gemm, out, with_bias, stream);
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> got = gpu_test::download_f32(out);
    const std::string shape =
        "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) + (with_bias ? " bias" : "") +
        (per_row ? " per-row factors" : "");
    for (size_t i = static_cast<size_t>(m * n); i < got.size(); ++i) EXPECT_TRUE(std::isnan(got[i])) << shape;
    got.resize(static_cast<size_t>(m * n));
    if (!ran) {
      for (float v : got) EXPECT_TRUE(std::isnan(v)) << shape << ": output written without an algorithm";
      ran_every_time = false;
      continue;
    }
    const double error = gpu_test::relative_error(got, product.reference(with_bias));
    EXPECT_LT(error, kBf16Tolerance)
        << shape << " (relative error against the factors read as [rows, ceil(k / 128)] instead: "
        << gpu_test::relative_error(got, product.reference_transposed_factors(with_bias)) << ")";
  }
  return ran_every_time;
}

TEST(Fp8Gemm, MatchesTheCpuProductOfTheDequantizedOperands) {
  Stream stream;
  GemmRunner gemm;
  uint64_t salt = 100;
  for (auto [m, n, k] : kModelShapes) {
    if (product_matches_the_cpu(gemm, m, n, k, ++salt, stream.stream)) continue;
    const int64_t padded_m = (m + 15) / 16 * 16;
    EXPECT_TRUE(padded_m != m && product_matches_the_cpu(gemm, padded_m, n, k, ++salt, stream.stream))
        << "cuBLASLt has no block-scaled FP8 algorithm for a model shape, m=" << m << " n=" << n << " k=" << k
        << (padded_m != m ? " nor padded to " + std::to_string(padded_m) + " rows: " : ": ")
        << gemm.fp8_refusal(m, n, k, false);
  }
  for (auto [m, n, k] : kAwkwardShapes) product_matches_the_cpu(gemm, m, n, k, ++salt, stream.stream);
}

// linear_fp8_per_row: per-channel weights and per-token inputs (one factor per row of each) on the
// model shapes against the CPU, as given or padded to 16 rows; the awkward ones may have no
// algorithm and must then leave the output untouched.
TEST(Fp8GemmPerRow, MatchesTheCpuProductOfTheDequantizedOperands) {
  Stream stream;
  GemmRunner gemm;
  uint64_t salt = 400;
  for (auto [m, n, k] : kModelShapes) {
    if (product_matches_the_cpu(gemm, m, n, k, ++salt, stream.stream, /*per_row=*/true)) continue;
    const int64_t padded_m = (m + 15) / 16 * 16;
    EXPECT_TRUE(padded_m != m && product_matches_the_cpu(gemm, padded_m, n, k, ++salt, stream.stream, true))
        << "cuBLASLt has no per-row-scaled FP8 algorithm for a model shape, m=" << m << " n=" << n << " k=" << k;
  }
  for (auto [m, n, k] : kAwkwardShapes) product_matches_the_cpu(gemm, m, n, k, ++salt, stream.stream, true);
}

// One factor per row over all k, as the CPU's quantize_fp8_blocks(in, m, k, 1, k): codes and
// factors, padding rows of zero codes and factor 1, nothing written past them.
TEST(Fp8QuantizeRowsPerToken, EqualsTheCpuQuantizerAndPadsWithZeroRows) {
  uint64_t salt = 500;
  for (auto [m, padded_m, k] : std::vector<std::array<int64_t, 3>>{
           {1, 1, 4096}, {37, 48, 14336}, {5, 16, 208}, {300, 304, 1040}, {3, 16, 16}, {2048, 2048, 4096}}) {
    expect_quantized_rows(m, padded_m, k, k, ++salt, fp8_quantize_rows_per_token);
  }
}

// tune() times FP8 products too (the runner tunes an FP8 run's projections so): the chosen
// algorithms give the same product, a refused shape is remembered instead of failing, and the
// cache round trip keeps the FP8 entries apart from bf16 ones of the same shape.
TEST(Fp8Gemm, TunedProductsStayCorrectAndCached) {
  Stream stream;
  const std::vector<GemmProblem> problems = {
      {.m = 64, .n = 6144, .k = 4096, .fp8 = true},
      {.m = 100, .n = 4096, .k = 14336, .has_bias = true, .fp8 = true},
      {.m = 64, .n = 6144, .k = 4096},  // the same shape in bf16: its own entry
      {.m = 17, .n = 208, .k = 1040, .fp8 = true}};  // awkward: may be refused
  GemmRunner tuned;
  tuned.tune(problems, stream.stream, {.candidates = 8, .warmup = 1, .repeats = 3});
  const std::string summary = tuned.algo_summary();
  std::printf("%s", summary.c_str());
  const bool awkward_refused = !tuned.fp8_refusal(17, 208, 1040, false).empty();
  int tuned_lines = 0;
  for (size_t at = summary.find("tuned"); at != std::string::npos; at = summary.find("tuned", at + 1)) ++tuned_lines;
  EXPECT_EQ(tuned_lines, awkward_refused ? 3 : 4);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tachyon_fp8_gemm_cache_" + std::to_string(gpu_test::test_seed()) + ".json"))
                               .string();
  tuned.save_cache(path, "key");
  GemmRunner loaded;
  ASSERT_TRUE(loaded.load_cache(path, "key"));
  std::filesystem::remove(path);
  EXPECT_EQ(loaded.algo_summary(), summary);
  uint64_t salt = 400;
  for (GemmRunner* gemm : {&tuned, &loaded}) {
    for (const GemmProblem& p : problems) {
      if (!p.fp8 || (p.n == 208 && awkward_refused)) continue;
      const Fp8Product product(p.m, p.n, p.k, gpu_test::rng(++salt));
      DeviceArray<bf16> out(static_cast<size_t>(p.m * p.n));
      ASSERT_TRUE(product.run(*gemm, out, p.has_bias, stream.stream)) << to_string(p);
      TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream.stream));
      EXPECT_LT(gpu_test::relative_error(gpu_test::download_f32(out), product.reference(p.has_bias)), kBf16Tolerance)
          << to_string(p);
    }
  }
}

TEST(Fp8Gemm, QuantizeAndProductRunInsideCudaGraphCapture) {
  Stream stream;
  GemmRunner gemm;
  const int64_t m = 24, n = 4096, k = 4096;
  std::mt19937_64 gen = gpu_test::rng(300);
  const std::vector<float> in = spread_values(gen, m, k, 1.0f);
  const Fp8Product product(m, n, k, gpu_test::rng(301));
  const DeviceArray<bf16> in_device = gpu_test::upload_bf16(in);
  DeviceArray<uint8_t> rows(static_cast<size_t>(m * k));
  DeviceArray<float> row_scales(static_cast<size_t>(m * blocks_of(k)));
  DeviceArray<bf16> out(static_cast<size_t>(m * n));
  auto issue = [&] {
    fp8_quantize_rows(rows.data(), row_scales.data(), in_device.data(), m, m, k, stream.stream);
    return gemm.linear_fp8(out.data(), rows.data(), row_scales.data(), product.weight_device.data(),
                           product.weight_scale.data(), product.bias_device.data(), m, n, k, stream.stream);
  };
  ASSERT_TRUE(issue()) << gemm.fp8_refusal(m, n, k, true);  // eager first: cuBLASLt loads its kernels outside the capture
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream.stream));
  const std::vector<float> eager = gpu_test::download_f32(out);
  cudaGraph_t graph = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamBeginCapture(stream.stream, cudaStreamCaptureModeGlobal));
  const bool captured = issue();
  TACHYON_CUDA_CHECK(cudaStreamEndCapture(stream.stream, &graph));
  ASSERT_TRUE(captured);
  cudaGraphExec_t exec = nullptr;
  TACHYON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    out.poison();
    rows.poison();
    TACHYON_CUDA_CHECK(cudaGraphLaunch(exec, stream.stream));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream.stream));
    EXPECT_EQ(gpu_test::download_f32(out), eager) << "replay " << replay;
  }
  TACHYON_CUDA_CHECK(cudaGraphExecDestroy(exec));
  TACHYON_CUDA_CHECK(cudaGraphDestroy(graph));
}

TEST(Fp8Gemm, RejectsBadArgumentsWithClearMessages) {
  GemmRunner gemm;
  const Fp8Product product(16, 64, 64, gpu_test::rng(400));
  DeviceArray<bf16> out(16 * 64);
  DeviceArray<uint8_t> rows(16 * 64);
  DeviceArray<float> scales(64);
  const DeviceArray<bf16> in = gpu_test::upload_bf16(std::vector<float>(16 * 64, 1.0f));
  auto product_error = [&](int64_t n, int64_t k, const uint8_t* weight) {
    return gpu_test::error_of([&] {
      gemm.linear_fp8(out.data(), product.in_device.data(), product.in_scale.data(), weight,
                      product.weight_scale.data(), nullptr, 16, n, k, nullptr);
    });
  };
  EXPECT_NE(product_error(64, 40, product.weight_device.data()).find("multiples of 16"), std::string::npos);
  EXPECT_NE(product_error(40, 64, product.weight_device.data()).find("n=40"), std::string::npos);
  EXPECT_NE(product_error(64, 64, product.weight_device.data() + 8).find("weight ("), std::string::npos);
  EXPECT_NE(gpu_test::error_of([&] { fp8_quantize_rows(rows.data(), scales.data(), in.data(), 16, 16, 40, nullptr); })
                .find("multiple of 16"),
            std::string::npos);
  EXPECT_NE(gpu_test::error_of([&] {
              fp8_quantize_rows(rows.data() + 4, scales.data(), in.data(), 16, 16, 64, nullptr);
            }).find("16-byte aligned"),
            std::string::npos);
  EXPECT_NE(gpu_test::error_of([&] { fp8_quantize_rows(rows.data(), scales.data(), in.data(), 16, 15, 64, nullptr); })
                .find("padded_m at least m"),
            std::string::npos);
}

}  // namespace
}  // namespace tachyon::kernels::cuda
