#include "tachyon/server/chat_constraint.h"

#include "tachyon/server/openai_request_fields.h"
#include "tachyon/server/reasoning_parser.h"
#include "tachyon/structured/tool_call_grammar.h"

namespace tachyon::server {
namespace {

using Json = nlohmann::ordered_json;

structured::ConstraintSpec forced_tool_calls(const ChatRequest& request, const std::string& format) {
  if (format.empty() || !structured::has_tool_call_grammar(format)) {
    fields::fail("tool_choice", "this model's chat template shows no tool-call format, so a call cannot be forced; "
                                "start the server with --tool-call-parser naming the model's format.");
  }
  Json tools = Json::array();
  for (size_t i = 0; i < request.tools.size(); ++i) {
    const Json& function = request.tools[i]["function"];
    const std::string name = function["name"].get<std::string>();
    if (request.tool_choice == ToolChoice::kFunction && name != request.tool_choice_function) continue;
    Json tool = {{"name", name}, {"index", i}};
    if (const Json* parameters = fields::find(function, "parameters")) tool["parameters"] = *parameters;
    tools.push_back(std::move(tool));
  }
  const bool parallel = request.tool_choice == ToolChoice::kRequired && request.parallel_tool_calls;
  const Json text = {{"format", format}, {"tools", std::move(tools)}, {"parallel", parallel}};
  return {structured::ConstraintSpec::Kind::kToolCalls, text.dump(), {}, "tool_choice"};
}

}  // namespace

std::optional<structured::ConstraintSpec> chat_constraint(const ChatRequest& request, const ChatParsers& parsers,
                                                          std::string_view rendered) {
  std::optional<structured::ConstraintSpec> spec = request.constraint;
  if (request.tool_choice == ToolChoice::kRequired || request.tool_choice == ToolChoice::kFunction) {
    spec = forced_tool_calls(request, parsers.tool);
  }
  if (spec && !parsers.reasoning.empty()) {
    const std::vector<std::string> markers = reasoning_parser_markers(parsers.reasoning);
    // A prompt that ends with a closed reasoning block (Qwen3's and GLM's enable_thinking false)
    // leaves the model nothing to reason: the constraint holds from the first token.
    size_t end = rendered.size();
    while (end > 0 && is_json_whitespace(rendered[end - 1])) --end;
    if (!rendered.substr(0, end).ends_with(markers.at(1))) {
      spec->after_reasoning = structured::ReasoningPrefix{markers.at(0), markers.at(1),
                                                          prompt_opens_reasoning(parsers.reasoning, rendered)};
    }
  }
  return spec;
}

void apply_chat_constraint(const ChatRequest& request, const ChatParsers& parsers, std::string_view rendered,
                           const ServerLimits& limits, core::SamplingParams& params) {
  if (std::optional<structured::ConstraintSpec> spec = chat_constraint(request, parsers, rendered)) {
    params.structured = fields::compile_constraint(*spec, limits);
    fields::validate_params(params, limits);
  }
}

}  // namespace tachyon::server
