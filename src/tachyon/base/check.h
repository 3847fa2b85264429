// Checks that carry context. TACHYON_CHECK(cond) << "values" throws tachyon::Error with the
// file, line, the failed condition and whatever was streamed, once the full expression ends.
// Use it for broken invariants and for input errors alike; the message is what the user reads,
// so stream the values they need to act (file name, tensor name, expected vs got).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tachyon {

// The one exception type of the project. Callers at API boundaries (CLI, server) catch it and
// turn it into an exit code or an OpenAI-style error.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

// Collects a message and throws from its destructor once the whole `<<` chain has run.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition) {
    stream_ << file << ":" << line << ": ";
    if (condition != nullptr) stream_ << "check failed: " << condition << ": ";
  }
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  [[noreturn]] ~CheckFailure() noexcept(false) { throw Error(stream_.str()); }

  template <typename T>
  CheckFailure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

}  // namespace detail
}  // namespace tachyon

#define TACHYON_CHECK(cond) \
  if (cond) {               \
  } else                    \
    ::tachyon::detail::CheckFailure(__FILE__, __LINE__, #cond)

// Unconditional failure with the same message format: TACHYON_FAIL() << "why".
#define TACHYON_FAIL() ::tachyon::detail::CheckFailure(__FILE__, __LINE__, nullptr)
