// Plain values appended to, and read back from, a byte string in the host's representation:
// the wire forms of KV descriptors and frames, which the same build reads back on the same
// kind of host (a fingerprint or magic number guards each form). Each reader turns a short
// input into its own error.
#pragma once

#include <cstring>
#include <optional>
#include <string>
#include <type_traits>

namespace tachyon {

template <typename T>
void put_value(std::string& out, T value) {
  static_assert(std::is_trivially_copyable_v<T>);
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// The T at `offset` of `in`, advancing `offset` past it; nullopt (offset unchanged) when `in`
// ends first.
template <typename T>
std::optional<T> take_value(const std::string& in, size_t& offset) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (offset > in.size() || sizeof(T) > in.size() - offset) return std::nullopt;
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(T));
  offset += sizeof(T);
  return value;
}

}  // namespace tachyon
