// /v1/embeddings. A generative model (the tiny Qwen3, no pooling config, no --pooling) answers a
// 400 saying why; the pooling config of a sentence-transformers directory is read (mode,
// normalize), refused by name when unsupported, and a flag may repeat it but not change it.
// Served embeddings are checked against the reference model's own final-norm states, taken
// through the forward's debug hook (a route separate from the server's), pooled here; the
// pooling arithmetic itself against hand-computed numbers. ctest -R Embeddings
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "server_fixture.h"
#include "tachyon/base/check.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/server/embeddings_pooling.h"
#include "tachyon/server/embeddings_request.h"
#include "tachyon/server/pooling_config.h"

namespace tachyon::server::testing {
namespace {

using nlohmann::json;

// A directory's sentence-transformers files: modules.json (Transformer, Pooling, maybe
// Normalize) and 1_Pooling/config.json with `mode_key` true.
void write_sentence_transformers(const std::filesystem::path& dir, const std::string& mode_key, bool normalize) {
  std::filesystem::create_directories(dir / "1_Pooling");
  std::ofstream(dir / "modules.json")
      << R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
            {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"})"
      << (normalize ? R"(,{"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"})" : "")
      << "]";
  std::ofstream(dir / "1_Pooling" / "config.json") << json{{mode_key, true}}.dump();
}

// The reference: every token's state after the final norm as the forward's debug hook reports it
// (all rows through the LM head path), one sequence with a cache of its own.
std::vector<float> reference_states(const std::filesystem::path& dir, const std::vector<int32_t>& ids) {
  const model::DenseModel model = model::DenseModel::load(dir);
  model::SequenceKvCache cache(model.config(), static_cast<int64_t>(ids.size()));
  std::vector<float> states;
  model.forward(ids, cache, /*all_logits=*/true, [&states](std::string_view name, int64_t, std::span<const float> v) {
    if (name == "final_norm") states.assign(v.begin(), v.end());
  });
  return states;
}

std::vector<float> floats_of(const json& embedding) { return embedding.get<std::vector<float>>(); }

// RFC 4648 decoding, written apart from the server's encoder.
std::vector<float> decode_base64_floats(const std::string& text) {
  std::string bytes;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    if (c == '=') break;
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    bits = (bits << 6) | static_cast<uint32_t>(std::strchr(alphabet, c) - alphabet);
    count += 6;
    if (count >= 8) {
      count -= 8;
      bytes.push_back(static_cast<char>((bits >> count) & 0xFF));
    }
  }
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

double norm_of(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

json post(ServerUnderTest& server, const json& body, int expected_status) {
  auto r = server.client().Post("/v1/embeddings", body.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return json();
  EXPECT_EQ(r->status, expected_status) << r->body;
  return json::parse(r->body);
}

TEST(ServerEmbeddings, GenerativeModelIsRefusedWithTheReason) {
  ServerUnderTest server;
  auto r = server.client().Post("/v1/embeddings", R"({"model":"tiny","input":"hello"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  const json error = json::parse(r->body)["error"];
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_EQ(error["param"], "model");
  EXPECT_NE(error["message"].get<std::string>().find("no sentence-transformers pooling config"), std::string::npos) << r->body;
  auto no_input = server.client().Post("/v1/embeddings", R"({"model":"tiny"})", "application/json");
  EXPECT_EQ(json::parse(no_input->body)["error"]["param"], "input") << no_input->body;
  auto other = server.client().Post("/v1/embeddings", R"({"model":"other","input":"x"})", "application/json");
  EXPECT_EQ(other->status, 404) << other->body;
}

TEST(ServerEmbeddings, PoolingConfigIsReadFromModulesJson) {
  const auto dir = std::filesystem::temp_directory_path() / ("tachyon-pooling-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "1_Pooling");
  EXPECT_FALSE(read_pooling_config(dir).has_value());
  write_sentence_transformers(dir, "pooling_mode_lasttoken", true);
  const auto config = read_pooling_config(dir);
  ASSERT_TRUE(config.has_value());
  EXPECT_EQ(config->mode, PoolingConfig::Mode::kLast);
  EXPECT_TRUE(config->normalize);
  // A flag may repeat the directory's pooling, never change it.
  EXPECT_EQ(resolve_pooling_config(dir, "last", true)->mode, PoolingConfig::Mode::kLast);
  EXPECT_THROW(resolve_pooling_config(dir, "mean", true), Error);
  EXPECT_THROW(resolve_pooling_config(dir, "last", false), Error);
  std::ofstream(dir / "1_Pooling" / "config.json") << R"({"pooling_mode_max_tokens":true})";
  EXPECT_THROW(read_pooling_config(dir), Error);
  std::filesystem::remove_all(dir);
  // Without a directory config the flags decide; normalizing needs a pooling to normalize.
  std::filesystem::create_directories(dir);
  EXPECT_FALSE(resolve_pooling_config(dir, "", false).has_value());
  EXPECT_EQ(resolve_pooling_config(dir, "cls", false)->mode, PoolingConfig::Mode::kCls);
  EXPECT_TRUE(resolve_pooling_config(dir, "mean", true)->normalize);
  EXPECT_THROW(resolve_pooling_config(dir, "", true), Error);
  EXPECT_THROW(resolve_pooling_config(dir, "max", false), Error);
  std::filesystem::remove_all(dir);
}

// Three tokens of two values: every pooling's answer is worked out by hand.
TEST(ServerEmbeddings, PoolingArithmeticByHand) {
  const std::vector<float> hidden = {1, 2, 3, 4, 5, 9};  // [3 tokens, 2]
  EXPECT_EQ(pool_hidden_states({.mode = PoolingConfig::Mode::kCls}, hidden, 3, 2), (std::vector<float>{1, 2}));
  EXPECT_EQ(pool_hidden_states({.mode = PoolingConfig::Mode::kLast}, hidden, 3, 2), (std::vector<float>{5, 9}));
  EXPECT_EQ(pool_hidden_states({.mode = PoolingConfig::Mode::kMean}, hidden, 3, 2), (std::vector<float>{3, 5}));
  // mean (3, 5), normalized: (3, 5) / sqrt(34)
  const std::vector<float> unit = pool_hidden_states({.mode = PoolingConfig::Mode::kMean, .normalize = true}, hidden, 3, 2);
  EXPECT_FLOAT_EQ(unit[0], 3.0f / std::sqrt(34.0f));
  EXPECT_FLOAT_EQ(unit[1], 5.0f / std::sqrt(34.0f));
  // Shortened to 1 of (0.6, 0.8): the first value, made unit length again.
  std::vector<float> v = {0.6f, 0.8f};
  shorten_embedding(v, 1);
  EXPECT_EQ(v, (std::vector<float>{1.0f}));
  std::vector<float> w = {-3, 4, 12};  // |(-3, 4)| = 5
  shorten_embedding(w, 2);
  EXPECT_EQ(w, (std::vector<float>{-0.6f, 0.8f}));
  // Little-endian f32 bytes: 1.0f = 00 00 80 3F, -2.0f = 00 00 00 C0.
  EXPECT_EQ(base64_floats({1.0f}), "AACAPw==");
  EXPECT_EQ(base64_floats({1.0f, -2.0f}), "AACAPwAAAMA=");
  EXPECT_EQ(base64_floats({0.5f, 3.0f, -0.25f}), "AAAAPwAAQEAAAIC+");
}

// A decoder model served with --pooling last --normalize-embeddings (Qwen3-Embedding's recipe).
TEST(ServerEmbeddings, LastTokenPoolingEqualsTheReferenceModelsStates) {
  ServerUnderTest server(ServerUnderTest::default_engine(), {}, 0, [](ServingOptions& options) {
    options.pooling = "last";
    options.normalize_embeddings = true;
  });
  const auto before = server.context->engine().stats();
  const std::vector<std::string> texts = {"The quick brown fox", "jumps"};
  const json answer = post(server, {{"model", "tiny"}, {"input", texts}}, 200);
  ASSERT_EQ(answer["object"], "list");
  ASSERT_EQ(answer["data"].size(), 2u);
  int64_t tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<int32_t> ids = server.context->tokenizer().encode(texts[i]);
    tokens += static_cast<int64_t>(ids.size());
    const std::vector<float> states = reference_states(server.dir, ids);
    const int64_t h = server.context->hidden_size();
    std::vector<float> expected(states.end() - h, states.end());  // the last token's
    double norm = norm_of(expected);
    for (float& x : expected) x = static_cast<float>(x / norm);
    EXPECT_EQ(answer["data"][i]["object"], "embedding");
    EXPECT_EQ(answer["data"][i]["index"], i);
    const std::vector<float> got = floats_of(answer["data"][i]["embedding"]);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t d = 0; d < got.size(); ++d) EXPECT_NEAR(got[d], expected[d], 1e-5) << "input " << i << " value " << d;
    EXPECT_NEAR(norm_of(got), 1.0, 1e-5);
  }
  EXPECT_EQ(answer["usage"]["prompt_tokens"], tokens);
  EXPECT_EQ(answer["usage"]["total_tokens"], tokens);
  EXPECT_EQ(answer["model"], "tiny");

  // The same input as token ids, and as base64: the same vector.
  const std::vector<int32_t> ids = server.context->tokenizer().encode(texts[1]);
  const json by_ids = post(server, {{"model", "tiny"}, {"input", ids}, {"encoding_format", "base64"}}, 200);
  EXPECT_EQ(decode_base64_floats(by_ids["data"][0]["embedding"]), floats_of(answer["data"][1]["embedding"]));
  const json nested = post(server, {{"model", "tiny"}, {"input", {ids, ids}}}, 200);
  EXPECT_EQ(nested["data"].size(), 2u);
  EXPECT_EQ(nested["data"][1]["embedding"], answer["data"][1]["embedding"]);

  // dimensions: the first 8 values, unit length again.
  const json short8 = post(server, {{"model", "tiny"}, {"input", texts[0]}, {"dimensions", 8}}, 200);
  std::vector<float> first8 = floats_of(answer["data"][0]["embedding"]);
  first8.resize(8);
  const double n8 = norm_of(first8);
  const std::vector<float> got8 = floats_of(short8["data"][0]["embedding"]);
  ASSERT_EQ(got8.size(), 8u);
  for (size_t d = 0; d < 8; ++d) EXPECT_NEAR(got8[d], first8[d] / n8, 1e-6);

  // Never the decode path: no engine step ran, no KV block is held.
  const auto after = server.context->engine().stats();
  EXPECT_EQ(after.steps, before.steps);
  EXPECT_EQ(after.kv_blocks_free, after.kv_blocks_total);
  EXPECT_EQ(after.requests_finished, before.requests_finished);
}

TEST(ServerEmbeddings, BadInputsAre400sNamingTheField) {
  ServerUnderTest server(ServerUnderTest::default_engine(), {}, 0, [](ServingOptions& options) {
    options.pooling = "last";
    options.normalize_embeddings = true;
  });
  auto param_of = [&](const json& body) { return post(server, body, 400)["error"]["param"]; };
  EXPECT_EQ(param_of({{"model", "tiny"}, {"input", ""}}), "input");
  EXPECT_EQ(param_of({{"model", "tiny"}, {"input", json::array()}}), "input");
  EXPECT_EQ(param_of({{"model", "tiny"}, {"input", {"ok", 3}}}), "input[1]");
  EXPECT_EQ(param_of({{"model", "tiny"}, {"input", {1, -2}}}), "input[1]");
  EXPECT_EQ(param_of({{"model", "tiny"}, {"input", {1, server.context->limits().vocab_size}}}), "input[1]");
  EXPECT_EQ(param_of({{"model", "tiny"}, {"input", "x"}, {"encoding_format", "int8"}}), "encoding_format");
  EXPECT_EQ(param_of({{"model", "tiny"}, {"input", "x"}, {"dimensions", 0}}), "dimensions");
  EXPECT_EQ(param_of({{"model", "tiny"}, {"input", "x"}, {"dimensions", server.context->hidden_size() + 1}}), "dimensions");
  // Longer than the context: the limit is named.
  const json too_long = post(server, {{"model", "tiny"}, {"input", std::vector<int32_t>(513, 7)}}, 400);
  EXPECT_EQ(too_long["error"]["param"], "input");
  EXPECT_NE(too_long["error"]["message"].get<std::string>().find("context of 512 tokens"), std::string::npos) << too_long;
  const json fits = post(server, {{"model", "tiny"}, {"input", std::vector<int32_t>(512, 7)}}, 200);
  EXPECT_EQ(fits["usage"]["prompt_tokens"], 512);
  EXPECT_TRUE(server.wait_idle());
}

// A sentence-transformers directory with mean pooling and no Normalize module.
TEST(ServerEmbeddings, MeanPoolingFromModulesJsonEqualsTheReference) {
  ServerUnderTest server(ServerUnderTest::default_engine(), {}, 0, [](ServingOptions& options) {
    write_sentence_transformers(options.model_dir, "pooling_mode_mean_tokens", false);
  });
  const std::vector<int32_t> ids = server.context->tokenizer().encode("a mean of every token");
  const json answer = post(server, {{"model", "tiny"}, {"input", "a mean of every token"}}, 200);
  const std::vector<float> states = reference_states(server.dir, ids);
  const int64_t h = server.context->hidden_size();
  const std::vector<float> got = floats_of(answer["data"][0]["embedding"]);
  ASSERT_EQ(static_cast<int64_t>(got.size()), h);
  for (int64_t d = 0; d < h; ++d) {
    double sum = 0;
    for (size_t t = 0; t < ids.size(); ++t) sum += states[t * h + d];
    EXPECT_NEAR(got[d], sum / static_cast<double>(ids.size()), 1e-5) << "value " << d;
  }
  // Its vectors are not unit length, so shortening them would make something it was never trained to give.
  const json refused = post(server, {{"model", "tiny"}, {"input", "x"}, {"dimensions", 4}}, 400);
  EXPECT_EQ(refused["error"]["param"], "dimensions");
  EXPECT_EQ(post(server, {{"model", "tiny"}, {"input", "x"}, {"dimensions", h}}, 200)["data"][0]["embedding"].size(), h);
}

}  // namespace
}  // namespace tachyon::server::testing
