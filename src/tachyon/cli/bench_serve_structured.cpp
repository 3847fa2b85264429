#include "tachyon/cli/bench_serve_structured.h"

#include <fstream>

#include "tachyon/base/check.h"

namespace tachyon::cli {
namespace {

nlohmann::ordered_json read_json_file(const std::string& path, const char* option) {
  std::ifstream in(path);
  TACHYON_CHECK(in.good()) << option << ": cannot read " << path;
  try {
    return nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TACHYON_FAIL() << option << ": " << path << " is not valid JSON: " << e.what();
  }
  return {};
}

}  // namespace

nlohmann::ordered_json structured_request_fields(const StructuredBenchOptions& o, bool chat_endpoint, bool ignore_eos) {
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
  const std::string& format = o.response_format;
  TACHYON_CHECK(format.empty() || format == "json_object" || format == "json_schema")
      << "--response-format is json_object or json_schema, got '" << format << "'";
  TACHYON_CHECK((format == "json_schema") == !o.json_schema_file.empty())
      << "--response-format json_schema and --json-schema FILE go together";
  if (format == "json_object") fields["response_format"] = {{"type", "json_object"}};
  if (format == "json_schema") {
    const nlohmann::ordered_json schema = read_json_file(o.json_schema_file, "--json-schema");
    TACHYON_CHECK(schema.is_object()) << "--json-schema: " << o.json_schema_file << " must hold a JSON object (a schema)";
    fields["response_format"] = {{"type", "json_schema"},
                                 {"json_schema", {{"name", "bench"}, {"schema", schema}, {"strict", true}}}};
  }
  TACHYON_CHECK(o.tool_choice.empty() || !o.tools_file.empty()) << "--tool-choice needs --tools FILE";
  bool forced = false;
  if (!o.tools_file.empty()) {
    TACHYON_CHECK(chat_endpoint) << "--tools: tool calls are a chat feature; use --endpoint /v1/chat/completions";
    const nlohmann::ordered_json tools = read_json_file(o.tools_file, "--tools");
    TACHYON_CHECK(tools.is_array() && !tools.empty())
        << "--tools: " << o.tools_file << " must hold a non-empty array of {\"type\": \"function\", \"function\": {...}}";
    fields["tools"] = tools;
    const std::string& choice = o.tool_choice;
    if (choice == "auto" || choice == "none" || choice == "required") {
      fields["tool_choice"] = choice;
    } else if (!choice.empty()) {
      bool known = false;
      for (const nlohmann::ordered_json& tool : tools) known = known || tool.value("function", nlohmann::ordered_json::object()).value("name", "") == choice;
      TACHYON_CHECK(known) << "--tool-choice '" << choice << "' is neither auto, none, required nor a function in " << o.tools_file;
      fields["tool_choice"] = {{"type", "function"}, {"function", {{"name", choice}}}};
    }
    forced = choice == "required" || fields["tool_choice"].is_object();
  }
  const bool constrained = !format.empty() || forced;
  TACHYON_CHECK(!(forced && !format.empty()))
      << "--tool-choice " << o.tool_choice << " forces a call by a grammar of its own: it cannot go with --response-format";
  TACHYON_CHECK(!(constrained && ignore_eos))
      << "--ignore-eos cannot go with --response-format or a forced --tool-choice: the grammar decides where an "
         "output ends (give a schema whose outputs run long, e.g. a free string, for full-length outputs)";
  return fields;
}

}  // namespace tachyon::cli
