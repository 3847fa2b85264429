// The offline LLM API end to end on a tiny model with the real Qwen3 tokenizer: text prompts,
// greedy text equal to the reference forward's, and stop strings that end a completion early
// (trimmed, finish reason stop, the engine's blocks freed).
#include "tachyon/app/llm.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"

namespace tachyon::engine {
using namespace tachyon::core; using namespace tachyon::app;
namespace {

class LlmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("tachyon-llm-" + std::to_string(::getpid())));
    model::make_model({.arch = "qwen3",
                       .preset = "tiny",
                       .seed = 4,
                       .tokenizer_dir = std::filesystem::path(TACHYON_TOKENIZERS) / "qwen3",
                       .out_dir = *dir_});
    EngineConfig config;
    config.device.kind = "cpu";  // compared with the CPU reference forward below
    config.scheduler.max_model_len = 256;
    config.num_blocks = 128;
    llm_ = new LLM(*dir_, config);
  }
  static void TearDownTestSuite() {
    delete llm_;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static SamplingParams greedy(int max_tokens) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
  }
  static std::filesystem::path* dir_;
  static LLM* llm_;
};
std::filesystem::path* LlmTest::dir_ = nullptr;
LLM* LlmTest::llm_ = nullptr;

TEST_F(LlmTest, TextGenerationMatchesTheReferenceForward) {
  auto outputs = llm_->generate(std::vector<std::string>{"Hello, world", "Once upon a time"}, greedy(16));
  ASSERT_EQ(outputs.size(), 2u);
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_dir(*dir_);
  const model::DenseModel reference = model::DenseModel::load(*dir_);
  for (const GenerateOutput& out : outputs) {
    const CompletionOutput& c = out.outputs[0];
    EXPECT_EQ(c.token_ids, model::greedy_generate(reference, out.prompt_token_ids, 16));
    EXPECT_EQ(c.text, tok.decode(c.token_ids, /*skip_special_tokens=*/true));
    EXPECT_EQ(c.finish_reason, FinishReason::kLength);
  }
}

TEST_F(LlmTest, StopStringEndsTheCompletion) {
  const std::string prompt = "The quick brown fox";
  const std::string full = llm_->generate(std::vector<std::string>{prompt}, greedy(40))[0].outputs[0].text;
  ASSERT_GT(full.size(), 12u);
  // A stop string from the middle of what the model says anyway, on character boundaries.
  size_t at = full.size() / 2;
  while (at < full.size() && (static_cast<unsigned char>(full[at]) & 0xC0) == 0x80) ++at;
  size_t end = at + 1;
  while (end < full.size() && (static_cast<unsigned char>(full[end]) & 0xC0) == 0x80) ++end;
  const std::string stop = full.substr(at, end - at);
  SamplingParams p = greedy(40);
  p.stop = {stop};
  const CompletionOutput stopped = llm_->generate(std::vector<std::string>{prompt}, p)[0].outputs[0];
  EXPECT_EQ(stopped.text, full.substr(0, full.find(stop)));
  EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
  EXPECT_LT(stopped.token_ids.size(), 40u);
  p.include_stop_str_in_output = true;
  EXPECT_EQ(llm_->generate(std::vector<std::string>{prompt}, p)[0].outputs[0].text,
            full.substr(0, full.find(stop)) + stop);
  // The stopped request left nothing behind.
  for (int i = 0; i < 100 && llm_->engine().stats().num_active_requests > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EngineStats s = llm_->engine().stats();
  EXPECT_EQ(s.num_active_requests, 0);
  EXPECT_EQ(s.kv_blocks_free, s.kv_blocks_total);
}

}  // namespace
}  // namespace tachyon::engine
