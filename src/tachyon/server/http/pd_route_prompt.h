// RoutePrompt: the prompt tokens of a generation request as the servers will compute them (the
// same tokenizer.json and chat template, and for chat and Anthropic bodies the same parsing and
// rendering: server/chat_prompt.h), so that the router's prefix policy (http/pd_backends.h) can
// hash the prompt's blocks as a prefill server's prefix cache does. A routing hint only: a request
// it cannot tokenize (one the servers will refuse) routes by load, and the answer is the same
// either way.
#pragma once

#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include "tachyon/tokenizer/chat_template.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::server {

class RoutePrompt {
 public:
  explicit RoutePrompt(const std::filesystem::path& model_dir);  // throws Error without tokenizer.json
  // `path`: /v1/completions, /v1/chat/completions or /v1/messages; `body` as the client sent it.
  // Empty when unknown.
  std::vector<int32_t> tokens(std::string_view path, std::string_view body) const;

 private:
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizer::ChatTemplate> chat_template_;
};

}  // namespace tachyon::server
