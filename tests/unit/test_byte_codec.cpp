// base/byte_codec.h: values round-trip in order, and a short input gives nullopt without moving
// the offset (the KV descriptors and frames turn that into their own errors).
#include "tachyon/base/byte_codec.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace tachyon {
namespace {

TEST(ByteCodec, ValuesRoundTripInOrder) {
  std::string bytes;
  put_value<uint32_t>(bytes, 0xDEADBEEFu);
  put_value<double>(bytes, -2.5);
  put_value<int8_t>(bytes, -7);
  ASSERT_EQ(bytes.size(), 4u + 8u + 1u);
  size_t offset = 0;
  EXPECT_EQ(take_value<uint32_t>(bytes, offset), 0xDEADBEEFu);
  EXPECT_EQ(take_value<double>(bytes, offset), -2.5);
  EXPECT_EQ(take_value<int8_t>(bytes, offset), int8_t{-7});
  EXPECT_EQ(offset, bytes.size());
}

TEST(ByteCodec, AShortInputGivesNothingAndKeepsTheOffset) {
  std::string bytes;
  put_value<uint16_t>(bytes, 513);
  size_t offset = 0;
  EXPECT_FALSE(take_value<uint32_t>(bytes, offset).has_value());
  EXPECT_EQ(offset, 0u);
  EXPECT_EQ(take_value<uint16_t>(bytes, offset), uint16_t{513});
  EXPECT_FALSE(take_value<uint8_t>(bytes, offset).has_value());
  size_t past_the_end = bytes.size() + 3;
  EXPECT_FALSE(take_value<uint8_t>(bytes, past_the_end).has_value());
  EXPECT_EQ(past_the_end, bytes.size() + 3);
}

}  // namespace
}  // namespace tachyon
