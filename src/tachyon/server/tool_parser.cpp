// The parts every tool-call format shares: content whitespace around calls, committing a call,
// streaming its arguments as they grow, and the table of formats.
#include "tachyon/server/tool_parser.h"

#include "tachyon/server/json_scan.h"
#include "tachyon/tokenizer/deepseek_v32_prompt.h"

namespace tachyon::server {

void ToolParser::push(std::string_view text, std::vector<ChatPiece>& out) {
  out_ = &out;
  buffer_ += text;
  parse(/*at_end=*/false);
  out_ = nullptr;
}

void ToolParser::finish(std::vector<ChatPiece>& out) {
  out_ = &out;
  parse(/*at_end=*/true);
  if (in_call_) end_call();
  if (!buffer_.empty()) emit_content(buffer_);
  buffer_.clear();
  if (!held_whitespace_.empty() && !after_call_) {
    out.push_back({.kind = ChatPiece::Kind::kContent, .text = std::move(held_whitespace_)});
  }
  held_whitespace_.clear();
  out_ = nullptr;
}

bool ToolParser::consume_to_marker(std::string_view marker, bool at_end) {
  const size_t at = buffer_.find(marker);
  if (at == std::string::npos) {
    const size_t keep = at_end ? 0 : partial_marker_suffix(buffer_, marker);
    emit_content(std::string_view(buffer_).substr(0, buffer_.size() - keep));
    buffer_.erase(0, buffer_.size() - keep);
    return false;
  }
  emit_content(std::string_view(buffer_).substr(0, at));
  buffer_.erase(0, at + marker.size());
  return true;
}

ToolParser::BlockBody ToolParser::block_body(std::string_view end_marker, bool at_end) const {
  BlockBody body{buffer_, buffer_.find(end_marker)};
  if (body.closed()) {
    body.text = body.text.substr(0, body.end);
  } else if (!at_end) {
    body.text.remove_suffix(partial_marker_suffix(body.text, end_marker));
  }
  return body;
}

void ToolParser::emit_content(std::string_view text) {
  if (after_call_) {
    text.remove_prefix(std::min(skip_whitespace(text, 0), text.size()));
    if (text.empty()) return;
    after_call_ = false;
  }
  if (text.empty()) return;
  std::string joined = std::move(held_whitespace_);
  joined += text;
  size_t end = joined.size();
  while (end > 0 && is_json_whitespace(joined[end - 1])) --end;
  held_whitespace_ = joined.substr(end);
  if (end > 0) out_->push_back({.kind = ChatPiece::Kind::kContent, .text = joined.substr(0, end)});
}

void ToolParser::start_call(std::string name) {
  held_whitespace_.clear();
  after_call_ = false;
  in_call_ = true;
  arguments_sent_.clear();
  out_->push_back({.kind = ChatPiece::Kind::kToolCallStart, .text = std::move(name), .tool_index = num_calls_});
}

void ToolParser::update_arguments(std::string_view arguments_so_far) {
  if (arguments_so_far.size() <= arguments_sent_.size()) return;
  if (arguments_so_far.substr(0, arguments_sent_.size()) != arguments_sent_) return;  // never retract
  out_->push_back({.kind = ChatPiece::Kind::kToolCallArguments,
                   .text = std::string(arguments_so_far.substr(arguments_sent_.size())),
                   .tool_index = num_calls_});
  arguments_sent_ = arguments_so_far;
}

void ToolParser::end_call(std::optional<std::string_view> arguments) {
  if (arguments) update_arguments(*arguments);
  if (arguments_sent_.empty()) update_arguments("{}");
  in_call_ = false;
  after_call_ = true;
  ++num_calls_;
}

std::optional<std::string> ToolParser::object_arguments(std::string_view text, const CallObjectScan& scan) {
  if (scan.arguments_begin == std::string_view::npos) return std::nullopt;
  const bool complete = scan.arguments_end != std::string_view::npos;
  if (text[scan.arguments_begin] == '"') {  // arguments sent as a JSON-encoded string
    if (!complete) return std::nullopt;
    return decode_json_string(text.substr(scan.arguments_begin, scan.arguments_end - scan.arguments_begin));
  }
  // Broken arguments end where the scan found them broken: what came before it was streamed as
  // it arrived, whatever the pieces, and nothing after it ever is.
  const size_t end = complete                                ? scan.arguments_end
                     : scan.status == ScanStatus::kInvalid ? std::min(scan.end, text.size())
                                                             : text.size();
  return std::string(text.substr(scan.arguments_begin, std::max(end, scan.arguments_begin) - scan.arguments_begin));
}

void ToolParser::parse_blocks(std::string_view open, std::string_view close, bool at_end, const BlockFollower& follow) {
  while (true) {
    if (!in_marked_block_) {
      if (!consume_to_marker(open, at_end)) return;
      in_marked_block_ = true;
    }
    const BlockBody body = block_body(close, at_end);
    const bool closed = body.closed();
    const bool complete = closed || at_end;
    std::optional<std::string> arguments = follow(body.text, complete);
    if (!complete) return;
    const size_t consumed = closed ? body.end + close.size() : buffer_.size();
    if (in_call()) {
      end_call(arguments);
    } else {
      emit_content(std::string(open) + buffer_.substr(0, consumed));
    }
    buffer_.erase(0, consumed);
    in_marked_block_ = false;
    if (!closed) return;
  }
}

std::string ToolParser::json_string(std::string_view text) {
  return nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ToolParser::parameter_type(const nlohmann::ordered_json& tools, std::string_view function,
                                       std::string_view key) {
  if (!tools.is_array()) return "";
  for (const auto& tool : tools) {
    const auto f = tool.find("function");
    if (f == tool.end() || !f->is_object() || f->value("name", "") != function) continue;
    const auto parameters = f->find("parameters");
    if (parameters == f->end() || !parameters->is_object()) return "";
    const auto properties = parameters->find("properties");
    if (properties == parameters->end() || !properties->is_object()) return "";
    const auto property = properties->find(std::string(key));
    if (property == properties->end() || !property->is_object()) return "";
    const auto type = property->find("type");
    if (type == property->end()) return "";
    if (type->is_string()) return type->get<std::string>();
    if (!type->is_array()) return "";
    std::string only;  // ["string", "null"]: a string unless it reads as null
    for (const auto& t : *type) {
      const std::string name = t.is_string() ? t.get<std::string>() : "";
      if (name == "null") continue;
      if (!only.empty() || name.empty()) return "";
      only = name;
    }
    return only;
  }
  return "";
}

void ToolParser::follow_call_object(std::string_view text, const CallObjectScan& scan) {
  if (!in_call_ && scan.name) start_call(*scan.name);
  if (!in_call_) return;
  if (std::optional<std::string> arguments = object_arguments(text, scan)) update_arguments(*arguments);
}

namespace {

struct Format {
  const char* name;
  const char* canonical;
};
constexpr Format kFormats[] = {{"hermes", "hermes"},   {"llama3_json", "llama3_json"}, {"deepseek_v3", "deepseek_v3"},
                               {"deepseek_v31", "deepseek_v3"}, {"glm45", "glm45"},     {"glm47", "glm45"},
                               {"mistral", "mistral"},  {"qwen3_coder", "qwen3_coder"}, {"qwen3_xml", "qwen3_coder"},
                               {"deepseek_v32", "deepseek_v32"}};

}  // namespace

std::vector<std::string> tool_parser_names() {
  std::vector<std::string> names;
  for (const Format& f : kFormats) names.emplace_back(f.name);
  return names;
}

std::string canonical_tool_parser(std::string_view name) {
  for (const Format& f : kFormats) {
    if (name == f.name) return f.canonical;
  }
  return "";
}

bool is_tool_parser_name(std::string_view name) { return !canonical_tool_parser(name).empty(); }

std::string tool_parser_for_template(std::string_view t) {
  if (t == tokenizer::kDeepseekV32NativeTemplate) return "deepseek_v32";
  auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  if (has("<arg_key>")) return "glm45";
  // Qwen3-Coder's and Qwen3.5's templates also say <tool_call>, around XML-like tags.
  if (has("<function=") && has("<parameter=")) return "qwen3_coder";
  if (has("<tool_call>")) return "hermes";
  if (has("<｜tool▁call▁begin｜>")) return "deepseek_v3";
  if (has("[TOOL_CALLS]")) return "mistral";
  if (has("<|python_tag|>") || (has("{\"name\": ") && has("\"parameters\""))) return "llama3_json";
  return "";
}

std::vector<std::string> tool_parser_markers(std::string_view name) {
  const std::string canonical = canonical_tool_parser(name);
  if (canonical == "hermes" || canonical == "qwen3_coder") return {"<tool_call>", "</tool_call>"};
  if (canonical == "glm45") return {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};
  if (canonical == "deepseek_v3") {
    return {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"};
  }
  if (canonical == "mistral") return {"[TOOL_CALLS]", "[ARGS]"};
  if (canonical == "deepseek_v32") return {tokenizer::kDsmlToken};
  return {};  // llama3_json reads its JSON with or without <|python_tag|>
}

std::unique_ptr<ToolParser> make_tool_parser(std::string_view name, const nlohmann::ordered_json& tools) {
  const std::string canonical = canonical_tool_parser(name);
  if (canonical == "hermes") return make_hermes_tool_parser();
  if (canonical == "llama3_json") return make_llama3_json_tool_parser();
  if (canonical == "deepseek_v3") return make_deepseek_v3_tool_parser();
  if (canonical == "glm45") return make_glm45_tool_parser(tools);
  if (canonical == "mistral") return make_mistral_tool_parser();
  if (canonical == "qwen3_coder") return make_qwen3_coder_tool_parser(tools);
  if (canonical == "deepseek_v32") return make_deepseek_v32_tool_parser();
  return nullptr;
}

}  // namespace tachyon::server
