#include "tachyon/structured/tool_call_grammar.h"

#include <functional>
#include <optional>
#include <set>

#include "tachyon/structured/json_schema.h"
#include "tachyon/structured/utf8_ranges.h"

namespace tachyon::structured {
namespace {

using Json = nlohmann::ordered_json;

// What surrounds the calls of one answer: a marker and text before the first call, text
// between calls, text and a marker after the last.
struct Block {
  const char* name;
  const char* begin_marker;
  const char* begin;
  const char* separator;
  const char* end;
  const char* end_marker;
};
constexpr Block kBlocks[] = {
    {"hermes", "", "", "\n", "", ""},
    {"llama3_json", "", "", "; ", "", ""},
    {"mistral", "[TOOL_CALLS]", "[", ", ", "]", ""},
    {"deepseek_v3", "<｜tool▁calls▁begin｜>", "", "\n", "", "<｜tool▁calls▁end｜>"},
    {"glm45", "", "", "\n", "", ""},
    {"qwen3_coder", "", "", "\n", "", ""},
    {"deepseek_v32", "<｜DSML｜function_calls>", "\n", "", "", "</｜DSML｜function_calls>"},  // a call ends its line
};

// The longest raw string parameter a bound may name (the grammar holds a rule per character).
constexpr int64_t kMaxRawLength = 4096;

const Block* find_block(const std::string& format) {
  for (const Block& b : kBlocks) {
    if (format == b.name) return &b;
  }
  return nullptr;
}

class ToolCallBuilder {
 public:
  ToolCallBuilder(Grammar& g, std::string format, const TokenVocabulary* vocabulary)
      : g_(g), json_(g), format_(std::move(format)), vocabulary_(vocabulary) {}

  // A tag: the token that spells it whole, where the vocabulary has one; else its text.
  Sequence marker(const std::string& text) {
    if (vocabulary_ != nullptr) {
      if (const std::optional<int32_t> id = vocabulary_->marker_token(text)) return g_.literal(TokenVocabulary::marker_bytes(*id));
    }
    return g_.literal(text);
  }

  // One call of `tool` ({"name", "parameters", "index"}).
  Sequence call(const Json& tool) {
    const std::string name = tool.at("name").get<std::string>();
    const std::string what = "tools[" + std::to_string(tool.value("index", 0)) + "].function.parameters";
    const Json parameters = tool.contains("parameters") && !tool["parameters"].is_null() ? tool["parameters"] : Json::object();
    if (format_ == "glm45") return concat({marker("<tool_call>"), g_.literal(name), glm_arguments(parameters, what), newline(), marker("</tool_call>")});
    if (format_ == "deepseek_v32") {
      return concat({marker("<｜DSML｜invoke"), g_.literal(" name=\"" + name + "\">\n"),
                     dsml_parameters(parameters, what), marker("</｜DSML｜invoke>"), g_.literal("\n")});
    }
    if (format_ == "qwen3_coder") {
      return concat({marker("<tool_call>"), g_.literal("\n<function=" + name + ">\n"), qwen_parameters(parameters, what),
                     g_.literal("</function>\n"), marker("</tool_call>")});
    }
    const Sequence arguments = parameters.empty() ? json_.any_object() : json_.value(parameters, what);
    const std::string quoted = Json(name).dump();
    if (format_ == "hermes") {
      return concat({marker("<tool_call>"), g_.literal("\n{\"name\": " + quoted + ", \"arguments\": "), arguments, g_.literal("}\n"),
                     marker("</tool_call>")});
    }
    if (format_ == "llama3_json") return concat({g_.literal("{\"name\": " + quoted + ", \"parameters\": "), arguments, g_.literal("}")});
    if (format_ == "mistral") return concat({g_.literal("{\"name\": " + quoted + ", \"arguments\": "), arguments, g_.literal("}")});
    // deepseek_v3
    return concat({marker("<｜tool▁call▁begin｜>"), g_.literal("function"), marker("<｜tool▁sep｜>"), g_.literal(name + "\n```json\n"),
                   arguments, g_.literal("\n```"), marker("<｜tool▁call▁end｜>")});
  }

