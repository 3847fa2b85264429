// Speculative decoding in `bench serve`'s report: the server's spec_decode counters read from its
// /metrics before and after the timed run, so the figures cover the benchmark's requests alone
// (warm-ups and the initial test request fall before the first reading). tachyon's series
// (tachyon:spec_decode_*, server/metrics.cpp) and vLLM's (vllm:spec_decode_*) are both read, so a
// run against either server reports the same way. A server without speculation, or with no
// drafts in the run, adds nothing to the report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tachyon::cli {

// One reading of a server's counters (sums over every label set but position).
struct SpecDecodeCounters {
  double num_drafts = 0;       // sequence steps that carried drafts
  double draft_tokens = 0;     // draft tokens verified
  double accepted_tokens = 0;  // draft tokens accepted
  std::vector<double> accepted_per_position;  // [position]: accepted at each draft position
};

// The counters in a Prometheus text exposition; nullopt when it has no spec_decode series (a
// server without speculation, or one that does not publish them).
std::optional<SpecDecodeCounters> parse_spec_decode_counters(std::string_view exposition);

// What the run's drafts did: the difference of two readings.
struct SpecDecodeStats {
  int64_t num_drafts = 0;
  int64_t draft_tokens = 0;
  int64_t accepted_tokens = 0;
  double acceptance_rate = 0;    // accepted / draft tokens
  double acceptance_length = 0;  // 1 + accepted / drafts: tokens a drafted step yields on average
  std::vector<double> per_position_acceptance_rates;  // accepted at position i / drafts
};

// nullopt when either reading is missing or the run carried no drafts.
std::optional<SpecDecodeStats> spec_decode_stats(const std::optional<SpecDecodeCounters>& before,
                                                 const std::optional<SpecDecodeCounters>& after);

// The "Speculative Decoding" section of the result table (format_table's `sections`).
std::string format_spec_decode(const SpecDecodeStats& stats);

// The result JSON's spec_decode_* keys (rates in percent, as the table shows them).
void add_spec_decode_json(nlohmann::ordered_json& result, const SpecDecodeStats& stats);

}  // namespace tachyon::cli
