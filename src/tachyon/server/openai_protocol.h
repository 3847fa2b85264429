// The OpenAI protocol layer: request bodies in, validated native structs out; native results in,
// OpenAI JSON / SSE frames out (openai_responses.h). Pure functions: no sockets, no engine.
//
// Every bad input throws ApiException with an OpenAI-style error (openai_errors.h): 400 with
// `param` naming the field (nested fields as "messages[1].content"), 404 for an unknown model.
// No bad input crashes or yields a 500.
//
// Decisions (the brief left them open):
//  - JSON null means "absent" for every optional field (some clients send nulls).
//  - Integer fields accept integral floats (16.0), as pydantic does; 16.5 is a 400.
//  - Unknown fields are ignored. Fields that would silently change results if ignored are
//    rejected with a 400 saying they are unsupported: suffix, logit_bias (non-empty), best_of
//    (!= n), echo together with logprobs (prompt logprobs are not computed), non-text content
//    parts, and structured-output constraints the grammar engine does not support (by keyword).
//  - Structured outputs (response_format json_object / json_schema, guided_*, structured_outputs)
//    compile at the door (a completion's in read_structured_fields, a chat request's once in its
//    route, before anything is submitted: chat_constraint.h); an output that ends by EOS / stop is complete
//    per the grammar; one cut by max_tokens ends with finish_reason "length" and may be partial.
//  - top_k -1 and 0 both mean "off" (stored as 0); < -1 is a 400.
//  - Stop strings must be non-empty; at most max_stop of them, each at most max_stop_length bytes.
//  - seed is an int64 (OpenAI's type): anything outside [-2^63, 2^63 - 1] is a 400, never clamped
//    or wrapped; a negative seed is used bit for bit as a uint64.
//  - A body nested deeper than max_json_depth is refused by a linear scan of its bytes before it
//    is parsed: copying, dumping and templating JSON recurse once per level, and a few hundred
//    kilobytes of brackets would overflow the stack.
//  - ServerLimits::vocab_size <= 0 means "unknown": token ids are then not range-checked.
//  - ServerLimits::model_name empty: any model name is accepted.
//  - max_tokens: completions default to 16 when absent (OpenAI's documented default), so
//    CompletionRequest::max_tokens is always set. Chat leaves it nullopt when absent and the server
//    fills max_model_len - prompt_len (resolve_max_tokens). params.max_tokens holds the value
//    given, or max_model_len while unknown (an upper bound used only for validation).
//  - Chat content given as text parts is joined with "\n" (vLLM); messages are stored with that
//    string as content, other keys kept as sent (templates may read name, tool_calls,
//    reasoning_content). An assistant turn with tool_calls and null or no content gets "" (vLLM
//    does the same): templates such as Qwen3's test `'</think>' in message.content`, which raises
//    on None, and others would print "None" into the prompt. tool_calls[].function.arguments
//    given as a JSON string is parsed into an object (vLLM does this for chat templates); invalid
//    JSON there is a 400.
//  - tool_choice: "auto" (the default), "none" (the tools are not shown to the chat template,
//    so the model is not told of them, and the answer is not parsed for calls), "required" and
//    {"type": "function", "function": {"name": ...}} (a name not among the tools is a 400) force
//    a call: the route constrains decoding to calls in the model's own format
//    (structured/tool_call_grammar.h), any of the tools for "required" (several when
//    parallel_tool_calls is true), exactly one call of the named one otherwise. "required" or a
//    named function without tools is a 400, and so is either with a structured-output
//    constraint. parallel_tool_calls: false keeps the first call only.
//
// Tests: tests/unit/test_openai_protocol_requests.cpp and test_openai_chat_template_path.cpp
// (ctest -R openai).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tachyon/core/sampling_params.h"
#include "tachyon/structured/grammar_compiler.h"
#include "tachyon/server/openai_errors.h"
#include "tachyon/server/openai_responses.h"

