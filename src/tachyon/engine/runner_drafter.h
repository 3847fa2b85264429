// RunnerDrafter: proposes the drafts the runner made itself in the previous step
// (core::SequenceOutput::next_drafts): the CUDA runner's MTP drafting
// (runner/cuda/cuda_mtp_drafter.h), which runs on the device right after the step's sampler.
// A sequence's drafts continue the tokens the step produced, all of them applied; they are
// proposed only while the sequence still has exactly that many tokens (a step trimmed at a stop
// ends the sequence anyway), and once. Drafts affect speed only: the runner verifies them.
// Tests: tests/unit/test_runner_drafter.cpp; the GPU run: tests/gpu/test_cuda_speculative.cpp.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "tachyon/engine/drafter.h"

namespace tachyon::engine {

class RunnerDrafter : public Drafter {
 public:
  std::vector<int32_t> propose(int64_t sequence_id, std::span<const int32_t> tokens) override;
  void release(int64_t sequence_id) override { drafts_.erase(sequence_id); }
  void observe(const core::StepPlan& plan, const core::StepOutput& output) override;

  size_t num_sequences() const { return drafts_.size(); }  // tests: sequences holding drafts

 private:
  struct Drafts {
    std::vector<int32_t> tokens;
    int64_t continues = 0;  // the sequence's token count they continue
  };
  std::unordered_map<int64_t, Drafts> drafts_;
};

}  // namespace tachyon::engine
