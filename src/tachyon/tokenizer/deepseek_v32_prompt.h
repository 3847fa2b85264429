// DeepSeek-V3.2's chat prompt, rendered natively: its release ships no Jinja chat template (a
// Python encoder instead), so a V3.2 checkpoint whose tokenizer has none is rendered here
// (ChatTemplate::deepseek_v32). The format, as the release's encoder writes it:
//   <bos> [system content, then "\n\n" + the tools block when tools are given]
//   user:      <｜User｜>{content}<｜Assistant｜> then <think> (thinking mode, last user turn) or </think>
//   developer: as a user turn whose content is the tools block, then "\n\n# The user's message is: ..."
//   assistant: [{reasoning}</think> in thinking mode after the last user turn]{content}
//              ["\n\n<｜DSML｜function_calls>\n" invokes "\n</｜DSML｜function_calls>"]<｜end▁of▁sentence｜>
//   tool:      results of the assistant's calls in order, "\n\n<function_results>" before the first,
//              "\n<result>{content}</result>" each, "\n</function_results>\n\n" + <think> or </think>
//              after the last.
// An invoke is <｜DSML｜invoke name="NAME">\n then one line per argument,
// <｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter> (strings as they are,
// other values as Python's json.dumps), then \n</｜DSML｜invoke>. Thinking mode is
// chat_template_kwargs' `thinking` or `enable_thinking` (default off, as vLLM's V3.2 mode); in it,
// the reasoning of turns before the last user turn is dropped. Tools go first as a system message
// of their own. Tests: tests/unit/test_deepseek_v32_prompt.cpp.
#pragma once

#include <string>

#include "tachyon/tokenizer/chat_template.h"

namespace tachyon::tokenizer {

// ChatTemplate::source() of the native renderer (what the parsers' "auto" choice reads).
inline constexpr const char* kDeepseekV32NativeTemplate = "native:deepseek_v32";

// The DSML markers of V3.2's tool calls (the tool parser reads them back).
inline constexpr const char* kDsmlToken = "\xEF\xBD\x9C" "DSML" "\xEF\xBD\x9C";  // ｜DSML｜

// Throws tachyon::Error for messages the format cannot hold (a tool result with no call before
// it, an unknown role, arguments that are not a JSON object).
std::string render_deepseek_v32(const ChatTemplateInputs& inputs, const std::string& bos_token,
                                const std::string& eos_token);

}  // namespace tachyon::tokenizer