 private:
  Sequence newline() { return g_.optional(g_.literal("\n"), "glm_newline"); }

  // Raw text up to the next tag: any character but '<'.
  Sequence raw_text(bool non_empty) {
    const Sequence c = utf8_class(g_, {{0, '<' - 1}, {'<' + 1, kMaxCodepoint}}, "glm_char");
    return non_empty ? concat({c, g_.star(c, "glm_text")}) : g_.star(c, "glm_text");
  }

  Sequence pair(const Sequence& key, const Sequence& value) {
    return concat({newline(), marker("<arg_key>"), key, marker("</arg_key>"), newline(), marker("<arg_value>"), value,
                   marker("</arg_value>")});
  }

  // A string parameter is written raw: its schema may say no more than its type (or an enum).
  static bool is_string_schema(const Json& s) {
    if (!s.is_object()) return false;
    const auto type = s.find("type");
    if (type != s.end() && *type == "string") return true;
    const auto e = s.find("enum");
    if (e == s.end() || !e->is_array() || e->empty()) return false;
    for (const Json& v : *e) {
      if (!v.is_string()) return false;
    }
    return true;
  }

  // Raw text of a string parameter, `min` to `max` characters long (max < 0: any length).
  using RawText = std::function<Sequence(int64_t min, int64_t max)>;

  // A string parameter's raw text (made by `raw`), or one of its enum's strings; any other
  // parameter's JSON. `lengths`: whether the family's raw text takes minLength / maxLength.
  Sequence raw_or_json_value(const Json& s, const std::string& what, const RawText& raw, const char* family,
                             bool lengths) {
    if (!is_string_schema(s)) return json_.value(s, what);
    if (const auto e = s.find("enum"); e != s.end()) {
      std::vector<Sequence> alternatives;
      for (const Json& v : *e) alternatives.push_back(g_.literal(v.get<std::string>()));
      return Grammar::ref(g_.rule_of("glm_enum", alternatives));
    }
    static const std::set<std::string> kPlain = {"type", "title", "description", "default", "examples"};
    int64_t min = 0, max = -1;
    for (const auto& [key, value] : s.items()) {
      if (lengths && (key == "minLength" || key == "maxLength")) {
        if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > kMaxRawLength) {
          throw StructuredError(what + ": '" + key + "' must be a whole number from 0 to " +
                                std::to_string(kMaxRawLength) + " on a parameter written raw");
        }
        (key == "minLength" ? min : max) = value.get<int64_t>();
      } else if (kPlain.count(key) == 0) {
        throw StructuredError(what + ": a forced " + family + " tool call writes string parameters raw, so '" + key +
                              "' on a string parameter is not supported");
      }
    }
    if (max >= 0 && max < min) throw StructuredError(what + ": 'maxLength' is below 'minLength'");
    return raw(min, max);
  }

  Sequence glm_value(const Json& s, const std::string& what) {
    return raw_or_json_value(s, what, [&](int64_t, int64_t) { return raw_text(false); }, "GLM", /*lengths=*/false);
  }

  // Qwen3-Coder's raw parameter text without bounds, one rule set for every such parameter.
  Sequence parameter_text(int64_t min = 0, int64_t max = -1) {
    if (min > 0 || max >= 0) return text_without("</parameter>", min, max);
    if (!parameter_text_) parameter_text_ = text_without("</parameter>", 0, -1);
    return *parameter_text_;
  }

