// `tachyon eval` end to end: the real binary against an in-process server on a tiny random Qwen3,
// on the committed canary sample. Random weights score about 0; what is checked is the mechanics:
// exit code, the count of scored samples, the JSON report and its per-sample records, the prompt
// format as sent, and that an unreachable server fails loudly instead of reporting an accuracy.
//   ninja -C build tachyon_cli server_eval && build/tests/server_eval
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../cli_run.h"
#include "server_fixture.h"

namespace tachyon::server::testing {
namespace {

using tachyon::testing::CliRun;
using tachyon::testing::run_cli;

const std::string kSample = std::string(TACHYON_TEST_DATA) + "/canary/test_sample.jsonl";

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::filesystem::path temp_json(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("tachyon-eval-" + std::to_string(::getpid()) + "-" + name + ".json");
}

TEST(Eval, ScoresTheCanarySampleThroughTheServer) {
  ServerUnderTest server;
  const std::filesystem::path json_path = temp_json("e2e");
  const std::string url = "http://127.0.0.1:" + std::to_string(server.server->bound_port());
  CliRun r = run_cli("eval --base-url " + url + " --dataset " + kSample +
                     " --few-shot 2 --limit 6 --max-tokens 16 --concurrency 3 --no-progress --output-json " +
                     json_path.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("strict-match"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("flexible-extract"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model tiny"), std::string::npos) << "the model comes from GET /v1/models\n" << r.output;

  std::ifstream in(json_path);
  ASSERT_TRUE(in.good());
  nlohmann::json report = nlohmann::json::parse(in);
  std::filesystem::remove(json_path);
  EXPECT_NE(report["command"].get<std::string>().find(" eval "), std::string::npos);
  EXPECT_EQ(report["model"], "tiny");
  EXPECT_EQ(report["num_samples"], 6);
  EXPECT_EQ(report["failures"], 0);
  for (const char* rule : {"strict", "flexible"}) {
    const double accuracy = report[rule]["accuracy"].get<double>();
    EXPECT_GE(accuracy, 0.0);
    EXPECT_LE(accuracy, 1.0);
  }
  EXPECT_GT(report["mean_latency_s"].get<double>(), 0.0);
  EXPECT_EQ(report["stop"], nlohmann::json({"Question:", "\n\n"}));

  // The first two records are the shots, sent verbatim, and are not scored.
  const std::vector<nlohmann::json> records = read_jsonl(kSample);
  const std::string shots = "Question: " + records[0]["question"].get<std::string>() + "\nAnswer: " +
                            records[0]["answer"].get<std::string>() + "\n\nQuestion: " +
                            records[1]["question"].get<std::string>() + "\nAnswer: " +
                            records[1]["answer"].get<std::string>() + "\n\n";
  EXPECT_EQ(report["prompt_example"], shots + "Question: " + records[2]["question"].get<std::string>() + "\nAnswer:");

  const nlohmann::json& samples = report["samples"];
  ASSERT_EQ(samples.size(), 6u);
  int64_t strict_correct = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const nlohmann::json& s = samples[i];
    EXPECT_EQ(s["index"], static_cast<int64_t>(i) + 2);
    const std::string answer = records[i + 2]["answer"].get<std::string>();
    EXPECT_EQ(s["gold"], answer.substr(answer.rfind("#### ") + 5));
    EXPECT_TRUE(s["completion"].is_string());
    EXPECT_TRUE(s["strict"].is_null() || s["strict"].is_string());
    EXPECT_TRUE(s["flexible"].is_null() || s["flexible"].is_string());
    EXPECT_FALSE(s.contains("error")) << s;
    strict_correct += s["strict_correct"].get<bool>() ? 1 : 0;
  }
  EXPECT_EQ(report["strict"]["correct"], strict_correct);
  EXPECT_TRUE(server.wait_idle());
}

TEST(Eval, UnreachableServerFailsLoudly) {
  // Port 1 refuses connections: without --model the model lookup fails first ...
  CliRun r = run_cli("eval --base-url http://127.0.0.1:1 --dataset " + kSample + " --limit 2 --no-progress");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error: cannot reach http://127.0.0.1:1"), std::string::npos) << r.output;
  // ... with it, every request fails after its retries; the report still comes, then exit 1.
  const std::filesystem::path json_path = temp_json("unreachable");
  r = run_cli("eval --base-url http://127.0.0.1:1 --model m --dataset " + kSample +
              " --limit 2 --no-progress --output-json " + json_path.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("2 of 2 requests failed"), std::string::npos) << r.output;
  std::ifstream in(json_path);
  ASSERT_TRUE(in.good());
  nlohmann::json report = nlohmann::json::parse(in);
  std::filesystem::remove(json_path);
  EXPECT_EQ(report["failures"], 2);
  EXPECT_EQ(report["strict"]["accuracy"], 0.0);
  EXPECT_TRUE(report["samples"][0]["error"].get<std::string>().starts_with("connection error")) << report;
}

}  // namespace
}  // namespace tachyon::server::testing
