// Speculative decoding from the command line: generate prints the same text with the n-gram
// drafter, a draft model or MTP modules as without them and reports the acceptance; the bench
// commands report acceptance rate and mean acceptance length; what is not built or not verified
// is refused in one line before any weight loads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../cli_run.h"
#include "tachyon/base/file_util.h"

namespace tachyon::cli_speculative_test {

using testing::CliRun;

// What generate printed on stdout: the output up to its "[tachyon] ..." summary on stderr.
std::string text_before_summary(const CliRun& r) { return r.output.substr(0, r.output.find("[tachyon] ")); }

class CliSpeculativeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tachyon-cli-spec-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  CliRun make_model(const std::string& extra = "") {
    return testing::run_cli("make-model --arch qwen3 --preset tiny --seed 3 " + extra + " --out " + dir_.string());
  }
  std::filesystem::path dir_;
};

TEST_F(CliSpeculativeTest, GeneratePrintsTheSameTextWithNgramDrafts) {
  const std::string tokenizer = std::string(TACHYON_TOKENIZERS) + "/qwen3";
  ASSERT_EQ(make_model("--tokenizer " + tokenizer).exit_code, 0);
  const std::string args = "generate " + dir_.string() +
                           " --prompt 'one two three four, one two three four, one two three four,' --max-tokens 40 "
                           "--ignore-eos";
  CliRun plain = testing::run_cli(args);
  CliRun drafted = testing::run_cli(args + " --speculative-method ngram --num-speculative-tokens 3");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(drafted.exit_code, 0) << drafted.output;
  EXPECT_EQ(text_before_summary(drafted), text_before_summary(plain));
  EXPECT_NE(drafted.output.find("generated 40 tokens"), std::string::npos) << drafted.output;
  EXPECT_NE(drafted.output.find("[tachyon] Speculative decoding (ngram, k=3)"), std::string::npos) << drafted.output;
  EXPECT_EQ(plain.output.find("Speculative decoding"), std::string::npos) << plain.output;
  // Seeded sampling and the n-gram sizes given: still the plain text.
  const std::string seeded = args + " --temperature 0.8 --seed 7";
  CliRun seeded_plain = testing::run_cli(seeded);
  CliRun seeded_drafted =
      testing::run_cli(seeded + " --speculative-method ngram --num-speculative-tokens 4 --ngram-min 1 --ngram-max 3");
  ASSERT_EQ(seeded_drafted.exit_code, 0) << seeded_drafted.output;
  EXPECT_EQ(text_before_summary(seeded_drafted), text_before_summary(seeded_plain));
}

// `args` with the draft model `draft` (k = 3) prints what `args` alone prints, and says it drafted.
void expect_drafts_print_the_plain_text(const std::string& args, const std::filesystem::path& draft) {
  CliRun plain = testing::run_cli(args);
  CliRun drafted =
      testing::run_cli(args + " --speculative-method draft --num-speculative-tokens 3 --draft-model " + draft.string());
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(drafted.exit_code, 0) << drafted.output;
  EXPECT_EQ(text_before_summary(drafted), text_before_summary(plain));
  EXPECT_NE(drafted.output.find("[tachyon] Speculative decoding (draft, k=3)"), std::string::npos) << drafted.output;
}

