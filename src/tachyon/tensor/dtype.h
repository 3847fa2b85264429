// Element types of weights and activations, and the scalar conversions the CPU reference needs.
// bf16 and f16 are stored as raw uint16_t bit patterns, FP8 E4M3 as uint8_t (tensor/fp8.h);
// math happens in f32. FP8 weights come with scales (model/fp8_checkpoint.h): converting F8_E4M3
// here decodes the raw values only, without any scale.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tachyon {

enum class DType { kF32, kF16, kBF16, kF8E4M3 };

size_t dtype_size(DType dtype);
// Names as safetensors spells them: "F32", "F16", "BF16", "F8_E4M3".
std::string_view dtype_name(DType dtype);
// Parses a safetensors dtype name; throws Error listing the supported names otherwise.
DType dtype_from_name(std::string_view name);

float bf16_to_f32(uint16_t bits);
// Round to nearest even, as torch does when casting f32 -> bf16.
uint16_t f32_to_bf16(float value);
float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

// Converts `count` elements of `dtype` at `src` into f32 at `dst`.
void convert_to_f32(const void* src, DType dtype, size_t count, float* dst);
// Converts `count` f32 values into `dtype`, written at `dst` (dtype_size(dtype) * count bytes).
void convert_from_f32(const float* src, size_t count, DType dtype, void* dst);

}  // namespace tachyon
