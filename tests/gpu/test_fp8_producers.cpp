// The kernels that write an FP8 product's E4M3 input rows themselves (kernels/cuda/fp8_rows.h):
// rms_norm, add_rms_norm and silu_and_mul given an Fp8Rows, on fresh random inputs with every
// output poisoned first, bit for bit against the same kernel without one followed by
// fp8_quantize_rows (the per-token forms: fp8_quantize_rows_per_token; kernels/cuda/fp8.h,
// both tested against the CPU in test_fp8_gemm.cpp):
// the bf16 output, the residual, the codes and the factors, the padding rows (zero codes, factor
// 1) included, and nothing written past them; every vectors-per-thread form of the one-block-per-row
// kernels (the norms, per-token SwiGLU).
// Run: build-*/tests/gpu_fp8_producers (GPU machine); TACHYON_TEST_SEED=<seed> replays a failure.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/kernels/cuda/activation.h"
#include "tachyon/kernels/cuda/fp8.h"
#include "tachyon/kernels/cuda/rms_norm.h"

namespace tachyon::kernels::cuda {
namespace {

using gpu_test::DeviceArray;

constexpr size_t kGuard = 64;
constexpr float kEps = 1e-5f;

using gpu_test::Stream;

struct Shape {
  int64_t rows, padded_rows, dim;
};

// Rows whose magnitudes span four decades, so the factors differ by row and by 128 columns.
std::vector<float> spread_rows(std::mt19937_64& gen, int64_t rows, int64_t dim) {
  std::vector<float> values = gpu_test::random_floats(gen, static_cast<size_t>(rows * dim));
  std::uniform_real_distribution<float> decade(-2.0f, 2.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < dim; c += 128) {
      const float scale = std::pow(10.0f, decade(gen));
      for (int64_t i = c; i < std::min(c + 128, dim); ++i) values[static_cast<size_t>(r * dim + i)] *= scale;
    }
  }
  for (float& v : values) v = __bfloat162float(__float2bfloat16(v));
  return values;
}

// An E4M3 copy's buffers with a poisoned guard after the padded rows.
struct Fp8Copy {
  DeviceArray<uint8_t> codes;
  DeviceArray<float> scales;
  int64_t padded_rows;

  bool per_token;

  explicit Fp8Copy(const Shape& s, bool per_token_ = false)
      : codes(static_cast<size_t>(s.padded_rows * s.dim) + kGuard),
        scales(static_cast<size_t>(s.padded_rows * std::max<int64_t>(1, s.dim / 128)) + kGuard),
        padded_rows(s.padded_rows), per_token(per_token_) {}
  Fp8Rows rows() const {
    return {.values = codes.data(), .scale = scales.data(), .padded_rows = padded_rows, .per_token = per_token};
  }
};

// The fused copy against fp8_quantize_rows of the reference kernel's bf16 output, guards included.
void expect_same_copy(const Fp8Copy& fused, const bf16* reference_out, const Shape& s, Stream& stream,
                      const std::string& what) {
  Fp8Copy want(s, fused.per_token);
  const auto quantize = fused.per_token ? &fp8_quantize_rows_per_token : &fp8_quantize_rows;
  quantize(want.codes.data(), want.scales.data(), reference_out, s.rows, s.padded_rows, s.dim, stream.stream);
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream.stream));
  const std::vector<uint8_t> got_codes = fused.codes.download(), want_codes = want.codes.download();
  const std::vector<float> got_scales = fused.scales.download(), want_scales = want.scales.download();
  size_t code_mismatches = 0, scale_mismatches = 0;
  for (size_t i = 0; i < got_codes.size(); ++i) code_mismatches += got_codes[i] != want_codes[i];
  // Bit patterns: the poisoned guard reads as NaN, which no NaN equals.
  for (size_t i = 0; i < got_scales.size(); ++i) {
    scale_mismatches += std::memcmp(&got_scales[i], &want_scales[i], sizeof(float)) != 0;
  }
  EXPECT_EQ(code_mismatches, 0u) << what << ": codes (guard included) of " << got_codes.size();
  EXPECT_EQ(scale_mismatches, 0u) << what << ": factors (guard included) of " << got_scales.size();
  for (size_t i = got_codes.size() - kGuard; i < got_codes.size(); ++i) ASSERT_EQ(got_codes[i], 0xFF) << what;
}