// A draft model (itself, made again under another name, so every greedy draft is accepted or
// nearly) prints the plain text too; bench latency with forced acceptance 1 accepts every draft
// and says the figure is forced.
TEST_F(CliSpeculativeTest, DraftModelsPrintThePlainTextAndForcedAcceptanceIsReported) {
  const std::string tokenizer = std::string(TACHYON_TOKENIZERS) + "/qwen3";
  ASSERT_EQ(make_model("--tokenizer " + tokenizer).exit_code, 0);
  const std::filesystem::path draft = dir_.string() + "-draft";
  ASSERT_EQ(testing::run_cli("make-model --arch qwen3 --preset tiny --seed 3 --tokenizer " + tokenizer + " --out " +
                             draft.string())
                .exit_code,
            0);
  expect_drafts_print_the_plain_text("generate " + dir_.string() + " --prompt 'the cat sat on' --max-tokens 30 --ignore-eos",
                                     draft);

  const std::string latency_json = (dir_ / "latency.json").string();
  CliRun r = testing::run_cli("bench latency " + dir_.string() +
                              " --device cpu --batch-size 2 --input-len 8 --output-len 24 --num-iters 1"
                              " --num-iters-warmup 0 --speculative-method draft --num-speculative-tokens 3"
                              " --speculative-forced-acceptance 1 --draft-model " + draft.string() +
                              " --output-json " + latency_json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Speculative decoding (draft, k=3, forced acceptance)"), std::string::npos) << r.output;
  nlohmann::json result = nlohmann::json::parse(std::ifstream(latency_json));
  EXPECT_EQ(result["speculative"]["forced_acceptance"], 1.0);
  EXPECT_EQ(result["speculative"]["acceptance_rate"], 1.0);
  EXPECT_EQ(result["speculative"]["draft_model"], draft.string());
  std::filesystem::remove_all(draft);
}

// Over two tensor-parallel CPU ranks (the draft model whole beside them) the drafted run prints
// the plain tensor-parallel run's tokens. (A vocabulary of 512: the real tokenizers' do not split
// over two ranks.)
TEST_F(CliSpeculativeTest, DraftModelsOverTensorParallelRanksPrintThePlainTokens) {
  ASSERT_EQ(make_model().exit_code, 0);
  const std::filesystem::path draft = dir_.string() + "-tp-draft";
  ASSERT_EQ(testing::run_cli("make-model --arch qwen3 --preset tiny --seed 3 --out " + draft.string()).exit_code, 0);
  expect_drafts_print_the_plain_text(
      "generate " + dir_.string() + " --prompt-ids 5,6,7,5,6,7 --max-tokens 30 --ignore-eos --device cpu --tp 2", draft);
  std::filesystem::remove_all(draft);
}

TEST_F(CliSpeculativeTest, WhatIsNotBuiltOrNotVerifiedIsRefusedInOneLine) {
  ASSERT_EQ(make_model().exit_code, 0);
  const std::string args = "generate " + dir_.string() + " --prompt-ids 1,2,3 --max-tokens 2";
  const auto one_line_error = [](const CliRun& r, const std::string& start) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output.rfind("error: " + start, 0), 0u) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
  };
  // The tensor-parallel GPU runner verifies n-gram drafts on one node only: the rest is refused
  // before the device is even looked at.
  one_line_error(testing::run_cli(args + " --device cuda --tp 2 --speculative-method mtp --num-speculative-tokens 3"),
                 "--speculative-method mtp on --device cuda with --tp > 1 is not verified by any test yet");
  one_line_error(testing::run_cli(args + " --device cuda --tp 2 --nnodes 2 --speculative-method ngram "
                                         "--num-speculative-tokens 3"),
                 "--speculative-method ngram with --nnodes > 1: drafts do not travel");
  // Expert parallelism with a draft model is verified on CPU thread ranks (test_engine_draft_model.cpp),
  // not on GPUs.
  one_line_error(testing::run_cli(args + " --device cuda --tp 2 --enable-expert-parallel --speculative-method draft "
                                         "--num-speculative-tokens 3 --draft-model " + dir_.string()),
                 "--speculative-method draft with --enable-expert-parallel on GPUs is not verified by any test yet");
  one_line_error(testing::run_cli(args + " --speculative-method draft --num-speculative-tokens 3"),
                 "--speculative-method draft needs --draft-model DIR");
  one_line_error(testing::run_cli(args + " --speculative-method mtp --num-speculative-tokens 3"),
                 "--speculative-method mtp: " + dir_.string() + " has no MTP modules");
  one_line_error(testing::run_cli(args + " --speculative-method ngram"),
                 "--speculative-method ngram needs --num-speculative-tokens");
  one_line_error(testing::run_cli(args + " --speculative-method ngram --num-speculative-tokens 2 --ngram-min 3 --ngram-max 2"),
                 "--ngram-min 3 and --ngram-max 2");
  one_line_error(testing::run_cli(args + " --num-speculative-tokens 2"), "--num-speculative-tokens, --ngram-min");
  CliRun r = testing::run_cli(args + " --speculative-method ngram --num-speculative-tokens 17");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--num-speculative-tokens"), std::string::npos) << r.output;
  r = testing::run_cli(args + " --speculative-method eagle --num-speculative-tokens 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--speculative-method"), std::string::npos) << r.output;
  // auto on a machine (or build, or model) the GPU does not serve: the CPU, with drafts.
  r = testing::run_cli(args + " --speculative-method ngram --num-speculative-tokens 3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[tachyon] cpu:"), std::string::npos) << r.output;
}

