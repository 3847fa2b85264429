// What a failed engine says. A step that throws (the runner: a CUDA error, out of memory, a rank
// of a group that failed; or a broken engine invariant) fails the engine: EngineCore::fail() ends
// every request it holds or has queued with RequestOutput::error set to the failure's message,
// stops stepping, and refuses every later submit() with EngineFailedError. The failed state is
// final: the runner's state after such an error is unknown (a CUDA context that hit an illegal
// address is unusable), so only a new process serves again. `tachyon serve` answers everyone,
// then exits with kEngineFailedExitCode (docs/api.md, "Lifecycle").
// Test: tests/unit/test_engine_failure.cpp, tests/server/test_server_engine_failure.cpp.
#pragma once

#include <string>

#include "tachyon/base/check.h"

namespace tachyon::engine {

// The engine has failed and takes no more requests (HTTP 503); what() names the failure.
class EngineFailedError : public Error {
 public:
  using Error::Error;
};

// `tachyon serve`'s exit status after its engine failed (1 is any start-up error).
inline constexpr int kEngineFailedExitCode = 3;

// The message a client reads: "the engine failed: <what the step threw>".
inline std::string engine_failure_message(const std::string& what) { return "the engine failed: " + what; }

}  // namespace tachyon::engine
