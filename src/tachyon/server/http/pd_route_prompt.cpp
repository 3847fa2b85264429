#include "tachyon/server/http/pd_route_prompt.h"

#include <nlohmann/json.hpp>

#include "tachyon/base/check.h"
#include "tachyon/server/anthropic_messages.h"
#include "tachyon/server/chat_prompt.h"
#include "tachyon/server/responses_api.h"

namespace tachyon::server {

RoutePrompt::RoutePrompt(const std::filesystem::path& model_dir) {
  TACHYON_CHECK(std::filesystem::exists(model_dir / "tokenizer.json"))
      << "--tokenizer " << model_dir.string() << " has no tokenizer.json (the prefix policy tokenizes prompts)";
  tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_dir(model_dir));
  chat_template_ = model_chat_template(*tokenizer_, model_dir);
}

std::vector<int32_t> RoutePrompt::tokens(std::string_view path, std::string_view body) const {
  // Parsed with the servers' checks but no model name or length of theirs (ServerLimits{}): the
  // servers answer whatever those refuse.
  const ServerLimits limits;
  try {
    if (path == "/v1/completions") {
      const auto json = nlohmann::json::parse(body, nullptr, false);
      const auto prompt = json.is_object() ? json.find("prompt") : json.end();
      if (prompt == json.end()) return {};
      if (prompt->is_string()) return tokenizer_->encode(prompt->get<std::string>(), /*add_special_tokens=*/true);
      if (prompt->is_array() && !prompt->empty() && prompt->front().is_number_integer()) {
        return prompt->get<std::vector<int32_t>>();
      }
      return {};
    }
    if (chat_template_ == nullptr) return {};
    const ChatRequest request = path == "/v1/messages"    ? parse_anthropic_request(body, limits)
                                : path == "/v1/responses" ? parse_responses_request(body, limits).chat
                                                          : parse_chat_request(body, limits);
    return render_chat_prompt(*chat_template_, *tokenizer_, request).tokens;
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace tachyon::server
