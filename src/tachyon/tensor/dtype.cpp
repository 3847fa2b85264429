#include "tachyon/tensor/dtype.h"

#include <cmath>
#include <cstring>

#include "tachyon/base/check.h"
#include "tachyon/tensor/fp8.h"

namespace tachyon {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kF8E4M3: return 1;
  }
  TACHYON_FAIL() << "unknown dtype";
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8E4M3: return "F8_E4M3";
  }
  TACHYON_FAIL() << "unknown dtype";
}

DType dtype_from_name(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  TACHYON_FAIL() << "unsupported dtype '" << name << "' (supported: F32, F16, BF16, F8_E4M3)";
}

float bf16_to_f32(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

uint16_t f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // keep it a NaN
  uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f16_to_f32(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1f;
  uint32_t mantissa = bits & 0x3ff;
  uint32_t out;
  if (exponent == 0) {
    if (mantissa == 0) {
      out = sign;
    } else {  // subnormal: renormalize
      int shift = 0;
      while ((mantissa & 0x400) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ff;
      out = sign | (static_cast<uint32_t>(127 - 15 - shift + 1) << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    out = sign | 0x7f800000 | (mantissa << 13);
  } else {
    out = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &out, sizeof(value));
  return value;
}

uint16_t f32_to_f16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  uint32_t abs_bits = bits & 0x7fffffff;
  if (abs_bits >= 0x7f800000) {  // inf or nan
    return sign | 0x7c00 | (abs_bits > 0x7f800000 ? 0x200 : 0);
  }
  if (abs_bits >= 0x477ff000) return sign | 0x7c00;  // rounds to >= 65520: overflow to inf
  if (abs_bits < 0x38800000) {                        // below the smallest normal: subnormal
    // Scale into the subnormal range with round-to-nearest-even via float arithmetic.
    float abs_value;
    std::memcpy(&abs_value, &abs_bits, sizeof(abs_value));
    float scaled = abs_value * 16777216.0f;  // 2^24: one f16 subnormal ulp becomes 1.0
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t mantissa_rounding = 0xfff + ((abs_bits >> 13) & 1);
  abs_bits += mantissa_rounding;
  return sign | static_cast<uint16_t>(((abs_bits >> 23) - 127 + 15) << 10 | ((abs_bits >> 13) & 0x3ff));
}

void convert_to_f32(const void* src, DType dtype, size_t count, float* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::kF16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = f16_to_f32(in[i]);
      return;
    }
    case DType::kBF16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(in[i]);
      return;
    }
    case DType::kF8E4M3: {
      const auto* in = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = fp8_e4m3_to_f32(in[i]);
      return;
    }
  }
}

void convert_from_f32(const float* src, size_t count, DType dtype, void* dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::kF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) out[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < count; ++i) out[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kF8E4M3: {
      auto* out = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < count; ++i) out[i] = f32_to_fp8_e4m3(src[i]);
      return;
    }
  }
}

}  // namespace tachyon
