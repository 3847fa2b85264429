// bf16/f16 <-> f32 conversions: exact where representable, round-to-nearest-even otherwise,
// and the special values (subnormals, inf, nan) kept.
#include "tachyon/tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tachyon/base/check.h"

namespace tachyon {
namespace {

TEST(DType, NamesRoundTrip) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
  EXPECT_THROW(dtype_from_name("I64"), Error);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
}

TEST(DType, Bf16ExactValuesRoundTrip) {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 65536.0f, 1.0f / 1024}) EXPECT_EQ(bf16_to_f32(f32_to_bf16(v)), v);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one (1).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 0x1.0p-8f)), 1.0f);
  // 1 + 3 * 2^-8 lies between 1 + 2^-7 and 1 + 2^-6: tie goes to 1 + 2^-6 (even mantissa).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3 * 0x1.0p-8f)), 1.0f + 0x1.0p-6f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, F16ExactValuesRoundTrip) {
  for (float v : {0.0f, 1.0f, -2.0f, 65504.0f, 0x1.0p-14f, 0x1.0p-24f, 3.140625f}) {
    EXPECT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
  }
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1.0p-24f);  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ff), 0x1.ff8p-15f);  // largest subnormal
}

TEST(DType, F16OverflowAndSpecials) {
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(70000.0f))));
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(-std::numeric_limits<float>::infinity()))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 0x1.0p-11f)), 1.0f);  // tie to even
}

TEST(DType, F16MatchesBitLevelForEveryHalf) {
  // Every finite half converts to f32 and back to the same bits.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    uint16_t h = static_cast<uint16_t>(bits);
    if ((h & 0x7c00) == 0x7c00) continue;  // inf/nan
    ASSERT_EQ(f32_to_f16(f16_to_f32(h)), h) << std::hex << bits;
  }
}

TEST(DType, BulkConversion) {
  std::vector<float> in = {1.5f, -3.0f, 0.25f};
  std::vector<uint16_t> half(3);
  std::vector<float> out(3);
  convert_from_f32(in.data(), 3, DType::kBF16, half.data());
  convert_to_f32(half.data(), DType::kBF16, 3, out.data());
  EXPECT_EQ(out, in);
}

}  // namespace
}  // namespace tachyon
