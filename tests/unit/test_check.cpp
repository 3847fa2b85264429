// TACHYON_CHECK throws tachyon::Error carrying the condition and the streamed context.
#include "tachyon/base/check.h"

#include <gtest/gtest.h>

namespace tachyon {
namespace {

TEST(Check, PassingCheckDoesNotThrow) { EXPECT_NO_THROW(TACHYON_CHECK(1 + 1 == 2) << "never"); }

TEST(Check, FailingCheckThrowsWithContext) {
  try {
    int got = 3;
    TACHYON_CHECK(got == 4) << "expected 4, got " << got;
    FAIL() << "no throw";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("got == 4"), std::string::npos) << message;
    EXPECT_NE(message.find("expected 4, got 3"), std::string::npos) << message;
    EXPECT_NE(message.find("test_check.cpp"), std::string::npos) << message;
  }
}

TEST(Check, FailThrowsUnconditionally) {
  EXPECT_THROW(TACHYON_FAIL() << "always", Error);
}

}  // namespace
}  // namespace tachyon
