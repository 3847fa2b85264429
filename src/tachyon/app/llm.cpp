#include "tachyon/app/llm.h"

#include "tachyon/app/text_stream.h"
#include "tachyon/app/runner_factory.h"

namespace tachyon::app {

LLM::LLM(const std::filesystem::path& model_dir, core::EngineConfig engine) {
  if (std::filesystem::exists(model_dir / "tokenizer.json")) {
    tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_dir(model_dir));
  }
  app::LoadedRunner loaded = app::load_runner(model_dir, engine);
  model_config_ = loaded.model_config;
  if (!engine.scheduler.eos_token_id && model_config_.eos_token_id) {
    engine.scheduler.eos_token_id = static_cast<int32_t>(*model_config_.eos_token_id);
  }
  engine_ = std::make_unique<engine::EngineCore>(engine, std::move(loaded.runner), std::move(loaded.drafter));
  engine_->start();
}

LLM::~LLM() { engine_->stop(); }

std::vector<GenerateOutput> LLM::generate(const std::vector<std::vector<int32_t>>& prompts, const core::SamplingParams& params) {
  return run(prompts, params, /*text=*/false);
}

std::vector<GenerateOutput> LLM::generate(const std::vector<std::string>& prompts, const core::SamplingParams& params) {
  TACHYON_CHECK(tokenizer_ != nullptr) << "text prompts need a tokenizer.json in the model directory";
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& prompt : prompts) ids.push_back(tokenizer_->encode(prompt, /*add_special_tokens=*/true));
  return run(ids, params, /*text=*/true);
}

// Submits everything, then drains each channel in turn; the engine keeps running meanwhile and
// the deltas of requests not yet being read coalesce in their channels.
std::vector<GenerateOutput> LLM::run(const std::vector<std::vector<int32_t>>& prompts, const core::SamplingParams& params,
                                     bool text) {
  std::vector<GenerateOutput> results(prompts.size());
  std::vector<std::shared_ptr<engine::OutputChannel>> channels(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    channels[i] = std::make_shared<engine::OutputChannel>();
    results[i].prompt_token_ids = prompts[i];
    results[i].outputs.resize(static_cast<size_t>(params.n));
    for (int32_t index = 0; index < params.n; ++index) results[i].outputs[static_cast<size_t>(index)].index = index;
    results[i].request_id = engine_->submit(prompts[i], params, channels[i]);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<TextStream> streams;
    if (text) {
      for (int32_t index = 0; index < params.n; ++index) {
        streams.emplace_back(*tokenizer_, params.stop, params.include_stop_str_in_output,
                             /*skip_special_tokens=*/true, params.min_tokens);
      }
    }
    while (auto delta = channels[i]->take()) {
      // A failed engine (engine/engine_failure.h) gives no results: its error is the caller's.
      if (!delta->error.empty()) throw engine::EngineFailedError(delta->error);
      results[i].num_prefix_hit_tokens = delta->num_prefix_hit_tokens;
      for (engine::CompletionDelta& d : delta->completions) {
        CompletionOutput& out = results[i].outputs[static_cast<size_t>(d.index)];
        if (text && streams[static_cast<size_t>(d.index)].stopped()) continue;  // already ended by a stop string
        out.token_ids.insert(out.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
        out.logprobs.insert(out.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
        if (d.finish_reason != engine::FinishReason::kNone) out.finish_reason = d.finish_reason;
        if (!d.abort_reason.empty()) out.abort_reason = d.abort_reason;
        if (!text) continue;
        TextStream& stream = streams[static_cast<size_t>(d.index)];
        out.text += stream.push(d.token_ids);
        if (stream.stopped()) {
          out.finish_reason = engine::FinishReason::kStop;
          if (d.finish_reason == engine::FinishReason::kNone) engine_->abort(results[i].request_id, d.index);
        } else if (d.finish_reason != engine::FinishReason::kNone) {
          out.text += stream.finish();
        }
      }
      if (delta->finished) break;
    }
  }
  return results;
}

}  // namespace tachyon::app
