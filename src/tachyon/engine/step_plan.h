// StepPlan: everything a runner needs for one step, built once on the host by the scheduler.
// Token-major arrays cover the ragged batch flattened in sequence order; per-sequence entries
// say which slice is whose. A runner (CPU now, CUDA later) turns it into device inputs with one
// upload and never reads back anything but the sampled tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tachyon/engine/sampling_params.h"

namespace tachyon::engine {

struct ScheduledSequence {
  int64_t sequence_id = 0;
  int64_t first_token = 0;        // index of its first token in StepPlan::token_ids
  int64_t num_tokens = 0;         // tokens computed this step
  int64_t num_computed = 0;       // tokens already in the KV cache before this step
  std::vector<int32_t> block_table;  // [ceil((num_computed + num_tokens) / block_size)] block ids
  bool sample = false;            // this step reaches its last known token: sample the next one
  // Sampling inputs (valid while the plan is being executed; set when `sample`).
  const SamplingParams* params = nullptr;
  uint64_t seed = 0;
  std::span<const int32_t> prompt_tokens;
  std::span<const int32_t> output_tokens;
  std::optional<int32_t> eos_token_id;
};

struct StepPlan {
  int32_t block_size = 0;
  std::vector<int32_t> token_ids;     // [num_tokens]
  std::vector<int64_t> positions;     // [num_tokens]
  std::vector<int64_t> slot_mapping;  // [num_tokens] block_id * block_size + offset of each token's K/V
  std::vector<int64_t> logits_rows;   // [num_sampled] rows of token_ids to sample from, in sequence order
  std::vector<ScheduledSequence> sequences;
  std::vector<int64_t> preempted;     // sequence ids preempted while planning this step

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  bool empty() const { return sequences.empty(); }
};

}  // namespace tachyon::engine
