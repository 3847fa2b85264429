// `tachyon eval`'s scoring without a server: the prompt byte for byte, strict and flexible
// extraction on awkward completions (cross-checked against Python's re with lm-eval's regexes),
// number normalization, the shot/score split and the summary.
//   ninja -C build unit_eval_scoring && build/tests/unit_eval_scoring
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tachyon/base/check.h"
#include "tachyon/eval/eval_scoring.h"

namespace tachyon::eval {
namespace {

TEST(EvalScoring, PromptMatchesLmEvalGsm8k) {
  std::vector<EvalRecord> shots = {{"Q1?", "A1.\n#### 1"}, {"Q2?", "#### 2"}};
  EXPECT_EQ(build_prompt(shots, "Q3?"),
            "Question: Q1?\nAnswer: A1.\n#### 1\n\n"
            "Question: Q2?\nAnswer: #### 2\n\n"
            "Question: Q3?\nAnswer:");
  EXPECT_EQ(build_prompt({}, "Q?"), "Question: Q?\nAnswer:");
}

TEST(EvalScoring, StrictTakesTheFirstNumberAfterTheMarker) {
  EXPECT_EQ(extract_strict("She has 24 - 5 = 19 apples.\n#### 19\n"), "19");
  EXPECT_EQ(extract_strict("#### 19\n\n#### 20"), "19");
  EXPECT_EQ(extract_strict("#### -5"), "-5");
  EXPECT_EQ(extract_strict("#### 1,234.50 dollars"), "1,234.50");
  EXPECT_EQ(extract_strict("#### 19."), "19.");
  // The marker needs its space, and a number right after it; a later marker can still match.
  EXPECT_EQ(extract_strict("####19"), std::nullopt);
  EXPECT_EQ(extract_strict("#### $5"), std::nullopt);
  EXPECT_EQ(extract_strict("#### - 5"), std::nullopt);
  EXPECT_EQ(extract_strict("#### x then #### 7"), "7");
  EXPECT_EQ(extract_strict("the answer is 7 and then 8"), std::nullopt);
  EXPECT_EQ(extract_strict(""), std::nullopt);
}

TEST(EvalScoring, FlexibleTakesTheLastNumberLikePythonRe) {
  // Expected values are what re.findall(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", s)[-1] gives.
  EXPECT_EQ(extract_flexible("the answer is 7 and then 8"), "8");
  EXPECT_EQ(extract_flexible("It costs $1,234."), "$1,234.");
  EXPECT_EQ(extract_flexible("#### 19\n"), "19");
  EXPECT_EQ(extract_flexible("so 24 - 5 = 19."), "19.");
  EXPECT_EQ(extract_flexible("down to -12 degrees"), "-12");
  EXPECT_EQ(extract_flexible("x=-7"), "-7");
  EXPECT_EQ(extract_flexible("a - b"), std::nullopt);
  EXPECT_EQ(extract_flexible("no number here"), std::nullopt);
  EXPECT_EQ(extract_flexible(""), std::nullopt);
  // The first branch needs two characters of its class, and the class holds "." and ",": a
  // lone ellipsis is a "number" to lm-eval too (and then matches no gold).
  EXPECT_EQ(extract_flexible("7 and so on..."), "...");
  EXPECT_EQ(extract_flexible("9, then"), "9,");
  EXPECT_EQ(extract_flexible("--5"), "-5");
  // A very long run of digits is one match (std::regex would recurse once per character).
  EXPECT_EQ(extract_flexible("x " + std::string(100000, '1')), std::string(100000, '1'));
}

TEST(EvalScoring, NormalizesNumbers) {
  EXPECT_EQ(normalize_number("$1,234."), "1234");
  EXPECT_EQ(normalize_number("19.0"), "19");
  EXPECT_EQ(normalize_number("19.50"), "19.5");
  EXPECT_EQ(normalize_number("019"), "19");
  EXPECT_EQ(normalize_number("0"), "0");
  EXPECT_EQ(normalize_number("000"), "0");
  EXPECT_EQ(normalize_number("-0.0"), "0");
  EXPECT_EQ(normalize_number("-5"), "-5");
  EXPECT_EQ(normalize_number(".5"), "0.5");
  EXPECT_EQ(normalize_number("19.."), "19") << "one trailing period goes, then \"19.\" reads as 19";
  EXPECT_EQ(normalize_number("1,000,000"), "1000000");
  EXPECT_EQ(normalize_number("..."), "..");
  EXPECT_EQ(normalize_number("1.2.3"), "1.2.3");
  EXPECT_EQ(normalize_number(""), "");
  EXPECT_EQ(normalize_number("-"), "-");
}

TEST(EvalScoring, GoldIsTheNumberAfterTheLastMarker) {
  EXPECT_EQ(gold_answer("Mia buys 3 * 4 = 12 apples.\n#### 19"), "19");
  EXPECT_EQ(gold_answer("#### 1,000\n"), "1000");
  EXPECT_EQ(gold_answer("#### 3\n#### 4"), "4");
  EXPECT_THROW(gold_answer("19"), tachyon::Error);
}

TEST(EvalScoring, ScoresStrictAndFlexibleSeparately) {
  EvalSample both = score_completion(3, "19", " 24 - 5 = 19 apples.\n#### 19");
  EXPECT_EQ(both.index, 3);
  EXPECT_TRUE(both.strict_correct);
  EXPECT_TRUE(both.flexible_correct);
  EvalSample flexible_only = score_completion(0, "19", " She has 19.0 apples.");
  EXPECT_EQ(flexible_only.strict, std::nullopt);
  EXPECT_EQ(flexible_only.flexible, "19");
  EXPECT_FALSE(flexible_only.strict_correct);
  EXPECT_TRUE(flexible_only.flexible_correct);
  EvalSample strict_only = score_completion(0, "19", "#### 19\nQuestion 2");
  EXPECT_TRUE(strict_only.strict_correct);
  EXPECT_FALSE(strict_only.flexible_correct);  // the last number is the 2
  EvalSample neither = score_completion(0, "19", "no idea");
  EXPECT_FALSE(neither.strict_correct || neither.flexible_correct);
  EXPECT_EQ(neither.flexible, std::nullopt);
}

TEST(EvalScoring, SummaryCountsFailuresAsWrong) {
  std::vector<EvalSample> samples(4);
  samples[0].strict_correct = samples[0].flexible_correct = true;
  samples[0].latency_s = 1.0;
  samples[1].flexible_correct = true;
  samples[1].latency_s = 3.0;
  samples[2].latency_s = 2.0;
  samples[3].error = "connection refused";
  EvalSummary s = summarize_eval(samples);
  EXPECT_EQ(s.samples, 4);
  EXPECT_EQ(s.strict_correct, 1);
  EXPECT_EQ(s.flexible_correct, 2);
  EXPECT_EQ(s.failures, 1);
  EXPECT_DOUBLE_EQ(s.strict_accuracy, 0.25);
  EXPECT_DOUBLE_EQ(s.flexible_accuracy, 0.5);
  EXPECT_DOUBLE_EQ(s.mean_latency_s, 2.0);
  EXPECT_EQ(summarize_eval({}).samples, 0);
}

TEST(EvalScoring, SplitsShotsFromScoredRecords) {
  std::vector<EvalRecord> data(10, EvalRecord{"q", "#### 1"});
  EvalSplit own = split_eval_records(data, nullptr, 3, 0);
  EXPECT_EQ(own.shots.size(), 3u);
  ASSERT_EQ(own.scored.size(), 7u);
  EXPECT_EQ(own.scored.front(), 3);
  EvalSplit limited = split_eval_records(data, nullptr, 3, 4);
  EXPECT_EQ(limited.scored, (std::vector<int64_t>{3, 4, 5, 6}));
  std::vector<EvalRecord> shot_file(2, EvalRecord{"s", "#### 2"});
  EvalSplit separate = split_eval_records(data, &shot_file, 2, 0);
  EXPECT_EQ(separate.shots[0].question, "s");
  EXPECT_EQ(separate.scored.size(), 10u);
  EXPECT_THROW(split_eval_records(data, &shot_file, 3, 0), tachyon::Error);
  EXPECT_THROW(split_eval_records(data, nullptr, 10, 0), tachyon::Error);  // nothing left to score
  EXPECT_EQ(split_eval_records(data, nullptr, 0, 0).scored.size(), 10u);
}

TEST(EvalScoring, ReadsTheCommittedCanarySample) {
  std::vector<EvalRecord> records = read_eval_records(std::string(TACHYON_TEST_DATA) + "/canary/test_sample.jsonl");
  ASSERT_EQ(records.size(), 40u);
  for (const EvalRecord& r : records) {
    // Every worked solution scores as correct against its own gold, by both rules.
    EvalSample self = score_completion(0, gold_answer(r.answer), " " + r.answer);
    EXPECT_TRUE(self.strict_correct && self.flexible_correct) << r.answer;
  }
}

TEST(EvalScoring, BadJsonlNamesTheLine) {
  auto path = std::filesystem::temp_directory_path() / ("tachyon-eval-" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream(path) << "{\"question\": \"q\", \"answer\": \"#### 1\"}\n\n{\"question\": \"q\"}\n";
  try {
    read_eval_records(path.string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(".jsonl:3:"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tachyon::eval
