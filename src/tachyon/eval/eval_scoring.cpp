// Prompt building, extraction and scoring for `tachyon eval`; see eval_scoring.h.
#include "tachyon/eval/eval_scoring.h"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tachyon/base/check.h"

namespace tachyon::eval {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
// [$0-9.,], the character class of the flexible regex's first branch.
bool is_number_char(char c) { return is_digit(c) || c == '$' || c == '.' || c == ','; }

struct Match {
  size_t begin = 0;
  size_t end = 0;  // one past the last character; end == begin: no match
};

// The flexible regex anchored at `pos`, as Python's re tries it: the first branch
// `-?[$0-9.,]{2,}` (greedy, nothing follows it, so the longest run is the match), else the
// second `-?[0-9]+`. A leading '-' that leaves too little behind is not part of either branch,
// and '-' is in neither class, so the match simply fails at `pos` then.
Match match_flexible_at(std::string_view s, size_t pos) {
  size_t i = pos + (s[pos] == '-' ? 1 : 0);
  size_t j = i;
  while (j < s.size() && is_number_char(s[j])) ++j;
  if (j - i >= 2) return {pos, j};
  j = i;
  while (j < s.size() && is_digit(s[j])) ++j;
  if (j > i) return {pos, j};
  return {pos, pos};
}

}  // namespace

std::vector<EvalRecord> read_eval_records(const std::string& path) {
  std::ifstream in(path);
  TACHYON_CHECK(in.good()) << "cannot read " << path;
  std::vector<EvalRecord> records;
  std::string line;
  for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    TACHYON_CHECK(j.is_object() && j.contains("question") && j["question"].is_string() && j.contains("answer") &&
                  j["answer"].is_string())
        << path << ":" << line_number << ": expected a JSON object with string fields \"question\" and \"answer\"";
    records.push_back({j["question"].get<std::string>(), j["answer"].get<std::string>()});
  }
  return records;
}

EvalSplit split_eval_records(const std::vector<EvalRecord>& dataset, const std::vector<EvalRecord>* shot_file,
                             int64_t k, int64_t limit) {
  TACHYON_CHECK(k >= 0 && limit >= 0) << "--few-shot and --limit must not be negative";
  const std::vector<EvalRecord>& shot_source = shot_file != nullptr ? *shot_file : dataset;
  TACHYON_CHECK(static_cast<int64_t>(shot_source.size()) >= k)
      << "--few-shot " << k << " needs " << k << " records, the shot source has " << shot_source.size();
  EvalSplit split;
  split.shots.assign(shot_source.begin(), shot_source.begin() + k);
  const int64_t first = shot_file != nullptr ? 0 : k;
  for (int64_t i = first; i < static_cast<int64_t>(dataset.size()); ++i) {
    if (limit > 0 && static_cast<int64_t>(split.scored.size()) >= limit) break;
    split.scored.push_back(i);
  }
  TACHYON_CHECK(!split.scored.empty()) << "no records left to score (dataset of " << dataset.size()
                                       << ", the first " << first << " are few-shot examples)";
  return split;
}

std::string build_prompt(const std::vector<EvalRecord>& shots, const std::string& question) {
  std::string prompt;
  for (const EvalRecord& shot : shots) prompt += "Question: " + shot.question + "\nAnswer: " + shot.answer + "\n\n";
  return prompt + "Question: " + question + "\nAnswer:";
}

std::string gold_answer(const std::string& answer) {
  const size_t marker = answer.rfind("#### ");
  TACHYON_CHECK(marker != std::string::npos) << "the answer has no \"#### \" line: " << answer;
  std::string gold = answer.substr(marker + 5);
  const size_t last = gold.find_last_not_of(" \t\r\n");
  gold.erase(last == std::string::npos ? 0 : last + 1);
  return normalize_number(gold);
}

std::optional<std::string> extract_strict(std::string_view completion) {
  for (size_t marker = completion.find("#### "); marker != std::string_view::npos;
       marker = completion.find("#### ", marker + 1)) {
    const size_t begin = marker + 5;
    size_t i = begin + (begin < completion.size() && completion[begin] == '-' ? 1 : 0);
    size_t j = i;
    while (j < completion.size() && (is_digit(completion[j]) || completion[j] == '.' || completion[j] == ',')) ++j;
    if (j > i) return std::string(completion.substr(begin, j - begin));
  }
  return std::nullopt;
}

std::optional<std::string> extract_flexible(std::string_view completion) {
  std::optional<std::string> last;
  size_t pos = 0;
  while (pos < completion.size()) {
    const Match m = match_flexible_at(completion, pos);
    if (m.end == m.begin) {
      ++pos;
      continue;
    }
    last = std::string(completion.substr(m.begin, m.end - m.begin));
    pos = m.end;
  }
  return last;
}

std::string normalize_number(std::string_view text) {
  std::string s;
  for (char c : text) {
    if (c != ',' && c != '$') s += c;
  }
  if (!s.empty() && s.back() == '.') s.pop_back();
  // Canonical form of -?[0-9]*(\.[0-9]*)? with at least one digit.
  const bool negative = !s.empty() && s[0] == '-';
  const size_t point = s.find('.');
  std::string whole = s.substr(negative ? 1 : 0, point == std::string::npos ? std::string::npos : point - (negative ? 1 : 0));
  std::string fraction = point == std::string::npos ? "" : s.substr(point + 1);
  auto all_digits = [](const std::string& part) {
    for (char c : part) {
      if (!is_digit(c)) return false;
    }
    return true;
  };
  if (!all_digits(whole) || !all_digits(fraction) || whole.size() + fraction.size() == 0) return s;
  whole.erase(0, std::min(whole.find_first_not_of('0'), whole.size()));
  fraction.erase(std::min(fraction.find_last_not_of('0') + 1, fraction.size()));
  std::string canonical = (whole.empty() ? "0" : whole) + (fraction.empty() ? "" : "." + fraction);
  return negative && canonical != "0" ? "-" + canonical : canonical;
}

EvalSample score_completion(int64_t index, const std::string& gold, const std::string& completion) {
  EvalSample sample;
  sample.index = index;
  sample.gold = gold;
  sample.completion = completion;
  if (auto strict = extract_strict(completion)) sample.strict = normalize_number(*strict);
  if (auto flexible = extract_flexible(completion)) sample.flexible = normalize_number(*flexible);
  sample.strict_correct = sample.strict.has_value() && *sample.strict == gold;
  sample.flexible_correct = sample.flexible.has_value() && *sample.flexible == gold;
  return sample;
}

EvalSummary summarize_eval(const std::vector<EvalSample>& samples) {
  EvalSummary summary;
  summary.samples = static_cast<int64_t>(samples.size());
  double latency_sum = 0;
  for (const EvalSample& s : samples) {
    if (!s.error.empty()) {
      ++summary.failures;
      continue;
    }
    summary.strict_correct += s.strict_correct ? 1 : 0;
    summary.flexible_correct += s.flexible_correct ? 1 : 0;
    latency_sum += s.latency_s;
  }
  if (summary.samples > 0) {
    summary.strict_accuracy = static_cast<double>(summary.strict_correct) / static_cast<double>(summary.samples);
    summary.flexible_accuracy = static_cast<double>(summary.flexible_correct) / static_cast<double>(summary.samples);
  }
  const int64_t succeeded = summary.samples - summary.failures;
  if (succeeded > 0) summary.mean_latency_s = latency_sum / static_cast<double>(succeeded);
  return summary;
}

}  // namespace tachyon::eval
