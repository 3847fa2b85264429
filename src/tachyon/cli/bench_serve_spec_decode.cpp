// Speculative decoding in `bench serve`'s report (see bench_serve_spec_decode.h).
#include "tachyon/cli/bench_serve_spec_decode.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace tachyon::cli {
namespace {

enum class Series { kDrafts, kDraftTokens, kAccepted, kAcceptedPerPosition };

// The series a sample's name is, under either prefix and with or without the counter's _total.
std::optional<Series> series_of(std::string_view name) {
  for (std::string_view prefix : {"tachyon:spec_decode_", "vllm:spec_decode_"}) {
    if (name.substr(0, prefix.size()) != prefix) continue;
    std::string_view rest = name.substr(prefix.size());
    if (rest.size() > 6 && rest.substr(rest.size() - 6) == "_total") rest.remove_suffix(6);
    if (rest == "num_drafts") return Series::kDrafts;
    if (rest == "num_draft_tokens") return Series::kDraftTokens;
    if (rest == "num_accepted_tokens") return Series::kAccepted;
    if (rest == "num_accepted_tokens_per_pos") return Series::kAcceptedPerPosition;
  }
  return std::nullopt;
}

// The value of label `key` in a sample's `{...}`; empty when absent.
std::string_view label_value(std::string_view labels, std::string_view key) {
  const std::string needle = std::string(key) + "=\"";
  for (size_t at = labels.find(needle); at != std::string_view::npos; at = labels.find(needle, at + 1)) {
    if (at > 0 && labels[at - 1] != '{' && labels[at - 1] != ',') continue;  // a longer name ending in key
    const size_t begin = at + needle.size();
    const size_t end = labels.find('"', begin);
    if (end != std::string_view::npos) return labels.substr(begin, end - begin);
  }
  return {};
}

}  // namespace

std::optional<SpecDecodeCounters> parse_spec_decode_counters(std::string_view exposition) {
  SpecDecodeCounters counters;
  bool seen = false;
  while (!exposition.empty()) {
    const size_t newline = exposition.find('\n');
    std::string_view line = exposition.substr(0, newline);
    exposition = newline == std::string_view::npos ? std::string_view{} : exposition.substr(newline + 1);
    if (line.empty() || line.front() == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string_view::npos) continue;
    const std::optional<Series> series = series_of(line.substr(0, name_end));
    if (!series) continue;
    std::string_view labels;
    size_t value_at = name_end;
    if (line[name_end] == '{') {
      const size_t close = line.find('}', name_end);
      if (close == std::string_view::npos) continue;
      labels = line.substr(name_end, close - name_end + 1);
      value_at = close + 1;
    }
    const std::string value_text(line.substr(value_at));
    char* end = nullptr;
    const double value = std::strtod(value_text.c_str(), &end);
    if (end == value_text.c_str() || !std::isfinite(value)) continue;
    seen = true;
    switch (*series) {
      case Series::kDrafts: counters.num_drafts += value; break;
      case Series::kDraftTokens: counters.draft_tokens += value; break;
      case Series::kAccepted: counters.accepted_tokens += value; break;
      case Series::kAcceptedPerPosition: {
        const std::string position(label_value(labels, "position"));
        char* position_end = nullptr;
        const long index = std::strtol(position.c_str(), &position_end, 10);
        // Positions are bounded by k (at most a few dozen); a label past that is not ours.
        if (position.empty() || *position_end != '\0' || index < 0 || index >= 1024) break;
        if (counters.accepted_per_position.size() <= static_cast<size_t>(index)) {
          counters.accepted_per_position.resize(static_cast<size_t>(index) + 1, 0.0);
        }
        counters.accepted_per_position[static_cast<size_t>(index)] += value;
        break;
      }
    }
  }
  if (!seen) return std::nullopt;
  return counters;
}

std::optional<SpecDecodeStats> spec_decode_stats(const std::optional<SpecDecodeCounters>& before,
                                                 const std::optional<SpecDecodeCounters>& after) {
  if (!before || !after) return std::nullopt;
  SpecDecodeStats stats;
  stats.num_drafts = std::llround(after->num_drafts - before->num_drafts);
  stats.draft_tokens = std::llround(after->draft_tokens - before->draft_tokens);
  stats.accepted_tokens = std::llround(after->accepted_tokens - before->accepted_tokens);
  if (stats.num_drafts <= 0 || stats.draft_tokens <= 0) return std::nullopt;  // no drafts in the run (or a restart)
  stats.acceptance_rate = static_cast<double>(stats.accepted_tokens) / static_cast<double>(stats.draft_tokens);
  stats.acceptance_length = 1.0 + static_cast<double>(stats.accepted_tokens) / static_cast<double>(stats.num_drafts);
  const size_t positions = after->accepted_per_position.size();
  for (size_t i = 0; i < positions; ++i) {
    const double earlier = i < before->accepted_per_position.size() ? before->accepted_per_position[i] : 0.0;
    stats.per_position_acceptance_rates.push_back((after->accepted_per_position[i] - earlier) /
                                                  static_cast<double>(stats.num_drafts));
  }
  return stats;
}

std::string format_spec_decode(const SpecDecodeStats& stats) {
  std::string out = fmt::format("{:-^50}\n", "Speculative Decoding");
  out += fmt::format("{:<40} {:<10.2f}\n", "Acceptance rate (%):", stats.acceptance_rate * 100.0);
  out += fmt::format("{:<40} {:<10.2f}\n", "Acceptance length:", stats.acceptance_length);
  out += fmt::format("{:<40} {:<10}\n", "Drafts:", stats.num_drafts);
  out += fmt::format("{:<40} {:<10}\n", "Draft tokens:", stats.draft_tokens);
  out += fmt::format("{:<40} {:<10}\n", "Accepted tokens:", stats.accepted_tokens);
  if (!stats.per_position_acceptance_rates.empty()) {
    std::string rates;
    for (double r : stats.per_position_acceptance_rates) rates += fmt::format("{}{:.2f}", rates.empty() ? "" : ", ", r * 100.0);
    out += fmt::format("{:<40} {}\n", "Per-position acceptance (%):", rates);
  }
  return out;
}

void add_spec_decode_json(nlohmann::ordered_json& result, const SpecDecodeStats& stats) {
  result["spec_decode_acceptance_rate"] = stats.acceptance_rate * 100.0;
  result["spec_decode_acceptance_length"] = stats.acceptance_length;
  result["spec_decode_num_drafts"] = stats.num_drafts;
  result["spec_decode_draft_tokens"] = stats.draft_tokens;
  result["spec_decode_accepted_tokens"] = stats.accepted_tokens;
  std::vector<double> per_position;
  for (double r : stats.per_position_acceptance_rates) per_position.push_back(r * 100.0);
  result["spec_decode_per_position_acceptance_rates"] = per_position;
}

}  // namespace tachyon::cli
