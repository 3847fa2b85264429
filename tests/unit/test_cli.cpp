// The tachyon binary as a user runs it: make-model then generate, exit codes, and the one-line
// errors a user sees for bad input. The generate tests without a model directory run the
// built-in canary model, as the README's first command does.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../cli_run.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/server/openai_protocol.h"

namespace tachyon {
namespace {

using testing::CliRun;
CliRun run(const std::string& args) { return testing::run_cli(args); }

// What generate printed on stdout: the output up to its "[tachyon] ..." summary on stderr.
std::string printed_text(const CliRun& r) { return r.output.substr(0, r.output.find("[tachyon] ")); }

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tachyon-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(CliTest, ListsPresets) {
  CliRun r = run("make-model --list");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("qwen3-8b"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tiny-rope-llama3"), std::string::npos) << r.output;
}

TEST_F(CliTest, MakeModelNeedsItsOptions) {
  CliRun r = run("make-model --preset tiny --out " + dir_.string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--arch, --preset and --out are required"), std::string::npos) << r.output;
  r = run("make-model --arch gpt2 --preset tiny --out " + dir_.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output.rfind("error: unknown --arch 'gpt2'", 0), 0u) << r.output;
}

TEST_F(CliTest, GenerateFromIdsMatchesTheLibrary) {
  ASSERT_EQ(run("make-model --arch llama --preset tiny --seed 3 --out " + dir_.string()).exit_code, 0);
  CliRun r = run("generate " + dir_.string() + " --prompt-ids 5,6,7,8 --max-tokens 10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  model::DenseModel model = model::DenseModel::load(dir_);
  std::vector<int32_t> prompt = {5, 6, 7, 8};
  std::ostringstream expected;
  for (int32_t id : model::greedy_generate(model, prompt, 10)) expected << id << " ";
  EXPECT_EQ(r.output.substr(0, expected.str().size()), expected.str()) << r.output;
  EXPECT_NE(r.output.find("generated 10 tokens"), std::string::npos) << r.output;
}

TEST_F(CliTest, GenerateWithTokenizerAndChatTemplate) {
  std::string tokenizer = std::string(TACHYON_TOKENIZERS) + "/qwen3";
  ASSERT_EQ(run("make-model --arch qwen3 --preset tiny --seed 1 --tokenizer " + tokenizer + " --out " + dir_.string())
                .exit_code,
            0);
  CliRun plain = run("generate " + dir_.string() + " --prompt 'Hello there' --max-tokens 8 --ignore-eos");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output.rfind("Hello there", 0), 0u) << plain.output;
  EXPECT_NE(plain.output.find("generated 8 tokens"), std::string::npos) << plain.output;
  CliRun chat = run("generate " + dir_.string() + " --prompt 'Hello there' --max-tokens 4 --chat --ignore-eos");
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  EXPECT_NE(chat.output.find("generated 4 tokens"), std::string::npos) << chat.output;
}

TEST_F(CliTest, GenerateErrorsAreOneActionableLine) {
  CliRun missing = run("generate " + dir_.string() + " --prompt-ids 1");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("no config.json in"), std::string::npos) << missing.output;
  ASSERT_EQ(run("make-model --arch llama --preset tiny --out " + dir_.string()).exit_code, 0);
  CliRun no_tokenizer = run("generate " + dir_.string() + " --prompt hi");
  EXPECT_EQ(no_tokenizer.exit_code, 1);
  EXPECT_NE(no_tokenizer.output.find("pass --prompt-ids"), std::string::npos) << no_tokenizer.output;
  // Ids are checked against the model's vocabulary (512 ids) as the server checks them.
  CliRun out_of_vocab = run("generate " + dir_.string() + " --prompt-ids 1,99999");
  EXPECT_EQ(out_of_vocab.exit_code, 1);
  EXPECT_EQ(out_of_vocab.output, "error: --prompt-ids: 'prompt' must be between 0 and 511, but got 99999.\n");
  CliRun stop_id = run("generate " + dir_.string() + " --prompt-ids 1 --stop-token-ids 3,512");
  EXPECT_EQ(stop_id.exit_code, 1);
  EXPECT_EQ(stop_id.output, "error: --stop-token-ids: 'stop_token_ids' must be between 0 and 511, but got 512.\n");
  CliRun bad_ids = run("generate " + dir_.string() + " --prompt-ids 1,x");
  EXPECT_EQ(bad_ids.exit_code, 1);
  EXPECT_NE(bad_ids.output.find("'x' is not an integer"), std::string::npos) << bad_ids.output;
}

// Every `build/bin/tachyon generate` command of the README, run exactly as written there, prints
// exactly the block under it. The first is the quickstart: the default max tokens let its answer
// finish at the stop string.
TEST_F(CliTest, ReadmeGenerateCommandsPrintWhatTheReadmeShows) {
  std::ifstream file(std::string(TACHYON_TEST_DATA) + "/../../README.md");
  const std::string readme((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const std::string binary = "build/bin/tachyon ";
  int commands = 0;
  for (size_t at = readme.find(binary + "generate "); at != std::string::npos;
       at = readme.find(binary + "generate ", at + 1)) {
    const size_t args = at + binary.size();
    const std::string command = readme.substr(args, readme.find('\n', args) - args);
    const size_t fence_closed = readme.find("\n```\n", args);  // the end of the command's block
    ASSERT_EQ(readme.compare(fence_closed + 5, 5, "\n```\n"), 0) << "no output block under: " << command;
    const size_t shown_begin = fence_closed + 10;
    const std::string shown = readme.substr(shown_begin, readme.find("```\n", shown_begin) - shown_begin);
    CliRun r = run(command);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(printed_text(r), shown) << command;
    ++commands;
  }
  EXPECT_GE(commands, 1);  // the quickstart at least
}

TEST_F(CliTest, GenerateSamplesWithTheApisOptions) {
  const std::string prompt = "generate --prompt 'Ann has 3 apples.' --max-tokens 16 --ignore-eos";
  CliRun greedy = run(prompt);
  CliRun first = run(prompt + " --temperature 0.9 --seed 7");
  CliRun again = run(prompt + " --temperature 0.9 --seed 7");
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(printed_text(first), printed_text(again));  // the seed fixes the sample
  EXPECT_NE(printed_text(first), printed_text(greedy)) << first.output;
  EXPECT_NE(first.output.find("generated 16 tokens"), std::string::npos) << first.output;
  // Every other sampling field is taken too (the table of options is tested beside the parser).
  CliRun all = run(prompt + " --temperature 0.7 --top-p 0.9 --top-k 20 --min-p 0.05 --presence-penalty 0.5"
                            " --frequency-penalty 0.5 --repetition-penalty 1.1 --seed 3 --min-tokens 2"
                            " --stop-token-ids 1,2 --include-stop-str-in-output --stop xyz --max-model-len 512");
  EXPECT_EQ(all.exit_code, 0) << all.output;
}

TEST_F(CliTest, GenerateNPrintsEachCompletionUnderAHeader) {
  CliRun r = run("generate --prompt 'Ann has 3 apples.' --max-tokens 6 --ignore-eos --temperature 0.9 --seed 7 --n 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t one = r.output.find("\n--- completion 1 of 2 (length, 6 tokens) ---\n");
  const size_t two = r.output.find("\n--- completion 2 of 2 (length, 6 tokens) ---\n");
  EXPECT_EQ(r.output.rfind("Ann has 3 apples.\n", 0), 0u) << r.output;  // the prompt once, in front
  EXPECT_NE(one, std::string::npos) << r.output;
  EXPECT_NE(two, std::string::npos) << r.output;
  EXPECT_LT(one, two) << r.output;
  EXPECT_NE(r.output.find("generated 12 tokens"), std::string::npos) << r.output;
}

TEST_F(CliTest, GenerateLogprobsListsEachTokenWithItsAlternatives) {
  CliRun r = run("generate --prompt 'Ann has 3 apples.' --max-tokens 4 --ignore-eos --logprobs 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string text = printed_text(r);
  const size_t table = text.find("\n--- logprobs: token logprob | 2 most likely ---\n");
  ASSERT_NE(table, std::string::npos) << r.output;
  // "<token>" <logprob> | "<alternative>" <logprob>, "<alternative>" <logprob>
  const std::string token = R"(("(?:[^"\\]|\\.)*") (-?[0-9]+\.[0-9]{4}|-inf))";
  const std::regex line("^" + token + R"( \| )" + token + ", " + token + "$");
  std::istringstream lines(text.substr(table + 1));
  std::string header, l;
  std::getline(lines, header);
  int count = 0;
  while (std::getline(lines, l)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, line)) << l;
    // Greedy: the sampled token is the most likely one.
    EXPECT_EQ(m[1], m[3]) << l;
    EXPECT_EQ(m[2], m[4]) << l;
    ++count;
  }
  EXPECT_EQ(count, 4) << r.output;
}

// A bad sampling value is refused with the server's own message for that field, naming the flag.
TEST_F(CliTest, GenerateRefusesBadSamplingValuesWithTheServersMessage) {
  const auto server_message = [](const std::string& fields) {
    try {
      server::parse_completion_request(R"({"prompt":"hi",)" + fields + "}", server::ServerLimits{});
    } catch (const server::ApiException& e) {
      return e.error().message;
    }
    return std::string("(accepted)");
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--top-p 2", R"("top_p":2)"},
      {"--n 0", R"("n":0)"},
      {"--top-k 0.5", R"("top_k":0.5)"},
      {"--temperature x", R"("temperature":"x")"},
      {"--logprobs 21", R"("logprobs":21)"},
      {"--stop-token-ids 1,x", R"("stop_token_ids":[1,"x"])"},
  };
  for (const auto& [flag, fields] : cases) {
    CliRun r = run("generate --prompt hi " + flag);
    EXPECT_EQ(r.exit_code, 1) << flag;
    const std::string name = flag.substr(0, flag.find(' '));
    EXPECT_EQ(r.output, "error: " + name + ": " + server_message(fields) + "\n") << flag;
  }
}


TEST_F(CliTest, BenchLatencyWritesVllmStyleJson) {
  ASSERT_EQ(run("make-model --arch qwen3 --preset tiny --seed 3 --out " + dir_.string()).exit_code, 0);
  const std::string json_path = (dir_ / "latency.json").string();
  CliRun r = run("bench latency " + dir_.string() +
                 " --device cpu --batch-size 2 --input-len 8 --output-len 5 --num-iters 2 --num-iters-warmup 1"
                 " --output-json " + json_path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json result = nlohmann::json::parse(std::ifstream(json_path));
  EXPECT_EQ(result["batch_size"], 2);
  EXPECT_EQ(result["device"], "cpu");
  EXPECT_EQ(result["latencies"].size(), 2u);
  EXPECT_GT(result["avg_latency"].get<double>(), 0.0);
  EXPECT_GT(result["decode_step_ms_median"].get<double>(), 0.0);
  EXPECT_GT(result["prefill_ms_median"].get<double>(), 0.0);
  EXPECT_GT(result["startup_s"].get<double>(), 0.0);
  EXPECT_NE(result["command"].get<std::string>().find("bench latency"), std::string::npos);
}

TEST_F(CliTest, BenchThroughputCountsEveryToken) {
  ASSERT_EQ(run("make-model --arch llama --preset tiny --seed 3 --out " + dir_.string()).exit_code, 0);
  const std::string json_path = (dir_ / "throughput.json").string();
  CliRun r = run("bench throughput " + dir_.string() +
                 " --device cpu --num-prompts 6 --input-len 12 --output-len 4 --max-num-seqs 4 --output-json " + json_path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json result = nlohmann::json::parse(std::ifstream(json_path));
  EXPECT_EQ(result["num_requests"], 6);
  EXPECT_EQ(result["total_num_tokens"], 6 * (12 + 4));
  EXPECT_GT(result["requests_per_second"].get<double>(), 0.0);
  EXPECT_GT(result["startup_s"].get<double>(), 0.0);
  EXPECT_GT(result["tokens_per_second"].get<double>(), result["output_tokens_per_second"].get<double>());
}

TEST_F(CliTest, DeviceFlagIsCheckedAndCudaNeedsACudaBuildOrAServableModel) {
  ASSERT_EQ(run("make-model --arch llama --preset tiny --seed 3 --out " + dir_.string()).exit_code, 0);
  CliRun r = run("generate " + dir_.string() + " --prompt-ids 1,2,3 --max-tokens 2 --device tpu");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--device"), std::string::npos) << r.output;
  // head_dim 16: the GPU kernels do not serve it, and a CPU-only build has no GPU path at all;
  // either way --device cuda fails with a reason, and auto runs on the CPU.
  r = run("generate " + dir_.string() + " --prompt-ids 1,2,3 --max-tokens 2 --device cuda");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("error: --device cuda", 0), 0u) << r.output;
  r = run("generate " + dir_.string() + " --prompt-ids 1,2,3 --max-tokens 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[tachyon] cpu:"), std::string::npos) << r.output;
}

TEST_F(CliTest, TensorParallelOnCpuThreadRanksMatchesTp1) {
  ASSERT_EQ(run("make-model --arch llama --preset tiny --seed 3 --out " + dir_.string()).exit_code, 0);
  const std::string args = "generate " + dir_.string() + " --prompt-ids 1,2,3 --max-tokens 5 --device cpu";
  CliRun tp1 = run(args + " --tp 1");
  CliRun tp2 = run(args + " --tp 2");
  ASSERT_EQ(tp1.exit_code, 0) << tp1.output;
  ASSERT_EQ(tp2.exit_code, 0) << tp2.output;
  const auto ids = [](const std::string& output) { return output.substr(0, output.find('\n')); };
  EXPECT_FALSE(ids(tp1.output).empty()) << tp1.output;
  EXPECT_EQ(ids(tp2.output), ids(tp1.output)) << tp2.output;
  // 4 heads do not split over 3 ranks: exit 1 and one line naming the field.
  CliRun tp3 = run(args + " --tp 3");
  EXPECT_EQ(tp3.exit_code, 1) << tp3.output;
  EXPECT_EQ(tp3.output.rfind("error: tensor parallel size 3 does not divide num_attention_heads 4", 0), 0u)
      << tp3.output;
  EXPECT_EQ(tp3.output.find('\n'), tp3.output.size() - 1) << tp3.output;
}

}  // namespace
}  // namespace tachyon