  // Any text of min..max characters (max < 0: no bound) in which `end` does not occur (so the
  // first `end` after it closes it). A rule per (characters written up to the bounds, prefix of
  // `end` matched so far), as a string-search automaton runs; past the lengths the bounds tell
  // apart, one set of rules loops. `end` is ASCII, its first character occurring in it only there
  // ("</parameter>").
  Sequence text_without(std::string_view end, int64_t min, int64_t max) {
    const size_t n = end.size();
    const int64_t counted = max >= 0 ? max : min;
    std::vector<std::vector<int32_t>> rules(static_cast<size_t>(counted + 1), std::vector<int32_t>(n));
    for (auto& level : rules) {
      for (int32_t& rule : level) rule = g_.add_rule("raw_value");
    }
    for (int64_t k = 0; k <= counted; ++k) {
      const std::vector<int32_t>& here = rules[static_cast<size_t>(k)];
      if (max >= 0 && k == max) {  // no character more
        for (const int32_t rule : here) g_.add_alternative(rule, {});
        continue;
      }
      const std::vector<int32_t>& next = rules[static_cast<size_t>(max >= 0 ? k + 1 : std::min(k + 1, counted))];
      for (size_t i = 0; i < n; ++i) {
        if (k >= min) g_.add_alternative(here[i], {});
        CodepointRanges others = {{static_cast<uint32_t>(end[0]), static_cast<uint32_t>(end[0])}};
        if (i > 0) others.push_back({static_cast<uint32_t>(end[i]), static_cast<uint32_t>(end[i])});
        g_.add_alternative(here[i], concat({utf8_class(g_, complement_ranges(normalize_ranges(others)), "raw_char"),
                                            Grammar::ref(next[0])}));
        g_.add_alternative(here[i], concat({g_.literal(end.substr(0, 1)), Grammar::ref(next[1])}));
        if (i > 0 && i + 1 < n) {
          g_.add_alternative(here[i], concat({g_.literal(end.substr(i, 1)), Grammar::ref(next[i + 1])}));
        }
      }
    }
    return Grammar::ref(rules[0][0]);
  }

  // Qwen3-Coder's parameters, in the schema's order, optional ones may be left out:
  // <parameter=KEY>\nVALUE\n</parameter>\n, a string's VALUE its raw text (without "</parameter>").
  Sequence qwen_parameters(const Json& parameters, const std::string& what) {
    auto parameter = [&](const Sequence& key, const Sequence& value) {
      return concat({g_.literal("<parameter="), key, g_.literal(">\n"), value, g_.literal("\n</parameter>\n")});
    };
    const auto any = [&] {
      const Sequence key_char = utf8_class(g_, complement_ranges({{'\n', '\n'}, {'<', '<'}, {'>', '>'}}), "key_char");
      return g_.star(parameter(concat({key_char, g_.star(key_char, "key")}), parameter_text()), "parameters");
    };
    const auto one = [&](const std::string& key, const Json& schema, const std::string& at) {
      const RawText raw = [&](int64_t min, int64_t max) { return parameter_text(min, max); };
      return parameter(g_.literal(key), raw_or_json_value(schema, at, raw, "Qwen3-Coder", /*lengths=*/true));
    };
    return raw_parameters(parameters, what, any, one, "optional_parameter");
  }

  // DeepSeek-V3.2's parameters (DSML), in the schema's order, optional ones may be left out, each
  // on its own line: <｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>, a
  // string's VALUE its raw text (without '<'), any other value's its JSON.
  Sequence dsml_parameters(const Json& parameters, const std::string& what) {
    auto parameter = [&](const Sequence& key, bool is_string, const Sequence& value) {
      return concat({marker("<｜DSML｜parameter"), g_.literal(" name=\""), key,
                     g_.literal(is_string ? "\" string=\"true\">" : "\" string=\"false\">"), value,
                     marker("</｜DSML｜parameter>"), g_.literal("\n")});
    };
    const auto any = [&] {
      const Sequence key_char = utf8_class(g_, complement_ranges({{'\n', '\n'}, {'"', '"'}, {'<', '<'}, {'>', '>'}}),
                                           "key_char");
      return g_.star(parameter(concat({key_char, g_.star(key_char, "key")}), true, raw_text(false)), "parameters");
    };
    const auto one = [&](const std::string& key, const Json& schema, const std::string& at) {
      const RawText raw = [&](int64_t, int64_t) { return raw_text(false); };
      return parameter(g_.literal(key), is_string_schema(schema),
                       raw_or_json_value(schema, at, raw, "DeepSeek-V3.2", /*lengths=*/false));
    };
    return raw_parameters(parameters, what, any, one, "optional_parameter");
  }

