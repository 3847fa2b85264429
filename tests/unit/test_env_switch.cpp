// base/env_switch.h: a switch is on unless set to "0".
#include "tachyon/base/env_switch.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace tachyon {
namespace {

TEST(EnvSwitch, IsOnUnlessSetToZero) {
  constexpr const char* kName = "TACHYON_TEST_ENV_SWITCH";
  ::unsetenv(kName);
  EXPECT_TRUE(env_switch_on(kName));
  ::setenv(kName, "0", 1);
  EXPECT_FALSE(env_switch_on(kName));
  for (const char* value : {"1", "", "00", "off"}) {
    ::setenv(kName, value, 1);
    EXPECT_TRUE(env_switch_on(kName)) << "'" << value << "'";
  }
  ::unsetenv(kName);
}

}  // namespace
}  // namespace tachyon