// MTP: the tiny DeepSeek model's own module drafts; generate prints the plain tokens, greedy
// and seeded, on one runner, and on CPU thread ranks: tensor-parallel, expert-parallel and
// data-parallel. What no test covers is refused
// in one line before any weight loads.
TEST_F(CliSpeculativeTest, MtpPrintsThePlainTextAndIsRefusedWhereNotBuilt) {
  ASSERT_EQ(testing::run_cli("make-model --arch deepseek_v3 --preset tiny-deepseek-mtp --seed 3 --out " + dir_.string())
                .exit_code,
            0);
  const std::string args = "generate " + dir_.string() + " --prompt-ids 5,6,7,8,9,10,11,12,13 --max-tokens 30 --ignore-eos";
  for (const std::string sampling : {"", " --temperature 0.8 --seed 5"}) {
    CliRun plain = testing::run_cli(args + sampling);
    CliRun drafted = testing::run_cli(args + sampling + " --speculative-method mtp --num-speculative-tokens 2");
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    ASSERT_EQ(drafted.exit_code, 0) << drafted.output;
    EXPECT_EQ(text_before_summary(drafted), text_before_summary(plain)) << sampling;
    EXPECT_NE(drafted.output.find("generated 30 tokens"), std::string::npos) << drafted.output;
    EXPECT_NE(drafted.output.find("[tachyon] Speculative decoding (mtp, k=2)"), std::string::npos) << drafted.output;
  }
  const auto one_line_error = [](const CliRun& r, const std::string& start) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output.rfind("error: " + start, 0), 0u) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
  };
  const std::string mtp = " --speculative-method mtp --num-speculative-tokens 2";
  // The GPU drafts with one module (no test covers more): a config declaring two is refused
  // before anything loads, in every build.
  const std::filesystem::path two = dir_.string() + "-two-modules";
  std::filesystem::create_directories(two);
  nlohmann::json config = nlohmann::json::parse(read_file(dir_ / "config.json"));
  config["num_nextn_predict_layers"] = 2;
  write_file(two / "config.json", config.dump());
  one_line_error(testing::run_cli("generate " + two.string() + " --prompt-ids 5,6 --device cuda" + mtp),
                 "--speculative-method mtp on --device cuda drafts with one MTP module");
  std::filesystem::remove_all(two);
  // Over two tensor-parallel CPU ranks (they return the hidden states the module reads): the plain
  // tensor-parallel run's text.
  CliRun plain_tp = testing::run_cli(args + " --device cpu --tp 2");
  CliRun drafted_tp = testing::run_cli(args + " --device cpu --tp 2" + mtp);
  ASSERT_EQ(plain_tp.exit_code, 0) << plain_tp.output;
  ASSERT_EQ(drafted_tp.exit_code, 0) << drafted_tp.output;
  EXPECT_EQ(text_before_summary(drafted_tp), text_before_summary(plain_tp));
  EXPECT_NE(drafted_tp.output.find("[tachyon] Speculative decoding (mtp, k=2)"), std::string::npos)
      << drafted_tp.output;
  // With the experts split by expert (with and without two-batch overlap), with decode context
  // parallelism, and over two data-parallel replicas: each layout's plain text.
  for (const std::string layout : {" --device cpu --tp 2 --enable-expert-parallel",
                                   " --device cpu --tp 2 --enable-expert-parallel --enable-two-batch-overlap",
                                   " --device cpu --tp 2 --dcp 2", " --device cpu --dp 2"}) {
    CliRun plain_ranks = testing::run_cli(args + layout);
    CliRun drafted_ranks = testing::run_cli(args + layout + mtp);
    ASSERT_EQ(plain_ranks.exit_code, 0) << plain_ranks.output;
    ASSERT_EQ(drafted_ranks.exit_code, 0) << drafted_ranks.output;
    EXPECT_FALSE(text_before_summary(plain_ranks).empty()) << plain_ranks.output;
    EXPECT_EQ(text_before_summary(drafted_ranks), text_before_summary(plain_ranks)) << layout;
    EXPECT_NE(drafted_ranks.output.find("[tachyon] Speculative decoding (mtp, k=2)"), std::string::npos)
        << drafted_ranks.output;
  }
  one_line_error(testing::run_cli(args + mtp + " --ngram-min 2"),
                 "--ngram-min and --ngram-max are for --speculative-method ngram");
}

TEST_F(CliSpeculativeTest, BenchesReportAcceptance) {
  ASSERT_EQ(make_model().exit_code, 0);
  const std::string latency_json = (dir_ / "latency.json").string();
  CliRun r = testing::run_cli("bench latency " + dir_.string() +
                              " --device cpu --batch-size 2 --input-len 8 --output-len 24 --num-iters 1"
                              " --num-iters-warmup 0 --speculative-method ngram --num-speculative-tokens 4 --ngram-min 1"
                              " --ngram-max 2 --output-json " + latency_json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Speculative decoding (ngram, k=4)"), std::string::npos) << r.output;
  nlohmann::json result = nlohmann::json::parse(std::ifstream(latency_json));
  ASSERT_TRUE(result.contains("speculative")) << result.dump(2);
  EXPECT_EQ(result["speculative"]["num_speculative_tokens"], 4);
  EXPECT_EQ(result["speculative"]["ngram_max"], 2);
  EXPECT_EQ(result["speculative"]["acceptance_rate_per_position"].size(), 4u);
  EXPECT_GE(result["speculative"]["mean_acceptance_length"].get<double>(), 1.0);
  EXPECT_GT(result["decode_tokens_per_s"].get<double>(), 0.0);

  const std::string throughput_json = (dir_ / "throughput.json").string();
  r = testing::run_cli("bench throughput " + dir_.string() +
                       " --device cpu --num-prompts 4 --input-len 12 --output-len 20 --max-num-seqs 4"
                       " --speculative-method ngram --num-speculative-tokens 3 --ngram-min 1 --output-json " +
                       throughput_json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Speculative decoding (ngram, k=3)"), std::string::npos) << r.output;
  result = nlohmann::json::parse(std::ifstream(throughput_json));
  EXPECT_EQ(result["total_num_tokens"], 4 * (12 + 20));  // every token, drafts or not
  EXPECT_EQ(result["speculative"]["ngram_min"], 1);
  EXPECT_EQ(result["speculative"]["ngram_max"], 1);
  EXPECT_GE(result["speculative"]["acceptance_rate"].get<double>(), 0.0);
  EXPECT_LE(result["speculative"]["acceptance_rate"].get<double>(), 1.0);
}

}  // namespace tachyon::cli_speculative_test
