// RoutePrompt: the prompt tokens of a generation request as the servers will compute them (the
// same tokenizer.json and chat template), so that the router's prefix policy (http/pd_backends.h)
// can hash the prompt's blocks as a prefill server's prefix cache does. A routing hint only: a
// request it cannot tokenize (or tokenizes differently, e.g. content parts the servers flatten)
// routes by load, and the answer is the same either way.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "tachyon/tokenizer/chat_template.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::server {

class RoutePrompt {
 public:
  explicit RoutePrompt(const std::filesystem::path& model_dir);  // throws Error without tokenizer.json
  // `chat`: a /v1/chat/completions body, else /v1/completions. Empty when unknown.
  std::vector<int32_t> tokens(bool chat, const nlohmann::json& body) const;

 private:
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizer::ChatTemplate> chat_template_;
};

}  // namespace tachyon::server
