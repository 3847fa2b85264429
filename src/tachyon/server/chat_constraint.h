// The structured-output constraint of a chat request as the route applies it: a forced tool call
// (tool_choice "required" or a named function) becomes a grammar of calls in the model's own
// format (structured/tool_call_grammar.h), and for a model with a reasoning parser every
// constraint applies after its reasoning (structured/reasoning_prefix.h), so the content the
// reasoning parser leaves is what the constraint matched. Tests: tests/unit/test_chat_constraint.cpp
// (ctest -R chat_constraint) and the openai npm client (server.openai_npm_tool_choice).
#pragma once

#include <optional>
#include <string>

#include "tachyon/server/chat_output.h"
#include "tachyon/server/openai_protocol.h"

namespace tachyon::server {

// nullopt when the request has no constraint and forces no call. Throws ApiException (400 on
// tool_choice) when a call is forced but the model shows no tool-call format. `rendered`: the
// prompt, which tells whether the answer starts inside the reasoning.
std::optional<structured::ConstraintSpec> chat_constraint(const ChatRequest& request, const ChatParsers& parsers,
                                                          std::string_view rendered);

// The route's one compilation of the request's constraint (chat_constraint above) into
// params.structured, then params validated with it (min_tokens, ignore_eos): 400s naming the field.
// The request parser compiles nothing, so a new schema is compiled once, in the form it is used.
void apply_chat_constraint(const ChatRequest& request, const ChatParsers& parsers, std::string_view rendered,
                           const ServerLimits& limits, core::SamplingParams& params);

}  // namespace tachyon::server
