// ToolParser: finds the tool calls in a chat answer's text, whole or piece by piece as it streams.
// One subclass per output format, one file each (tool_parser_<format>.cpp); which one a model
// gets is decided once at start-up from its chat template (tool_parser_for_template), never by
// guessing from the text, and `tachyon serve --tool-call-parser` overrides it.
//
// The contract every format keeps, tested by feeding each test text whole, byte by byte and in
// token-sized pieces (tests/unit/test_tool_parsers.cpp, ctest -R unit.tool_parsers):
//  - The same text gives the same pieces whatever the chunking (once adjacent pieces of the same
//    kind are joined). Parsers re-scan a call's text from its start on each piece, so every
//    decision is a function of the text seen, and text is released only once no later byte can
//    change what it is: a possible marker start is held back.
//  - A call is committed (kToolCallStart) once its name is complete; its arguments then stream
//    as fragments whose concatenation is the arguments' JSON text as the model wrote it (GLM's
//    key/value tags are rewritten as a JSON object). A call cut short keeps what it has (the
//    answer's finish_reason then says "length").
//  - Text that looked like a call start but never made one (no name, malformed, never closed)
//    comes back as content, verbatim, when that is known: at its end marker or at the end of
//    the answer. Nothing is lost.
//  - Content is the text outside the calls, minus the whitespace that only separates it from a
//    call (the newline before <tool_call>, between calls, after the last). An answer without
//    calls comes back byte for byte.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tachyon/server/json_scan.h"

namespace tachyon::server {

// One piece of a parsed chat answer, in answer order.
struct ChatPiece {
  enum class Kind { kContent, kReasoning, kToolCallStart, kToolCallArguments };
  Kind kind = Kind::kContent;
  std::string text;         // content, reasoning or an arguments fragment; kToolCallStart: the function name
  int32_t tool_index = -1;  // kToolCall*: the call's position in the answer (0, 1, ...)
  std::string tool_id;      // kToolCallStart: "call_..." (given by ChatOutput)
};

class ToolParser {
 public:
  virtual ~ToolParser() = default;
  // The next piece of the answer's content; appends what is now known to `out`.
  void push(std::string_view text, std::vector<ChatPiece>& out);
  // End of the answer: whatever was held back, as content or as the end of a call.
  void finish(std::vector<ChatPiece>& out);
  int32_t num_calls() const { return num_calls_; }

 protected:
  // Consumes what it can of buffer_ through the emit_* helpers; at_end: no more text comes.
  virtual void parse(bool at_end) = 0;

  void emit_content(std::string_view text);
  // Outside a call block: emits the content before `marker` and consumes the marker (true), or,
  // when it is not there, emits all content that cannot be the start of one and keeps a partial
  // marker for the next piece (false: wait for more text).
  bool consume_to_marker(std::string_view marker, bool at_end);
  // Inside a call block: the block's text so far (a view of buffer_) up to `end_marker` when it
  // has come (`end` its offset, else npos), without a partial marker at the end while more text
  // may come.
  struct BlockBody {
    std::string_view text;
    size_t end = std::string::npos;
    bool closed() const { return end != std::string::npos; }
  };
  BlockBody block_body(std::string_view end_marker, bool at_end) const;
  void start_call(std::string name);
  // The call's arguments as known so far; emits what extends the fragments sent before.
  void update_arguments(std::string_view arguments_so_far);
  // Ends the current call; `arguments` is its final text when known (else what was streamed,
  // "{}" when nothing was).
  void end_call(std::optional<std::string_view> arguments = std::nullopt);
  bool in_call() const { return in_call_; }
  // For formats whose call is a JSON object {"name": ..., "arguments": {...}} (text from its
  // '{'): commits the call once the name is complete and streams the arguments' text.
  void follow_call_object(std::string_view text, const CallObjectScan& scan);
  // The object's final arguments (nullopt when it had none); a JSON string holding the
  // arguments, as some models write them, is unwrapped.
  static std::optional<std::string> object_arguments(std::string_view text, const CallObjectScan& scan);
  // For formats whose calls are blocks between two markers, `open` and `close` (Hermes, GLM,
  // Qwen3-Coder): content up to a block; then the block's body so far through `follow`, which
  // commits the call and streams it (update_arguments) and returns the arguments the call ends
  // with once the block is complete (nullopt: what was streamed); a finished block ends its call,
  // or comes back as content, markers and all, when it made none.
  using BlockFollower = std::function<std::optional<std::string>(std::string_view body, bool complete)>;
  void parse_blocks(std::string_view open, std::string_view close, bool at_end, const BlockFollower& follow);

  // For formats that write each parameter as raw text (GLM, Qwen3-Coder): the JSON type the
  // request's `tools` give parameter `key` of `function` ("string", "integer", ...; a type list of
  // one type and "null" is that type), "" when they give none or several.
  static std::string parameter_type(const nlohmann::ordered_json& tools, std::string_view function,
                                    std::string_view key);
  // `text` as a JSON string literal (invalid UTF-8 replaced): a raw parameter value or key.
  static std::string json_string(std::string_view text);

  std::string buffer_;  // text pushed and not yet consumed

 private:
  std::vector<ChatPiece>* out_ = nullptr;
  std::string held_whitespace_;  // trailing whitespace of content: dropped if a call follows
  bool after_call_ = false;      // leading whitespace after a call is dropped
  bool in_call_ = false;
  bool in_marked_block_ = false;  // parse_blocks: inside a block
  std::string arguments_sent_;
  int32_t num_calls_ = 0;
};

// Format names for --tool-call-parser: hermes, llama3_json, deepseek_v3, deepseek_v32 (DSML), glm45,
// mistral, qwen3_coder (and the aliases deepseek_v31, glm47, qwen3_xml).
std::vector<std::string> tool_parser_names();
bool is_tool_parser_name(std::string_view name);
// The canonical name for a format name or alias; "" when unknown.
std::string canonical_tool_parser(std::string_view name);
// The format a chat template teaches its model ("" when it shows none).
std::string tool_parser_for_template(std::string_view chat_template);
// The marker strings a format is recognized by (to check whether the tokenizer would drop them
// as special tokens).
std::vector<std::string> tool_parser_markers(std::string_view name);
// tools: the request's validated tools array (GLM and Qwen3-Coder read the parameter types from it).
std::unique_ptr<ToolParser> make_tool_parser(std::string_view name, const nlohmann::ordered_json& tools);

// One factory per format file.
std::unique_ptr<ToolParser> make_hermes_tool_parser();
std::unique_ptr<ToolParser> make_llama3_json_tool_parser();
std::unique_ptr<ToolParser> make_deepseek_v3_tool_parser();
std::unique_ptr<ToolParser> make_glm45_tool_parser(const nlohmann::ordered_json& tools);
std::unique_ptr<ToolParser> make_mistral_tool_parser();
std::unique_ptr<ToolParser> make_qwen3_coder_tool_parser(const nlohmann::ordered_json& tools);
std::unique_ptr<ToolParser> make_deepseek_v32_tool_parser();

}  // namespace tachyon::server
