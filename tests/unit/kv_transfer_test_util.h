// Helpers of the disaggregation transport tests (test_kv_transport.cpp, test_kv_by_reference.cpp):
// step an engine until it is idle, collect a channel's tokens, wait for a condition.
#pragma once

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "tachyon/engine/engine_core.h"

namespace tachyon::server::kv_test {

inline void run_idle(engine::EngineCore& e) {
  for (int guard = 0; e.has_work() && guard < 100000; ++guard) e.step();
  e.step();
}

inline std::vector<int32_t> tokens_of(engine::OutputChannel& channel) {
  std::vector<int32_t> tokens;
  while (auto out = channel.take(std::chrono::milliseconds(0))) {
    for (const auto& d : out->completions) tokens.insert(tokens.end(), d.token_ids.begin(), d.token_ids.end());
  }
  return tokens;
}

// Polls for up to 10 s: bounded only so that a condition that never holds fails instead of hanging.
inline bool wait_for(const std::function<bool()>& condition) {
  for (int i = 0; i < 2000 && !condition(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return condition();
}

}  // namespace tachyon::server::kv_test
