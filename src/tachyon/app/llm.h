// LLM: the offline API. Loads a HF model directory, runs an engine::EngineCore on its own thread, and
// generate() submits prompts and collects their outputs through ordinary OutputChannels: it is
// a consumer like any other (DESIGN rule 1), not a side door into the engine.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tachyon/engine/engine_core.h"
#include "tachyon/model/model_config.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::app {

struct CompletionOutput {
  int32_t index = 0;
  std::string text;  // text prompts only: detokenized, cut at the first stop string
  std::vector<int32_t> token_ids;
  std::vector<core::SampledToken> logprobs;  // parallel to token_ids when requested
  engine::FinishReason finish_reason = engine::FinishReason::kNone;
  std::string abort_reason;  // why the engine itself ended it (engine::CompletionDelta::abort_reason), else ""
};

struct GenerateOutput {
  int64_t request_id = 0;
  std::vector<int32_t> prompt_token_ids;
  std::vector<CompletionOutput> outputs;  // [n], by index
  int64_t num_prefix_hit_tokens = 0;
};

class LLM {
 public:
  // Loads the model on engine.device.kind (auto: the GPU when there is one); the
  // scheduler's eos_token_id defaults to the model's.
  LLM(const std::filesystem::path& model_dir, core::EngineConfig engine);
  ~LLM();

  // Submits every prompt (all with the same params), waits for all, returns them in order.
  // Throws engine::EngineFailedError when the engine fails meanwhile (or had failed).
  std::vector<GenerateOutput> generate(const std::vector<std::vector<int32_t>>& prompts, const core::SamplingParams& params);
  // Text prompts, tokenized with the model's tokenizer.json; outputs carry text, and
  // params.stop strings end a completion (trimmed, finish reason stop).
  std::vector<GenerateOutput> generate(const std::vector<std::string>& prompts, const core::SamplingParams& params);

  engine::EngineCore& engine() { return *engine_; }
  const model::ModelConfig& model_config() const { return model_config_; }

 private:
  std::vector<GenerateOutput> run(const std::vector<std::vector<int32_t>>& prompts, const core::SamplingParams& params,
                                  bool text);

  model::ModelConfig model_config_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;  // when the directory has tokenizer.json
  std::unique_ptr<engine::EngineCore> engine_;
};

}  // namespace tachyon::app
