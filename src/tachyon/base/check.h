// Checks that carry context. TACHYON_CHECK(cond) << "values" throws tachyon::Error once the full
// expression ends, with the message "<what was streamed> (check `cond` failed at file.cpp:42)".
// Use it for broken invariants and for input errors alike; the message comes first because it
// is what the user reads, so stream the values they need to act (file name, tensor name,
// expected vs got). The location follows for whoever debugs.
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
  CheckFailure(const char* file, int line, const char* condition)
      : file_(file), line_(line), condition_(condition) {}
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  [[noreturn]] ~CheckFailure() noexcept(false) {
    std::string message = stream_.str();
    std::string base = file_;
    base = base.substr(base.find_last_of('/') + 1);
    std::ostringstream where;
    if (condition_ != nullptr) where << "check `" << condition_ << "` failed at ";
    where << base << ":" << line_;
    throw Error(message.empty() ? where.str() : message + " (" + where.str() + ")");
  }

  template <typename T>
  CheckFailure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  const char* file_;
  int line_;
  const char* condition_;
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
