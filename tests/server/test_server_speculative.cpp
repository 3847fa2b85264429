// Speculative decoding served: a server whose engine has the n-gram drafter, or a draft model
// (EngineConfig's speculative, as `serve --speculative-method ngram|draft` sets it), streams the
// same completions as one without, for greedy and seeded requests (with logprobs), and /metrics
// shows the spec_decode counters with one accepted-per-position series per draft position.
#include <gtest/gtest.h>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "server_fixture.h"

namespace tachyon::server::testing::speculative_test {

using nlohmann::json;

struct Streamed {
  std::string text;
  std::vector<double> logprobs;
  std::string finish_reason;
};

Streamed stream_completion(const ServerUnderTest& server, const std::string& request) {
  auto r = server.client().Post("/v1/completions", request, "application/json");
  Streamed out;
  if (!r || r->status != 200) {
    ADD_FAILURE() << (r ? r->body : "no answer");
    return out;
  }
  const std::vector<std::string> frames = sse_payloads(r->body);
  EXPECT_FALSE(frames.empty());
  EXPECT_EQ(frames.back(), "[DONE]");
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    const json chunk = json::parse(frames[i]);
    if (chunk["choices"].empty()) continue;
    const json& choice = chunk["choices"][0];
    out.text += choice["text"].get<std::string>();
    if (choice.contains("logprobs") && choice["logprobs"].is_object()) {
      for (const json& l : choice["logprobs"]["token_logprobs"]) out.logprobs.push_back(l.get<double>());
    }
    if (!choice["finish_reason"].is_null()) out.finish_reason = choice["finish_reason"].get<std::string>();
  }
  return out;
}

core::EngineConfig speculative_engine(const core::SpeculativeConfig& speculative) {
  core::EngineConfig c = ServerUnderTest::default_engine();
  c.speculative = speculative;
  return c;
}

void expect_served_like_plain(const core::SpeculativeConfig& speculative) {
  const std::vector<std::string> requests = {
      R"({"prompt":"one two three, one two three, one two three, one two","max_tokens":48,"temperature":0,"ignore_eos":true,"stream":true})",
      R"({"prompt":"a b c d a b c d a b c d","max_tokens":40,"temperature":0,"ignore_eos":true,"stream":true,"logprobs":2})",
      R"({"prompt":"The capital of France","max_tokens":32,"temperature":0.8,"seed":11,"ignore_eos":true,"stream":true,"logprobs":1})",
      R"({"prompt":"x y x y x y","max_tokens":24,"temperature":0.6,"seed":3,"frequency_penalty":0.5,"stream":true})",
  };
  std::vector<Streamed> plain;
  {
    ServerUnderTest server;
    for (const std::string& request : requests) plain.push_back(stream_completion(server, request));
  }
  ServerUnderTest server(speculative_engine(speculative));
  for (size_t i = 0; i < requests.size(); ++i) {
    const Streamed got = stream_completion(server, requests[i]);
    EXPECT_EQ(got.text, plain[i].text) << requests[i];
    EXPECT_EQ(got.finish_reason, plain[i].finish_reason) << requests[i];
    ASSERT_EQ(got.logprobs.size(), plain[i].logprobs.size()) << requests[i];
    for (size_t t = 0; t < got.logprobs.size(); ++t) EXPECT_NEAR(got.logprobs[t], plain[i].logprobs[t], 1e-4) << requests[i];
  }
  ASSERT_TRUE(server.wait_idle());
  const engine::EngineStats stats = server.context->engine().stats();
  EXPECT_GT(stats.draft_tokens, 0);
  EXPECT_GT(stats.draft_tokens_accepted, 0);

  auto metrics = server.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  ASSERT_EQ(metrics->status, 200);
  const std::string& body = metrics->body;
  const auto value_of = [&](const std::string& series) {
    const size_t at = body.find("\n" + series + " ");
    EXPECT_NE(at, std::string::npos) << series << "\n" << body;
    return at == std::string::npos ? -1.0 : std::stod(body.substr(at + series.size() + 2));
  };
  EXPECT_EQ(value_of("tachyon:spec_decode_num_draft_tokens_total{model_name=\"tiny\"}"), static_cast<double>(stats.draft_tokens));
  EXPECT_EQ(value_of("tachyon:spec_decode_num_accepted_tokens_total{model_name=\"tiny\"}"),
            static_cast<double>(stats.draft_tokens_accepted));
  EXPECT_EQ(value_of("tachyon:spec_decode_num_drafts_total{model_name=\"tiny\"}"), static_cast<double>(stats.num_drafts));
  double per_position = 0;
  for (int i = 0; i < 4; ++i) {
    per_position += value_of("tachyon:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"" +
                             std::to_string(i) + "\"}");
  }
  EXPECT_EQ(per_position, static_cast<double>(stats.draft_tokens_accepted));
  EXPECT_EQ(body.find("position=\"4\""), std::string::npos);  // bounded by k
}

TEST(ServerSpeculative, NgramDraftsStreamTheSameCompletionsAsWithoutDrafts) {
  expect_served_like_plain({.method = "ngram", .num_speculative_tokens = 4, .ngram_min = 1, .ngram_max = 3});
}

// The draft model is the served model's twin (make-model with the same seed, in its own
// directory), so drafts are accepted and the metrics move; other draft models are
// tests/unit/test_engine_draft_model.cpp's.
TEST(ServerSpeculative, DraftModelDraftsStreamTheSameCompletionsAsWithoutDrafts) {
  const std::filesystem::path draft =
      std::filesystem::temp_directory_path() / ("tachyon-server-draft-" + std::to_string(::getpid()));
  model::make_model({.arch = "qwen3",
                     .preset = "tiny",
                     .seed = 5,
                     .tokenizer_dir = std::filesystem::path(TACHYON_TOKENIZERS) / "qwen3",
                     .out_dir = draft});
  expect_served_like_plain({.method = "draft", .num_speculative_tokens = 4, .draft_model = draft.string()});
  std::filesystem::remove_all(draft);
}

}  // namespace tachyon::server::testing::speculative_test
