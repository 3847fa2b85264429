// SchedulerConfig: the scheduler's limits, plain data (the runner reads them too, to size its
// buffers, so they live apart from the Scheduler class).
#pragma once

#include <cstdint>
#include <optional>

namespace tachyon::core {

// Which work the scheduler serves first once running decodes are planned (engine/scheduler.h):
//  kFcfs      waiting sequences by arrival; a preempted one keeps its place, later arrivals wait.
//  kPriority  waiting sequences by (SamplingParams::priority, arrival).
//  kFair      each client (SamplingParams::client) gets an even share: prefill work and admission
//             go to the client that has had the fewest tokens computed, and a client holding more
//             of the KV cache than a waiting one would hold yields its latest sequence to it
//             (engine/fair_shares.h). One client's long prompts or n = 16 cannot lock others out.
//             SamplingParams::priority orders a client's own sequences (and breaks ties between
//             equally served clients): a client cannot buy a larger share with it.
enum class SchedulingPolicy { kFcfs, kPriority, kFair };

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;  // tokens computed per step, all sequences together
  int64_t max_num_seqs = 256;             // sequences running at once
  int64_t max_model_len = 4096;           // prompt + output tokens of one sequence
  bool enable_chunked_prefill = true;     // a prompt may be split across steps
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  std::optional<int32_t> eos_token_id;
};

}  // namespace tachyon::core
