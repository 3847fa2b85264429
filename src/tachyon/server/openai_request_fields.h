// Typed readers for request fields, shared by the completion and chat parsers (internal to the
// server's protocol code, except parse_body, which every route uses, and sampling_field_specs,
// which `tachyon generate` turns into its options). Each reader returns nullopt when the field is
// absent or null, and throws ApiException (400, param = path) when it has the wrong JSON type or
// range, so a parser is a flat list of "read field, check range, store".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tachyon/core/sampling_params.h"
#include "tachyon/server/openai_protocol.h"

namespace tachyon::server::fields {

using Json = nlohmann::ordered_json;

[[noreturn]] void fail(std::string param, std::string message);

// "a string", "an array", ... for messages.
std::string type_name(const Json& value);

// `value` when it is an object, else a 400 on `path` ("Invalid type for '<path>': expected an
// object, but got ...").
const Json& object_at(const Json& value, const std::string& path);

// A 400 (param null) when `body` nests arrays and objects deeper than max_depth (brackets inside
// strings do not count): one linear pass, for anything that must not parse such a body (parse_body,
// the PD router).
void check_body_depth(std::string_view body, int32_t max_depth);

// A 400 on `path` ("" for the body) when reading `text`'s JSON objects would cost more than
// 50,000,000 key comparisons: an ordered JSON object compares each new key with those before it,
// so one of n members costs n^2 / 2 (a 150,000-entry object took 21 s). One linear pass before
// parsing, as check_body_depth; the message names the largest object's member count.
void check_object_sizes(std::string_view text, const std::string& path);

// The one entry point for every request body (completions, chat, /tokenize, /detokenize): the
// body parsed as a JSON object. 400 (param null) on nesting deeper than limits.max_json_depth,
// checked by a linear scan before parsing, on invalid JSON, invalid UTF-8 or a non-object.
Json parse_body(std::string_view body, const ServerLimits& limits);

// A JSON document held in a string field (a tool call's arguments, a schema given as text), parsed
// under the body's nesting limit: nesting inside a string escapes parse_body's scan, and copying or
// dumping the parsed value recurses once per level (a 100,000-deep schema string overflowed the
// stack). nullopt when the text is not valid JSON; a 400 on `path` when it nests deeper than
// max_depth levels.
std::optional<Json> parse_nested_document(const std::string& text, const std::string& path, int32_t max_depth);

// A check's message as a client should read it: without the " (check `...` failed at file:line)"
// that TACHYON_CHECK appends for developers.
std::string user_message(const tachyon::Error& e);

// The field, or nullptr when absent or null.
const Json* find(const Json& object, std::string_view name);

// `path` is the param reported in errors; for top-level fields it is the name.
std::optional<int64_t> read_int(const Json& object, std::string_view name, std::string_view path, int64_t lo,
                                int64_t hi);
std::optional<double> read_number(const Json& object, std::string_view name, std::string_view path);
std::optional<bool> read_bool(const Json& object, std::string_view name, std::string_view path);
std::optional<std::string> read_string(const Json& object, std::string_view name, std::string_view path);

// An integral JSON number (int or integral float) in [lo, hi], else a 400 on `path`.
int64_t as_int(const Json& value, std::string_view path, int64_t lo, int64_t hi);

// --- Fields both endpoints share -------------------------------------------------------------

// 404 when "model" names another model than limits.model_name.
void check_model(const Json& body, const ServerLimits& limits);

// temperature, top_p, top_k, min_p, penalties, seed, n, best_of, stop, stop_token_ids,
// ignore_eos, min_tokens, include_stop_str_in_output, priority, logit_bias. Not the structured
// outputs: a completion compiles them as asked (read_structured_fields), a chat request in its
// route, once, after the reasoning where the model reasons (chat_constraint.h).
void read_sampling_fields(const Json& body, const ServerLimits& limits, core::SamplingParams& params);

// Structured outputs: response_format (text, json_object, json_schema) and vLLM's guided_json,
// guided_regex, guided_choice, guided_grammar and structured_outputs {json|regex|choice|grammar|
// json_object}. At most one constraint per request. The constraint is compiled here, on the HTTP
// thread, with limits.grammar_compiler (cached by its text): an invalid schema, regex or grammar,
// or an unsupported keyword, is a 400 naming it; so is any constraint when the server has no
// compiler. Sets params.structured. (openai_structured_fields.cpp)
void read_structured_fields(const Json& body, const ServerLimits& limits, core::SamplingParams& params);
// Its two halves: the constraint the body asks for (400 on a bad or second one), and its
// compilation (400 naming spec.field when it cannot be compiled or there is no compiler).
std::optional<structured::ConstraintSpec> read_structured_spec(const Json& body, const ServerLimits& limits);
std::shared_ptr<const structured::CompiledGrammar> compile_constraint(const structured::ConstraintSpec& spec,
                                                                      const ServerLimits& limits);

// stream, stream_options.include_usage (stream_options without stream: 400).
void read_stream_fields(const Json& body, bool& stream, bool& include_usage);

// OpenAI's end-user id: `user`, else `safety_identifier` (its newer name); "" when neither.
// At most kMaxUserBytes bytes (400 past that): the scheduler's fair shares are keyed by it.
inline constexpr size_t kMaxUserBytes = 256;
std::string read_user(const Json& body);

// 400 on "n" when num_prompts x n exceeds limits.max_sequences_per_request.
void check_sequences(int64_t num_prompts, int32_t n, const ServerLimits& limits);

// core::SamplingParams::validate, its tachyon::Error turned into a 400.
void validate_params(const core::SamplingParams& params, const ServerLimits& limits);

// --- The sampling fields as options ----------------------------------------------------------

// How a field's value is written in JSON, so that a command line can build it from text.
enum class FieldKind {
  kNumber,       // a number
  kInteger,      // an integer
  kFlag,         // a boolean, true when the option is given
  kStringList,   // an array of strings, one per repeated option
  kIntegerList,  // an array of integers
};

struct FieldSpec {
  std::string name;          // the JSON field ("top_p"); a command line spells it --top-p
  FieldKind kind;
  std::string help;          // what it does and the range the parser accepts
  std::string default_text;  // what an absent field means
};

// Every field of a completions request that chooses or stops tokens: the ones
// read_sampling_fields reads that make sense for one request (not priority, best_of, logit_bias,
// response_format), plus the completion parser's max_tokens and logprobs. Ranges are stated with
// `limits`. tests/unit/test_openai_protocol_requests.cpp checks that the parser reads every
// field listed here and no other field of the OpenAI and vLLM APIs, so the two cannot drift.
std::vector<FieldSpec> sampling_field_specs(const ServerLimits& limits);

}  // namespace tachyon::server::fields
