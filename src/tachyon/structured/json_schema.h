// JSON schema -> Grammar. The output form is fixed: JSON as Python's json.dumps writes it by
// default, on one line, ", " between items and ": " after keys, no other whitespace, properties
// in the schema's order. Why no free whitespace: a model may emit whitespace forever where a
// grammar allows it (a known failure of constrained decoding), and a fixed form is what the
// oracle (xgrammar with any_whitespace off) produces too; models write this form naturally.
//
// Strict, as OpenAI's strict mode: an object with "properties" has no other properties
// (additionalProperties true or a schema is refused), required ones always appear, optional ones
// may be left out. An object schema without "properties" is any JSON object.
//
// Supported keywords: type (one or a list), properties, required, additionalProperties: false,
// items, minItems, maxItems, enum, const, anyOf, oneOf (as anyOf: exclusivity is not enforced),
// allOf with one member, $ref to "#", "#/$defs/..." or "#/definitions/..." (recursion allowed),
// $defs/definitions, minLength, maxLength, pattern (regex_grammar.h), format date, time,
// date-time, uuid, nullable (OpenAPI), and on integers minimum, maximum, exclusiveMinimum,
// exclusiveMaximum (integer_range.h; on other types they are refused). Annotations (title, description, default, examples,
// $schema, $id, $comment, deprecated, readOnly, writeOnly) are ignored. Any other keyword is
// refused by name (StructuredError -> 400): ignoring it would let outputs break the schema.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tachyon/structured/grammar.h"

namespace tachyon::structured {

// Adds JSON values matching schemas to a grammar under construction, so that a larger grammar
// (a forced tool call: markers, names and each tool's arguments) embeds them; the rules of any
// JSON value are built once and shared by every schema added.
class JsonSchemaBuilder {
 public:
  explicit JsonSchemaBuilder(Grammar& grammar);  // grammar outlives the builder
  ~JsonSchemaBuilder();
  // A value matching `schema` ("$ref"s resolve within it). Throws StructuredError; `what` names
  // the schema in its message ("json_schema", "tools[0].function.parameters").
  Sequence value(const nlohmann::ordered_json& schema, const std::string& what);
  // Any JSON object.
  Sequence any_object();

 private:
  class Compiler;
  std::unique_ptr<Compiler> compiler_;
};

// Throws StructuredError naming the keyword and its path ("properties.items.minimum").
Grammar json_schema_grammar(const nlohmann::ordered_json& schema);

// Any JSON object (response_format json_object), in the same form.
Grammar json_object_grammar();

}  // namespace tachyon::structured
