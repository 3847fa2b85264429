// The pure half of `tachyon eval`: reading a JSONL task, few-shot prompts, answer extraction,
// normalization and scoring, exactly as lm-eval-harness's gsm8k task does them, so that our number
// can be put beside lm-eval's. No HTTP here (eval_command.cpp sends the prompts); everything is
// tested by tests/unit/test_eval_scoring.cpp.
//
// The one non-obvious decision: extraction is a hand-written scanner equivalent to lm-eval's two
// regexes (quoted on each function) instead of std::regex, whose recursive matcher can overflow the
// stack on a long run of digits, which is what an untrained model likes to emit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tachyon::eval {

// One line of the dataset: {"question": ..., "answer": worked solution ending "#### N"}.
struct EvalRecord {
  std::string question;
  std::string answer;
};

// Every non-blank line of a JSONL file; a line without string "question" and "answer" fails
// with its file and line number.
std::vector<EvalRecord> read_eval_records(const std::string& path);

// The few-shot examples and the records scored. Without a separate shot file the first `k`
// records of the dataset are the shots and are not scored; `limit` (0: all) caps the scored ones.
struct EvalSplit {
  std::vector<EvalRecord> shots;
  std::vector<int64_t> scored;  // indices into the dataset
};
EvalSplit split_eval_records(const std::vector<EvalRecord>& dataset, const std::vector<EvalRecord>* shot_file,
                             int64_t k, int64_t limit);

// lm-eval gsm8k: "Question: {q}\nAnswer: {a}\n\n" per shot, then "Question: {q}\nAnswer:".
std::string build_prompt(const std::vector<EvalRecord>& shots, const std::string& question);

// The gold number of an answer: the text after the last "#### ", normalized. Fails without one.
std::string gold_answer(const std::string& answer);

// strict-match: the first match of `#### (\-?[0-9\.\,]+)`, its group, raw.
std::optional<std::string> extract_strict(std::string_view completion);
// flexible-extract: the last match of `(-?[$0-9.,]{2,})|(-?[0-9]+)`, raw.
std::optional<std::string> extract_flexible(std::string_view completion);

// lm-eval's ignore list (drop every "," and "$", a trailing "."), then a canonical decimal so that
// "19.0", "019" and "19" compare equal; text that is not a number after that is returned as is.
std::string normalize_number(std::string_view text);

// One scored sample. The extracted answers are normalized; a failed request scores as wrong.
struct EvalSample {
  int64_t index = 0;  // the record's index in the dataset
  std::string gold;
  std::string completion;
  std::optional<std::string> strict;
  std::optional<std::string> flexible;
  bool strict_correct = false;
  bool flexible_correct = false;
  double latency_s = 0;
  std::string error;  // non-empty: the request failed after its retries
};
EvalSample score_completion(int64_t index, const std::string& gold, const std::string& completion);

struct EvalSummary {
  int64_t samples = 0;
  int64_t strict_correct = 0;
  int64_t flexible_correct = 0;
  int64_t failures = 0;
  double strict_accuracy = 0;    // over every sample, failures included
  double flexible_accuracy = 0;
  double mean_latency_s = 0;     // over the requests that succeeded
};
EvalSummary summarize_eval(const std::vector<EvalSample>& samples);

}  // namespace tachyon::eval
