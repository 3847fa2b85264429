// An E4M3 copy of a producer kernel's bf16 output rows, for the FP8 product that reads them:
// the layout and rounding of fp8.h fp8_quantize_rows (one f32 factor per row and 128 columns,
// amax / 448, RNE with saturation; or fp8_quantize_rows_per_token's, one per row), so that the
// producer (rms_norm.h, activation.h) writes bit for bit what that separate launch would have
// written from its bf16 output, and the launch is saved (model/gpu/linear_dispatch.h
// LinearDispatch::fp8_input says where and when).
#pragma once

#include <cstdint>

namespace tachyon::kernels::cuda {

struct Fp8Rows {
  uint8_t* values = nullptr;  // [padded_rows, dim] E4M3; nullptr: no E4M3 copy is written
  float* scale = nullptr;     // [dim / 128, padded_rows] f32, the row index fastest (cuBLASLt's layout)
  int64_t padded_rows = 0;    // >= the producer's rows; rows past them are zero codes of factor 1
  // One factor per row over all dim instead (scale [padded_rows]): fp8_quantize_rows_per_token's
  // form, for the per-row-scaled product (GemmRunner::linear_fp8_per_row). The norms and
  // silu_and_mul write it (the latter with a launch shape of one block per row).
  bool per_token = false;

  bool empty() const { return values == nullptr; }
};

}  // namespace tachyon::kernels::cuda
