// Drives an EngineCore on the calling thread until it is idle and collects each channel's
// tokens (all completions, in delivery order). Shared by the engine tests.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "tachyon/engine/engine_core.h"

namespace tachyon::testing {

inline std::vector<std::vector<int32_t>> run_engine_to_idle(
    engine::EngineCore& engine, const std::vector<std::shared_ptr<engine::OutputChannel>>& channels,
    int max_steps = 100000) {
  for (int guard = 0; engine.has_work() && guard < max_steps; ++guard) engine.step();
  std::vector<std::vector<int32_t>> out;
  for (const auto& channel : channels) {
    std::vector<int32_t> tokens;
    while (auto delta = channel->take(std::chrono::milliseconds(0))) {
      for (auto& c : delta->completions) tokens.insert(tokens.end(), c.token_ids.begin(), c.token_ids.end());
    }
    out.push_back(tokens);
  }
  return out;
}

}  // namespace tachyon::testing
