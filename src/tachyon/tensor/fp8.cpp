#include "tachyon/tensor/fp8.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cmath>
#include <limits>

#include "tachyon/base/check.h"
#include "tachyon/base/huge_pages.h"

namespace tachyon {

namespace {

float decode_e4m3(uint8_t bits) {
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 0x7;
  const float sign = (bits & 0x80) != 0 ? -1.0f : 1.0f;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);  // m/8 * 2^-6
  return sign * std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
}

}  // namespace

// A table: loading a real model decodes billions of values.
float fp8_e4m3_to_f32(uint8_t bits) {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int code = 0; code < 256; ++code) t[static_cast<size_t>(code)] = decode_e4m3(static_cast<uint8_t>(code));
    return t;
  }();
  return table[bits];
}

// Round to nearest, ties to even, on the bits (a real model's online quantization converts billions
// of values; a search over the 127 magnitudes took ~10x as long). Normal codes: the f32 mantissa
// rounded to 3 bits, its carry moving into the exponent as the code's does (code = exponent << 3 |
// mantissa, so an even code is an even mantissa). Subnormal codes (below 2^-6): m = |v| * 2^9
// rounded to an integer 0..8 (8 is the smallest normal code). tests/unit/test_fp8.cpp holds the
// search as the spec and compares them.
uint8_t f32_to_fp8_e4m3(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return 0x7F;                   // NaN
  if (magnitude >= 0x43E00000u) return sign | 0x7E;           // 448 and beyond (infinity too) saturate
  if (magnitude >= 0x3C800000u) {                             // 2^-6 and up: normal codes
    const uint32_t lsb = (magnitude >> 20) & 1u;              // the kept mantissa's last bit
    const uint32_t rounded = (magnitude + 0x7FFFFu + lsb) >> 20;  // exponent and 3 mantissa bits
    return sign | static_cast<uint8_t>(rounded - (120u << 3));    // exponent bias 127 -> 7
  }
  // Exact: a power-of-two scale of a value below 2^-6; adding 2^23 rounds to an integer, ties to even.
  const float scaled = std::bit_cast<float>(magnitude) * 512.0f;
  return sign | static_cast<uint8_t>((scaled + 8388608.0f) - 8388608.0f);
}

Fp8BlockWeight quantize_fp8_blocks(std::span<const float> weight, int64_t rows, int64_t cols, int64_t block_rows,
                                   int64_t block_cols) {
  TACHYON_CHECK(rows > 0 && cols > 0 && block_rows > 0 && block_cols > 0 &&
                weight.size() == static_cast<size_t>(rows * cols))
      << "FP8 block quantization of a [" << rows << ", " << cols << "] weight from " << weight.size() << " values";
  Fp8BlockWeight q{.rows = rows, .cols = cols, .block_rows = block_rows, .block_cols = block_cols};
  q.data = huge_vector<uint8_t>(weight.size());  // a real weight's codes: 2 MB pages (base/huge_pages.h)
  q.scale_inv.resize(static_cast<size_t>(q.scale_rows() * q.scale_cols()));
  // Blocks are independent: threads share them (a real model quantizes billions of values at load).
  const int64_t scale_rows = q.scale_rows(), scale_cols = q.scale_cols();
#pragma omp parallel for collapse(2) schedule(static) if (rows * cols >= (int64_t{1} << 18))
  for (int64_t br = 0; br < scale_rows; ++br) {
    for (int64_t bc = 0; bc < scale_cols; ++bc) {
      const int64_t r0 = br * block_rows, r1 = std::min(rows, r0 + block_rows);
      const int64_t c0 = bc * block_cols, c1 = std::min(cols, c0 + block_cols);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(weight[static_cast<size_t>(r * cols + c)]));
      }
      const float scale_inv = amax > 0.0f ? amax / kFp8E4m3Max : 1.0f;
      q.scale_inv[static_cast<size_t>(br * scale_cols + bc)] = scale_inv;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const size_t i = static_cast<size_t>(r * cols + c);
          q.data[i] = f32_to_fp8_e4m3(weight[i] / scale_inv);
        }
      }
    }
  }
  return q;
}

void dequantize_fp8_blocks(std::span<const uint8_t> data, std::span<const float> scale_inv, int64_t rows, int64_t cols,
                           int64_t block_rows, int64_t block_cols, std::span<float> out) {
  const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
  const int64_t scale_rows = (rows + block_rows - 1) / block_rows;
  TACHYON_CHECK(data.size() == static_cast<size_t>(rows * cols) && out.size() == data.size() &&
                scale_inv.size() == static_cast<size_t>(scale_rows * scale_cols))
      << "FP8 block dequantization of a [" << rows << ", " << cols << "] weight: " << data.size() << " values, "
      << scale_inv.size() << " scales for " << scale_rows << " x " << scale_cols << " blocks of [" << block_rows
      << ", " << block_cols << "]";
#pragma omp parallel for schedule(static) if (rows * cols >= (int64_t{1} << 18))
  for (int64_t r = 0; r < rows; ++r) {
    const float* scales = scale_inv.data() + (r / block_rows) * scale_cols;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      out[i] = fp8_e4m3_to_f32(data[i]) * scales[c / block_cols];
    }
  }
}

void fp8_block_round_trip(std::span<float> weight, int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols) {
  const Fp8BlockWeight q = quantize_fp8_blocks(weight, rows, cols, block_rows, block_cols);
  dequantize_fp8_blocks(q.data, q.scale_inv, rows, cols, block_rows, block_cols, weight);
}

}  // namespace tachyon