  // The key/value pairs of the arguments object, in the schema's order; optional ones may be left out.
  Sequence glm_arguments(const Json& parameters, const std::string& what) {
    const auto any = [&] { return g_.star(pair(raw_text(true), raw_text(false)), "glm_pairs"); };
    const auto one = [&](const std::string& key, const Json& schema, const std::string& at) {
      return pair(g_.literal(key), glm_value(schema, at));
    };
    return raw_parameters(parameters, what, any, one, "glm_optional");
  }

  // The parameters of a family that writes each as a tag around a raw value (GLM, Qwen3-Coder):
  // `one` per property in the schema's order, the optional ones optional; `any` for a schema
  // without properties (any names, raw values).
  using AnyParameters = std::function<Sequence()>;
  using OneParameter = std::function<Sequence(const std::string& key, const Json& schema, const std::string& at)>;
  Sequence raw_parameters(const Json& parameters, const std::string& what, const AnyParameters& any,
                          const OneParameter& one, const char* optional_name) {
    const auto props = parameters.find("properties");
    if (props == parameters.end() || !props->is_object()) {
      const auto type = parameters.find("type");
      if (type != parameters.end() && !(type->is_string() && *type == "object")) {
        throw StructuredError(what + ": a tool's parameters must be an object schema");
      }
      return any();
    }
    std::set<std::string> required;
    if (const auto r = parameters.find("required"); r != parameters.end() && r->is_array()) {
      for (const Json& name : *r) {
        if (name.is_string()) required.insert(name.get<std::string>());
      }
    }
    Sequence out;
    for (const auto& [key, schema] : props->items()) {
      const Sequence p = one(key, schema, what + ".properties." + key);
      append(out, required.count(key) ? p : g_.optional(p, optional_name));
    }
    return out;
  }

  Grammar& g_;
  JsonSchemaBuilder json_;
  std::string format_;
  const TokenVocabulary* vocabulary_;  // may be null: markers as text
  std::optional<Sequence> parameter_text_;
};

}  // namespace

bool has_tool_call_grammar(const std::string& format) { return find_block(format) != nullptr; }

const std::vector<std::string>& tool_call_markers() {
  static const std::vector<std::string> markers = {
      "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
      "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<arg_key>", "</arg_key>", "<arg_value>",
      "</arg_value>", "<｜DSML｜function_calls>", "</｜DSML｜function_calls>", "<｜DSML｜invoke", "</｜DSML｜invoke>",
      "<｜DSML｜parameter", "</｜DSML｜parameter>"};
  return markers;
}

Grammar tool_call_grammar(const Json& request, const TokenVocabulary* vocabulary) {
  const std::string format = request.value("format", std::string());
  const Block* block = find_block(format);
  if (block == nullptr) throw StructuredError("tool_choice: forcing a tool call in the '" + format + "' format is not supported");
  const Json& tools = request.at("tools");
  if (!tools.is_array() || tools.empty()) throw StructuredError("tool_choice: forcing a tool call needs a non-empty 'tools' list");
  Grammar g;
  ToolCallBuilder builder(g, format, vocabulary);
  std::vector<Sequence> calls;
  for (const Json& tool : tools) calls.push_back(builder.call(tool));
  const Sequence call = Grammar::ref(g.rule_of("tool_call", calls));
  Sequence body = call;
  if (request.value("parallel", false)) append(body, g.star(concat({g.literal(block->separator), call}), "more_tool_calls"));
  const int32_t root = g.add_rule("root");
  const auto marker = [&](const char* text) { return *text == '\0' ? Sequence{} : builder.marker(text); };
  g.add_alternative(root, concat({marker(block->begin_marker), g.literal(block->begin), body, g.literal(block->end),
                                  marker(block->end_marker)}));
  g.set_root(root);
  return g;
}

}  // namespace tachyon::structured