namespace tachyon::server {

// n is refused above this whatever ServerLimits::max_n says (core::SamplingParams::validate has
// the same bound): every sequence holds KV blocks and a choice in the response, so a mistyped
// config must not let one request fan out thousands.
constexpr int32_t kMaxNCeiling = 128;

// Fixed at server start. Every limit is checked before anything is tokenized or submitted.
struct ServerLimits {
  std::string model_name;                   // the served name; a request naming another model -> 404
  int64_t max_model_len = 4096;             // prompt + completion tokens
  int64_t vocab_size = 0;                   // token ids must be in [0, vocab_size); <= 0: unchecked
  int32_t max_n = 16;                       // n per request, capped at kMaxNCeiling
  int32_t max_stop = 16;                    // stop strings per request
  int32_t max_stop_length = 1024;           // bytes per stop string
  int32_t max_prompts = 2048;               // prompts in one completions request (OpenAI's limit)
  int32_t max_sequences_per_request = 256;  // prompts x n
  int32_t max_json_depth = 64;              // nesting of the body's arrays and objects; the body is level 1
  int32_t max_logprobs = 20;
  // Compiles structured-output constraints against the served tokenizer's vocabulary (built once
  // at start-up); null: requests with a constraint get a 400.
  std::shared_ptr<structured::GrammarCompiler> grammar_compiler;
};

struct CompletionRequest {
  // Exactly one of these is non-empty: the prompt as text(s) or as token ids.
  std::vector<std::string> prompt_texts;         // [num_prompts] each non-empty
  std::vector<std::vector<int32_t>> prompt_ids;  // [num_prompts][prompt_len] each non-empty
  std::optional<int32_t> max_tokens;             // always set: the request's value, else 16
  core::SamplingParams params;                 // validated; params.max_tokens == *max_tokens
  bool echo = false;                             // prepend the prompt to each choice's text
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string user;            // OpenAI's end-user id: with the client address, whose fair share it uses
};

enum class ToolChoice { kAuto, kNone, kRequired, kFunction };

struct ChatRequest {
  nlohmann::ordered_json messages;         // validated array; every content is a string
  nlohmann::ordered_json tools = nullptr;  // null or a validated array of {"type":"function",...}
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_function;  // kFunction: the function's name (one of the tools)
  bool parallel_tool_calls = true;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  // The structured-output constraint as asked for, not compiled yet (params.structured is null):
  // the route compiles it once, after the reasoning of a model that reasons (chat_constraint.h).
  std::optional<structured::ConstraintSpec> constraint;
  std::optional<int32_t> max_tokens;  // max_completion_tokens, else max_tokens; nullopt: fill later
  core::SamplingParams params;      // validated; logprobs = top_logprobs when "logprobs": true, else -1
  bool stream = false;
  bool include_usage = false;
  std::string user;  // OpenAI's `user` (Anthropic: metadata.user_id): see CompletionRequest::user
  // Text the answer continues: the final assistant message, taken out of `messages`, with
  // continue_final_message (vLLM's) or as Anthropic's prefill. Its tokens follow the rendered
  // prompt (which ends with the generation prompt and, for a model that reasons, its reasoning
  // closed); the answer holds only the continuation. "" when none.
  std::string prefill;
};

// Both throw ApiException.
CompletionRequest parse_completion_request(std::string_view body, const ServerLimits& limits);
ChatRequest parse_chat_request(std::string_view body, const ServerLimits& limits);

// After tokenizing: throws a 400 (code "context_length_exceeded") when the prompt leaves no room
// for a token, or prompt + max_tokens exceeds max_model_len (vLLM's message).
void check_context(int64_t prompt_tokens, std::optional<int32_t> max_tokens, const ServerLimits& limits);

// check_context, then the completion budget: max_tokens when given, else max_model_len - prompt.
int32_t resolve_max_tokens(int64_t prompt_tokens, std::optional<int32_t> max_tokens, const ServerLimits& limits);

}  // namespace tachyon::server
