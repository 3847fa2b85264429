// What `bench serve` sends and when: vLLM's random dataset (prompt and output lengths drawn
// uniformly in [len*(1-r), len*(1+r)], a shared random prefix) and its arrival process
// (gamma-distributed gaps with shape = burstiness and mean 1/rate; burstiness 1 is Poisson).
// Both are deterministic by seed. Tested in tests/server/test_bench_serve.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tachyon::cli {

struct RandomDatasetOptions {
  int32_t num_prompts = 1000;
  int32_t input_len = 1024;  // tokens after the prefix
  int32_t output_len = 128;
  int32_t prefix_len = 0;    // tokens shared by every prompt, in front
  double range_ratio = 0.0;  // in [0, 1)
  int64_t vocab_size = 32000;  // ids in [0, vocab_size); bench serve's when the server publishes none
  bool as_text = false;      // random words instead of token ids, for servers that take only text
  uint64_t seed = 0;
};

struct BenchRequest {
  std::vector<int32_t> prompt_ids;  // [prompt_len]; empty when the prompt is text
  std::string prompt_text;          // prompt_len random words; empty when the prompt is ids
  int32_t prompt_len = 0;           // tokens (ids) or words (text) including the prefix
  int32_t output_len = 0;           // max_tokens
};

// Inclusive bounds of a length drawn with vLLM's range ratio: floor(len*(1-r)) .. ceil(len*(1+r)),
// never below 1 (a prompt or an output of 0 tokens is not a request).
std::pair<int32_t, int32_t> length_range(int32_t len, double range_ratio);

std::vector<BenchRequest> make_random_requests(const RandomDatasetOptions& options);

// Send times in seconds from the start, one per request, non-decreasing. rate = inf: all at 0.
std::vector<double> arrival_times(int32_t num_requests, double request_rate, double burstiness, uint64_t seed);

}  // namespace tachyon::cli
