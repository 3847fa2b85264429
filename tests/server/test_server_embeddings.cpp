// /v1/embeddings: a generative model (the tiny Qwen3, no pooling config) answers a 400 saying
// why; the pooling config of a sentence-transformers directory is read (mode, normalize) and
// refused by name when unsupported. ctest -R Embeddings
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "server_fixture.h"
#include "tachyon/base/check.h"
#include "tachyon/server/pooling_config.h"

namespace tachyon::server::testing {
namespace {

using nlohmann::json;

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
  std::ofstream(dir / "modules.json") << R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
      {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
      {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}])";
  std::ofstream(dir / "1_Pooling" / "config.json") << R"({"word_embedding_dimension":64,"pooling_mode_cls_token":false,
      "pooling_mode_mean_tokens":false,"pooling_mode_lasttoken":true})";
  const auto config = read_pooling_config(dir);
  ASSERT_TRUE(config.has_value());
  EXPECT_EQ(config->mode, PoolingConfig::Mode::kLast);
  EXPECT_TRUE(config->normalize);
  std::ofstream(dir / "1_Pooling" / "config.json") << R"({"pooling_mode_max_tokens":true})";
  EXPECT_THROW(read_pooling_config(dir), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tachyon::server::testing
