// Checks every architecture test makes (MoE, DeepSeek, DSA): the engine against the reference's
// greedy loop, and that the model loads on the CPU alone and over tensor-parallel CPU thread ranks.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine_run.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/base/check.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/runner/tp_cpu_model_runner.h"
#include "tachyon/app/runner_factory.h"

namespace tachyon::testing {

// The engine (CpuModelRunner, paged KV cache, continuous batching with chunked prefill) on
// `model` gives each of three prompts (3, 23 and 9 tokens; the 23-token one is chunked) the
// greedy tokens of the reference loop.
inline void expect_engine_matches_greedy_generate(const model::DenseModel& model, const std::string& label) {
  core::EngineConfig config;
  config.scheduler.max_num_batched_tokens = 16;  // the 23-token prompt is chunked
  config.scheduler.max_model_len = 64;
  config.num_blocks = 64;
  config.block_size = 4;
  engine::EngineCore engine(config, std::make_unique<runner::CpuModelRunner>(model, config.num_blocks, config.block_size));
  core::SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 6;
  params.ignore_eos = true;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<engine::OutputChannel>> channels;
  for (int length : {3, 23, 9}) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < length; ++i) {
      prompt.push_back(static_cast<int32_t>((i * 37 + length * 101 + 11) % model.config().vocab_size));
    }
    prompts.push_back(prompt);
    channels.push_back(std::make_shared<engine::OutputChannel>());
    engine.submit(prompt, params, channels.back());
  }
  const auto tokens = run_engine_to_idle(engine, channels, 1000);
  for (size_t p = 0; p < prompts.size(); ++p) {
    EXPECT_EQ(tokens[p], model::greedy_generate(model, prompts[p], 6)) << label << " prompt " << p;
  }
}

// The model in `dir` (of `model_type`) loads on the CPU, and with --tp 2 on CPU thread ranks.
inline void expect_cpu_load_and_tp_served(const std::filesystem::path& dir, const std::string& model_type) {
  core::EngineConfig config;
  config.device.kind = "cpu";
  EXPECT_EQ(app::load_runner(dir, config).model_config.model_type, model_type);
  core::EngineConfig tp_config;
  tp_config.device.kind = "cpu";
  tp_config.device.tensor_parallel_size = 2;
  const auto loaded = app::load_runner(dir, tp_config);
  EXPECT_NE(dynamic_cast<runner::TpCpuModelRunner*>(loaded.runner.get()), nullptr) << model_type;
}

}  // namespace tachyon::testing
