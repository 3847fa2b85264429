// SchedulerConfig: the scheduler's limits, plain data (the runner reads them too, to size its
// buffers, so they live apart from the Scheduler class).
#pragma once

#include <cstdint>
#include <optional>

namespace tachyon::core {

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;  // tokens computed per step, all sequences together
  int64_t max_num_seqs = 256;             // sequences running at once
  int64_t max_model_len = 4096;           // prompt + output tokens of one sequence
  bool enable_chunked_prefill = true;     // a prompt may be split across steps
  bool priority_scheduling = false;       // order waiting by (priority, arrival) instead of arrival
  std::optional<int32_t> eos_token_id;
};

}  // namespace tachyon::core
