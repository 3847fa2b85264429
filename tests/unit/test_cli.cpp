// The tachyon binary as a user runs it: make-model then generate, exit codes, and the one-line
// errors a user sees for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../cli_run.h"
#include "tachyon/model/dense_model.h"

namespace tachyon {
namespace {

using testing::CliRun;
CliRun run(const std::string& args) { return testing::run_cli(args); }

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
  CliRun out_of_vocab = run("generate " + dir_.string() + " --prompt-ids 1,99999");
  EXPECT_EQ(out_of_vocab.exit_code, 1);
  EXPECT_NE(out_of_vocab.output.find("token id 99999 is outside the vocabulary"), std::string::npos)
      << out_of_vocab.output;
  CliRun bad_ids = run("generate " + dir_.string() + " --prompt-ids 1,x");
  EXPECT_EQ(bad_ids.exit_code, 1);
  EXPECT_NE(bad_ids.output.find("'x' is not an integer"), std::string::npos) << bad_ids.output;
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
