// Which field of a POST /v1/messages body an error is about, spelled as Anthropic spells paths
// ("messages.1.content.0.text", "tools.0.input_schema"). The route converts its body into the
// chat route's body and lets parse_chat_request validate that (anthropic_request.cpp), so the
// chat parser's errors name chat fields ("stop[2]", "tools[0].function.parameters") that the
// client never sent: they are renamed here before they reach it. The body's nesting limit is
// also checked here, so that its error can name the field that is too deep (a tool_use block's
// input, a tool's input_schema) instead of only "the body".
//
// Tests: tests/server/test_server_messages.cpp (ctest -R server.*Messages).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tachyon/server/openai_errors.h"

namespace tachyon::server {

// A path of the converted chat body ("stop[2]", "tools[0].function.name") -> the Anthropic field
// it came from ("stop_sequences.2", "tools.0.name"). Chat messages are renumbered by the
// conversion (a system message first, tool results split out), so any "messages[...]" path is
// "messages". A field without another name keeps its own, with dots for brackets.
std::string anthropic_field_path(std::string_view chat_path);

// A 400 of the chat parser with its param and every quoted path of that field in its message
// renamed by anthropic_field_path (a quoted value is left alone); any other error as it is.
ApiException with_anthropic_fields(const ApiException& chat_error);

// The field that holds the first array or object nested deeper than max_depth in the JSON text
// `body` (the body is level 1): a tool_use block's input ("messages.1.content.0.input"), a
// tool's input_schema ("tools.0.input_schema"), or else the top-level field. nullopt when nothing
// nests that deep. One linear pass over the bytes, as fields::check_body_depth: such a body must
// not be parsed.
std::optional<std::string> anthropic_field_too_deep(std::string_view body, int32_t max_depth);

}  // namespace tachyon::server
