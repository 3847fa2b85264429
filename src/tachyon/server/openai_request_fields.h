// Typed readers for request fields, shared by the completion and chat parsers (internal to the
// server's protocol code, except parse_body, which every route uses). Each reader returns
// nullopt when the field is absent or null, and throws ApiException (400, param = path) when it
// has the wrong JSON type or range, so a parser is a flat list of "read field, check range, store".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "tachyon/core/sampling_params.h"
#include "tachyon/server/openai_protocol.h"

namespace tachyon::server::fields {

using Json = nlohmann::ordered_json;

[[noreturn]] void fail(std::string param, std::string message);

// "a string", "an array", ... for messages.
std::string type_name(const Json& value);

// The one entry point for every request body (completions, chat, /tokenize, /detokenize): the
// body parsed as a JSON object. 400 (param null) on nesting deeper than limits.max_json_depth,
// checked by a linear scan before parsing, on invalid JSON, invalid UTF-8 or a non-object.
Json parse_body(std::string_view body, const ServerLimits& limits);

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
// ignore_eos, min_tokens, include_stop_str_in_output, priority, logit_bias, response_format.
void read_sampling_fields(const Json& body, const ServerLimits& limits, core::SamplingParams& params);

// stream, stream_options.include_usage (stream_options without stream: 400).
void read_stream_fields(const Json& body, bool& stream, bool& include_usage);

// 400 on "n" when num_prompts x n exceeds limits.max_sequences_per_request.
void check_sequences(int64_t num_prompts, int32_t n, const ServerLimits& limits);

// core::SamplingParams::validate, its tachyon::Error turned into a 400.
void validate_params(const core::SamplingParams& params, const ServerLimits& limits);

}  // namespace tachyon::server::fields