void expect_same_bits(const DeviceArray<bf16>& got, const DeviceArray<bf16>& want, const std::string& what) {
  const std::vector<bf16> a = got.download(), b = want.download();
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(bf16)) != 0;
  EXPECT_EQ(differ, 0u) << what << " of " << a.size();
}

std::string name(const std::string& op, const Shape& s) {
  return op + " rows=" + std::to_string(s.rows) + " padded=" + std::to_string(s.padded_rows) +
         " dim=" + std::to_string(s.dim);
}

// dims 256 and 4096: one vector per thread; 8192, 16384, 32768: 2, 4 and 8.
const std::vector<Shape> kNormShapes = {{1, 16, 256},  {5, 16, 4096},   {37, 48, 4096},
                                        {16, 16, 8192}, {3, 16, 16384}, {2, 16, 32768}};

// rms_norm and add_rms_norm writing the E4M3 copy of their output (per 128 columns, or with
// per_token one factor per row) against the kernels without it, then fp8_quantize_rows(_per_token).
void expect_norms_write_the_rows(uint64_t salt, bool per_token) {
  Stream stream;
  const std::string form = per_token ? " per token" : "";
  for (const Shape& s : kNormShapes) {
    std::mt19937_64 gen = gpu_test::rng(++salt);
    const std::vector<float> residual = spread_rows(gen, s.rows, s.dim);
    const DeviceArray<bf16> in = gpu_test::upload_bf16(spread_rows(gen, s.rows, s.dim));
    const DeviceArray<bf16> weight = gpu_test::upload_bf16(gpu_test::random_bf16_values(gen, s.dim));
    DeviceArray<bf16> want(static_cast<size_t>(s.rows * s.dim)), got(static_cast<size_t>(s.rows * s.dim));
    Fp8Copy copy(s, per_token);
    rms_norm(want.data(), in.data(), weight.data(), s.rows, s.dim, kEps, stream.stream);
    rms_norm(got.data(), in.data(), weight.data(), s.rows, s.dim, kEps, stream.stream, copy.rows());
    expect_same_bits(got, want, name("rms_norm" + form, s) + ": bf16 output");
    expect_same_copy(copy, want.data(), s, stream, name("rms_norm" + form, s));
    DeviceArray<bf16> want_residual = gpu_test::upload_bf16(residual), got_residual = gpu_test::upload_bf16(residual);
    Fp8Copy add_copy(s, per_token);
    add_rms_norm(want.data(), want_residual.data(), in.data(), weight.data(), s.rows, s.dim, kEps, stream.stream);
    add_rms_norm(got.data(), got_residual.data(), in.data(), weight.data(), s.rows, s.dim, kEps, stream.stream,
                 add_copy.rows());
    expect_same_bits(got, want, name("add_rms_norm" + form, s) + ": bf16 output");
    expect_same_bits(got_residual, want_residual, name("add_rms_norm" + form, s) + ": residual");
    expect_same_copy(add_copy, want.data(), s, stream, name("add_rms_norm" + form, s));
  }
}

TEST(Fp8Producers, NormsWriteTheRowsFp8QuantizeRowsWrites) { expect_norms_write_the_rows(10, /*per_token=*/false); }

// The per-token form feeds the per-row-scaled product (per-channel FP8 weights).
TEST(Fp8Producers, NormsWriteThePerTokenRowsFp8QuantizeRowsPerTokenWrites) {
  expect_norms_write_the_rows(40, /*per_token=*/true);
}

