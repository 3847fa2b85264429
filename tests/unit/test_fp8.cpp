// FP8 E4M3: known code points (the OCP spec's table: 448 max, 2^-6 smallest normal, 2^-9
// smallest subnormal, S.1111.111 NaN), every finite code survives a round trip, midpoints round
// to the even code, values past 448 saturate; the encoder (rounding on the bits) gives the code
// the spec's search gives (the nearest of the 127 magnitudes, ties to the even code) on every
// float near each code, every midpoint and its neighbours, and spread samples of all the others;
// block quantization keeps each block's largest magnitude and every value within half an FP8
// step of its block.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>

#include "tachyon/tensor/fp8.h"

namespace tachyon {
namespace {

TEST(Fp8E4m3, KnownCodes) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7.0f * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x39), 1.125f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xFE), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xB8), -1.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xFF)));
  EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);  // exponent 15 with mantissa < 7 is finite
}

TEST(Fp8E4m3, EveryFiniteCodeRoundTripsAndMidpointsGoToEven) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    const float v = fp8_e4m3_to_f32(static_cast<uint8_t>(code));
    EXPECT_EQ(f32_to_fp8_e4m3(v), code) << code;
  }
  // 1.0625 lies halfway between 1.0 (0x38, even) and 1.125 (0x39): the even code.
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);
  // 1.1875 lies halfway between 1.125 (0x39) and 1.25 (0x3A): the even code.
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3A);
  EXPECT_EQ(f32_to_fp8_e4m3(1.07f), 0x39);
  EXPECT_EQ(f32_to_fp8_e4m3(1000.0f), 0x7E);
  EXPECT_EQ(f32_to_fp8_e4m3(-1e30f), 0xFE);
  EXPECT_EQ(f32_to_fp8_e4m3(INFINITY), 0x7E);
  EXPECT_EQ(f32_to_fp8_e4m3(NAN), 0x7F);
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -11)), 0x00);  // below half the smallest subnormal
}

// The spec, as a search: the nearest of the 127 non-negative finite values, a tie to the even
// code; magnitudes from 448 on (and infinities) saturate; NaN is 0x7F.
uint8_t nearest_code(float value) {
  static const std::array<float, 127> magnitudes = [] {
    std::array<float, 127> m{};
    for (int code = 0; code < 127; ++code) m[static_cast<size_t>(code)] = fp8_e4m3_to_f32(static_cast<uint8_t>(code));
    return m;
  }();
  if (std::isnan(value)) return 0x7F;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const float magnitude = std::min(std::fabs(value), 448.0f);
  int code = static_cast<int>(std::lower_bound(magnitudes.begin(), magnitudes.end(), magnitude) - magnitudes.begin());
  if (code > 0) {
    const float below = magnitudes[static_cast<size_t>(code - 1)], above = magnitudes[static_cast<size_t>(code)];
    if (magnitude - below < above - magnitude || (magnitude - below == above - magnitude && (code - 1) % 2 == 0)) {
      code -= 1;
    }
  }
  return static_cast<uint8_t>(sign | code);
}

TEST(Fp8E4m3, EncoderGivesTheNearestCodeTiesToEven) {
  size_t checked = 0, differ = 0;
  auto check = [&](uint32_t bits) {
    for (const uint32_t signed_bits : {bits, bits | 0x80000000u}) {
      const float v = std::bit_cast<float>(signed_bits);
      const uint8_t got = f32_to_fp8_e4m3(v), want = nearest_code(v);
      ++checked;
      if (got != want && ++differ <= 10) {
        ADD_FAILURE() << "bits 0x" << std::hex << signed_bits << " (" << v << "): 0x" << int{got} << ", the spec 0x"
                      << int{want};
      }
    }
  };
  // Around every code and every midpoint between neighbours: 64 floats either side.
  for (int code = 0; code < 127; ++code) {
    const float v = fp8_e4m3_to_f32(static_cast<uint8_t>(code));
    const float next = code < 126 ? fp8_e4m3_to_f32(static_cast<uint8_t>(code + 1)) : 480.0f;
    for (const float centre : {v, (v + next) / 2}) {
      const uint32_t bits = std::bit_cast<uint32_t>(centre);
      for (uint32_t d = 0; d <= 64; ++d) {
        check(bits + d);
        if (bits >= d) check(bits - d);
      }
    }
  }
  // Every exponent's floats at a stride (f32 subnormals, the FP8 range, far beyond it), and the
  // specials.
  for (uint32_t bits = 0; bits < 0x7F800000u; bits += 4099) check(bits);
  for (const uint32_t bits : {0x7F800000u, 0x7FC00000u, 0x7F800001u, 0u, 1u, 0x43E00000u, 0x43DFFFFFu, 0x43F00000u}) {
    check(bits);
  }
  EXPECT_EQ(differ, 0u) << "of " << checked << " floats";
  EXPECT_GT(checked, size_t{1000000});
}

TEST(Fp8Blocks, QuantizationKeepsEachBlocksMaxAndStaysWithinHalfAStep) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const int64_t rows = 200, cols = 300;  // partial blocks on both edges
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& x : w) x = normal(rng);
  w[5] = 0.5f;  // one outlier in block (0, 0)
  const Fp8BlockWeight q = quantize_fp8_blocks(w, rows, cols);
  EXPECT_EQ(q.scale_rows(), 2);
  EXPECT_EQ(q.scale_cols(), 3);
  EXPECT_FLOAT_EQ(q.scale_inv[0], 0.5f / 448.0f);
  std::vector<float> back(w.size());
  dequantize_fp8_blocks(q.data, q.scale_inv, rows, cols, 128, 128, back);
  EXPECT_NEAR(back[5], 0.5f, 1e-7);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      const float scale = q.scale_inv[static_cast<size_t>((r / 128) * 3 + c / 128)];
      // Half a step of E4M3 at the value's binade (3 mantissa bits: 2^-4 relative), or half the
      // subnormal step 2^-10 of the scaled value.
      const float bound = std::max(std::fabs(w[i]) / 16.0f, std::ldexp(1.0f, -10) * scale) * 1.0001f;
      ASSERT_LE(std::fabs(back[i] - w[i]), bound) << r << ", " << c;
    }
  }
  std::vector<float> trip = w;
  fp8_block_round_trip(trip, rows, cols);
  EXPECT_EQ(trip, back);
}

}  // namespace
}  // namespace tachyon
