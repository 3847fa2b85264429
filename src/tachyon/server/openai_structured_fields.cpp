// Structured-output request fields: which constraint a request asks for, compiled at the door.
// OpenAI's response_format and vLLM's older guided_* extras and newer structured_outputs object
// all land in one structured::ConstraintSpec; two constraints in one request are a 400 (which
// one would win is not obvious). See openai_request_fields.h (read_structured_fields).
#include <optional>

#include "tachyon/server/openai_request_fields.h"

namespace tachyon::server::fields {
namespace {

using structured::ConstraintSpec;

// A schema given as an object, or as a string holding JSON (vLLM accepts both for guided_json);
// the string's nesting counts against the body's limit as an object's does.
std::string schema_text(const Json& value, const std::string& path, int32_t max_depth) {
  if (value.is_object() || value.is_boolean()) return value.dump();
  if (value.is_string()) {
    std::optional<Json> parsed = parse_nested_document(value.get<std::string>(), path, max_depth);
    if (!parsed) fail(path, "'" + path + "' is a string that is not valid JSON; give the schema as an object.");
    return parsed->dump();
  }
  fail(path, "'" + path + "' must be a JSON schema (an object), but got " + type_name(value) + ".");
}

std::string string_field(const Json& value, const std::string& path) {
  if (!value.is_string() || value.get<std::string>().empty()) fail(path, "'" + path + "' must be a non-empty string.");
  return value.get<std::string>();
}

std::vector<std::string> choice_list(const Json& value, const std::string& path) {
  if (!value.is_array() || value.empty()) fail(path, "'" + path + "' must be a non-empty array of strings.");
  std::vector<std::string> out;
  for (const Json& c : value) {
    if (!c.is_string()) fail(path, "'" + path + "' must be a non-empty array of strings.");
    out.push_back(c.get<std::string>());
  }
  return out;
}

std::optional<ConstraintSpec> response_format(const Json& body, int32_t max_depth) {
  const Json* format = find(body, "response_format");
  if (format == nullptr) return std::nullopt;
  if (!format->is_object()) fail("response_format", "'response_format': expected an object, but got " + type_name(*format) + ".");
  const Json* type = find(*format, "type");
  if (type == nullptr || !type->is_string()) {
    fail("response_format", "'response_format' must be an object with a string 'type', e.g. {\"type\": \"text\"}.");
  }
  const std::string kind = type->get<std::string>();
  if (kind == "text") return std::nullopt;
  if (kind == "json_object") return ConstraintSpec{ConstraintSpec::Kind::kJsonObject, "", {}, "response_format"};
  if (kind == "json_schema") {
    const Json* spec = find(*format, "json_schema");
    if (spec == nullptr || !spec->is_object()) {
      fail("response_format", "'response_format' of type 'json_schema' needs a 'json_schema' object with a 'schema'.");
    }
    const Json* schema = find(*spec, "schema");
    if (schema == nullptr) fail("response_format.json_schema.schema", "'response_format.json_schema' needs a 'schema'.");
    // strict: true is what this server always does; strict: false is accepted and treated the same
    // (the grammar never allows properties the schema does not list).
    if (const Json* strict = find(*spec, "strict"); strict != nullptr && !strict->is_boolean()) {
      fail("response_format.json_schema.strict", "'strict' must be a boolean.");
    }
    return ConstraintSpec{ConstraintSpec::Kind::kJsonSchema,
                          schema_text(*schema, "response_format.json_schema.schema", max_depth),
                          {}, "response_format.json_schema.schema"};
  }
  fail("response_format", "'response_format' of type '" + kind +
                              "' is not supported; use 'text', 'json_object' or 'json_schema'.");
}

// vLLM's structured_outputs object: exactly one of json, regex, choice, grammar, json_object.
std::optional<ConstraintSpec> structured_outputs(const Json& body, int32_t max_depth) {
  const Json* so = find(body, "structured_outputs");
  if (so == nullptr) return std::nullopt;
  if (!so->is_object()) fail("structured_outputs", "'structured_outputs': expected an object, but got " + type_name(*so) + ".");
  std::optional<ConstraintSpec> out;
  auto set = [&](ConstraintSpec spec) {
    if (out) fail("structured_outputs", "'structured_outputs' may hold one of json, regex, choice, grammar, json_object.");
    out = std::move(spec);
  };
  for (const auto& [key, value] : so->items()) {
    if (value.is_null()) continue;
    const std::string path = "structured_outputs." + key;
    if (key == "json") set({ConstraintSpec::Kind::kJsonSchema, schema_text(value, path, max_depth), {}, path});
    else if (key == "regex") set({ConstraintSpec::Kind::kRegex, string_field(value, path), {}, path});
    else if (key == "choice") set({ConstraintSpec::Kind::kChoice, "", choice_list(value, path), path});
    else if (key == "grammar") set({ConstraintSpec::Kind::kGrammar, string_field(value, path), {}, path});
    else if (key == "json_object") {
      if (!value.is_boolean()) fail(path, "'" + path + "' must be a boolean.");
      if (value.get<bool>()) set({ConstraintSpec::Kind::kJsonObject, "", {}, path});
    } else if (key == "disable_any_whitespace" || key == "disable_fallback" || key == "disable_additional_properties") {
      // Already how this server behaves (no free whitespace, one engine, strict objects).
    } else {
      fail(path, "'" + path + "' is not supported; structured_outputs takes json, regex, choice, grammar or json_object.");
    }
  }
  return out;
}

}  // namespace

std::optional<ConstraintSpec> read_structured_spec(const Json& body, const ServerLimits& limits) {
  std::vector<ConstraintSpec> specs;
  if (auto spec = response_format(body, limits.max_json_depth)) specs.push_back(std::move(*spec));
  if (auto spec = structured_outputs(body, limits.max_json_depth)) specs.push_back(std::move(*spec));
  if (const Json* v = find(body, "guided_json")) {
    specs.push_back(
        {ConstraintSpec::Kind::kJsonSchema, schema_text(*v, "guided_json", limits.max_json_depth), {}, "guided_json"});
  }
  if (const Json* v = find(body, "guided_regex")) specs.push_back({ConstraintSpec::Kind::kRegex, string_field(*v, "guided_regex"), {}, "guided_regex"});
  if (const Json* v = find(body, "guided_choice")) specs.push_back({ConstraintSpec::Kind::kChoice, "", choice_list(*v, "guided_choice"), "guided_choice"});
  if (const Json* v = find(body, "guided_grammar")) specs.push_back({ConstraintSpec::Kind::kGrammar, string_field(*v, "guided_grammar"), {}, "guided_grammar"});
  if (find(body, "guided_whitespace_pattern") != nullptr) {
    fail("guided_whitespace_pattern", "'guided_whitespace_pattern' is not supported; JSON is generated without free whitespace.");
  }
  if (specs.empty()) return std::nullopt;
  if (specs.size() > 1) {
    fail(specs[1].field, "a request may carry one structured-output constraint, but '" + specs[0].field + "' and '" +
                             specs[1].field + "' were both given.");
  }
  return std::move(specs[0]);
}

std::shared_ptr<const structured::CompiledGrammar> compile_constraint(const ConstraintSpec& spec, const ServerLimits& limits) {
  if (limits.grammar_compiler == nullptr) {
    fail(spec.field, "structured outputs are not available here (no tokenizer vocabulary was loaded).");
  }
  try {
    return limits.grammar_compiler->compile(spec);
  } catch (const structured::StructuredError& e) {
    fail(spec.field, std::string(e.what()) + ".");
  }
}

void read_structured_fields(const Json& body, const ServerLimits& limits, core::SamplingParams& params) {
  if (std::optional<ConstraintSpec> spec = read_structured_spec(body, limits)) {
    params.structured = compile_constraint(*spec, limits);
  }
}

}  // namespace tachyon::server::fields
