// Switches read from the environment: developer toggles that let one binary time or compare a
// mechanism against its absence (docs/testing.md lists them).
#pragma once

#include <cstdlib>
#include <string_view>

namespace tachyon {

// Whether the switch `name` is on: it is unless set to "0".
inline bool env_switch_on(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr || std::string_view(value) != "0";
}

}  // namespace tachyon
