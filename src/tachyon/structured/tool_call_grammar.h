// Forced tool calls (tool_choice "required" or a named function): a grammar whose strings are
// exactly the calls a model family writes in its own format, each call's arguments matching its
// tool's "parameters" schema (json_schema.h), so the server's tool parser for that format reads
// them back as calls whose arguments validate. The formats, as their chat templates teach them:
//   hermes       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>   calls joined by "\n"
//   llama3_json  {"name": "f", "parameters": {...}}                              joined by "; "
//   mistral      [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
//   deepseek_v3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜>
//                (further calls after "\n") <｜tool▁calls▁end｜>
//   glm45        <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>, the newlines
//                optional (GLM-4.7 and 5 leave them out); a string parameter's value is its raw
//                text without '<' (an enum of strings: one of them), any other value is JSON.
//   qwen3_coder  <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>,
//                joined by "\n"; a string parameter's value is its raw text without "</parameter>"
//                (so code with '<' in it can be written), any other value is JSON.
// The one non-obvious decision: the call is the whole answer (no text before it), as OpenAI's
// forced calls are; several calls only when parallel calls are allowed.
// Markers (the tags above, tool_call_markers()) that the served tokenizer encodes as one token are
// asked for as that token (TokenVocabulary::marker_bytes), so a forced call is the token ids the
// model itself writes, special tokens included; without a vocabulary they are plain text.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tachyon/structured/grammar.h"
#include "tachyon/structured/token_vocabulary.h"

namespace tachyon::structured {

// The formats above (the canonical names of the server's tool parsers).
bool has_tool_call_grammar(const std::string& format);

// Every format's markers, each a tag its chat template writes whole.
const std::vector<std::string>& tool_call_markers();

// request: {"format": ..., "tools": [{"name": ..., "parameters": {...}}, ...], "parallel": bool}.
// A tool without "parameters" takes any JSON object. Throws StructuredError naming the tool's
// schema ("tools[1].function.parameters") when it cannot be compiled, or the format when unknown.
// `vocabulary` (may be null): where a marker is one of its marker tokens, the grammar asks for it.
Grammar tool_call_grammar(const nlohmann::ordered_json& request, const TokenVocabulary* vocabulary = nullptr);

}  // namespace tachyon::structured