// silu_and_mul with its bf16 output and without (out null: only the copy), against the kernel
// without a copy, then fp8_quantize_rows (per_token: fp8_quantize_rows_per_token).
void expect_silu_and_mul_writes_the_rows(uint64_t salt, bool per_token, const std::vector<Shape>& shapes) {
  Stream stream;
  const std::string op = per_token ? "silu_and_mul per token" : "silu_and_mul";
  for (const Shape& s : shapes) {
    std::mt19937_64 gen = gpu_test::rng(++salt);
    const DeviceArray<bf16> gate_up = gpu_test::upload_bf16(spread_rows(gen, s.rows, 2 * s.dim));
    DeviceArray<bf16> want(static_cast<size_t>(s.rows * s.dim)), got(static_cast<size_t>(s.rows * s.dim));
    Fp8Copy with_out(s, per_token), copy_only(s, per_token);
    silu_and_mul(want.data(), gate_up.data(), s.rows, s.dim, stream.stream);
    silu_and_mul(got.data(), gate_up.data(), s.rows, s.dim, stream.stream, with_out.rows());
    silu_and_mul(nullptr, gate_up.data(), s.rows, s.dim, stream.stream, copy_only.rows());
    expect_same_bits(got, want, name(op, s) + ": bf16 output");
    expect_same_copy(with_out, want.data(), s, stream, name(op, s));
    expect_same_copy(copy_only, want.data(), s, stream, name(op + " (copy only)", s));
  }
}

// Over dims of one to several 1,024-column blocks of the grid, the last one partly filled (1,152
// and 14,336).
TEST(Fp8Producers, SiluAndMulWritesTheRowsFp8QuantizeRowsWrites) {
  expect_silu_and_mul_writes_the_rows(30, /*per_token=*/false,
                                      {{1, 16, 128}, {7, 16, 1152}, {33, 48, 14336}, {16, 16, 512}});
}

// One block per row: every vectors-per-thread form (dims 48 and 4,096: one vector per thread;
// 8,192, 14,336 (the 8B's intermediate size), 32,768: 2, 4 and 8), and a dim of 16-column rows
// that no 128-column block divides.
TEST(Fp8Producers, SiluAndMulWritesThePerTokenRowsFp8QuantizeRowsPerTokenWrites) {
  expect_silu_and_mul_writes_the_rows(
      60, /*per_token=*/true, {{1, 16, 48}, {5, 16, 4096}, {37, 48, 8192}, {33, 48, 14336}, {2, 16, 32768}});
}

TEST(Fp8Producers, RefuseCopiesTheyCannotWrite) {
  Stream stream;
  const Shape s{4, 16, 192};  // not a multiple of 128 columns
  DeviceArray<bf16> in(static_cast<size_t>(s.rows * s.dim)), out(static_cast<size_t>(s.rows * s.dim)),
      weight(static_cast<size_t>(s.dim)), gate_up(static_cast<size_t>(s.rows * 2 * s.dim));
  Fp8Copy copy(s);
  EXPECT_THROW(rms_norm(out.data(), in.data(), weight.data(), s.rows, s.dim, kEps, stream.stream, copy.rows()),
               std::exception);
  EXPECT_THROW(silu_and_mul(nullptr, gate_up.data(), s.rows, s.dim, stream.stream, copy.rows()), std::exception);
  const Shape short_padding{20, 16, 256};
  Fp8Copy too_few(short_padding);
  DeviceArray<bf16> in2(20 * 256), out2(20 * 256), weight2(256);
  EXPECT_THROW(rms_norm(out2.data(), in2.data(), weight2.data(), 20, 256, kEps, stream.stream, too_few.rows()),
               std::exception);
  EXPECT_THROW(silu_and_mul(nullptr, gate_up.data(), s.rows, s.dim, stream.stream), std::exception);
  // One factor per row: dim % 16 == 0 (as fp8_quantize_rows_per_token) and at most 32,768 (one block).
  for (const int64_t dim : {40, 32768 + 16}) {
    const Shape per_token_shape{4, 16, dim};
    Fp8Copy per_token(per_token_shape, /*per_token=*/true);
    DeviceArray<bf16> gate_up_rows(static_cast<size_t>(4 * 2 * dim));
    EXPECT_THROW(silu_and_mul(nullptr, gate_up_rows.data(), 4, dim, stream.stream, per_token.rows()), std::exception)
        << "dim " << dim;
  }
}

}  // namespace
}  // namespace tachyon::kernels::cuda
