// FP8 E4M3 (OCP "e4m3fn", torch.float8_e4m3fn): 1 sign bit, 4 exponent bits (bias 7), 3 mantissa
// bits; no infinities, NaN is S.1111.111, the largest finite value 448, subnormals m/8 * 2^-6.
// What the FP8 checkpoints store and what online FP8 quantization writes. The CPU reference
// decodes exactly and encodes by round-to-nearest-even, saturating at +-448 (quantizers scale
// into range first; a value past it is clamped, as vLLM's and DeepSeek's quantizers clamp).
// Block scaling (DeepSeek-V3 / GLM-5 releases, `weight_block_size` [128, 128]): a [rows, cols]
// weight is cut into blocks; each block b has a dequantization factor scale_inv[b] = amax / 448
// (the checkpoint's `weight_scale_inv`), and w = fp8 * scale_inv.
// Tests: tests/unit/test_fp8.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tachyon {

inline constexpr float kFp8E4m3Max = 448.0f;

float fp8_e4m3_to_f32(uint8_t bits);
uint8_t f32_to_fp8_e4m3(float value);

// A [rows, cols] weight in FP8 with one f32 dequantization factor per [block_rows, block_cols]
// block, row-major over the ceil(rows / block_rows) x ceil(cols / block_cols) blocks.
struct Fp8BlockWeight {
  int64_t rows = 0, cols = 0;
  int64_t block_rows = 128, block_cols = 128;
  std::vector<uint8_t> data;     // [rows, cols] e4m3
  std::vector<float> scale_inv;  // [ceil(rows / block_rows), ceil(cols / block_cols)]

  int64_t scale_rows() const { return (rows + block_rows - 1) / block_rows; }
  int64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
  bool operator==(const Fp8BlockWeight&) const = default;
};

// Each block scaled so its largest magnitude maps to 448 (an all-zero block gets factor 1).
Fp8BlockWeight quantize_fp8_blocks(std::span<const float> weight, int64_t rows, int64_t cols, int64_t block_rows = 128,
                                   int64_t block_cols = 128);
// w[r, c] = fp8[r, c] * scale_inv[r / block_rows, c / block_cols], into `out` [rows, cols].
void dequantize_fp8_blocks(std::span<const uint8_t> data, std::span<const float> scale_inv, int64_t rows, int64_t cols,
                           int64_t block_rows, int64_t block_cols, std::span<float> out);

// The FP8 round trip of a weight (quantize to blocks, dequantize back) in place: what a model
// computes with when its weights are quantized online (--quantization fp8).
void fp8_block_round_trip(std::span<float> weight, int64_t rows, int64_t cols, int64_t block_rows = 128,
                          int64_t block_cols = 128);

}  // namespace tachyon
