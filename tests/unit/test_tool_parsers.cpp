// Each tool-call format (server/tool_parser_*.cpp) on complete, partial and malformed answers.
// Every case runs whole, byte by byte and in pieces of 2, 3, 5 and 7 bytes (expect_answer), and
// all chunkings must give the same content and calls.
#include <gtest/gtest.h>

#include <random>

#include "chat_output_harness.h"
#include "tachyon/server/python_literal.h"

namespace tachyon::server {
namespace {

using testing::Answer;
using testing::expect_answer;
using testing::tools_config;

// ---- Hermes (Qwen2.5, Qwen3) ----

TEST(HermesToolParser, OneCall) {
  expect_answer(tools_config("hermes"),
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                Answer{"", "", {{"get_weather", R"({"city": "Paris"})"}}});
}

TEST(HermesToolParser, TextThenParallelCalls) {
  expect_answer(tools_config("hermes"),
                "Let me check both.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
                "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
                Answer{"Let me check both.", "", {{"a", R"({"x": 1})"}, {"b", "{}"}}});
}

TEST(HermesToolParser, NestedJsonBracesInStringsAndUnicode) {
  const std::string args =
      R"({"code": "if (x) { y(\"}\"); } // ]", "city": "Zürich 東京 🌍", "nested": {"a": [1, {"b": "]}"}], "c": null}})";
  expect_answer(tools_config("hermes"), "<tool_call>\n{\"name\": \"run\", \"arguments\": " + args + "}\n</tool_call>",
                Answer{"", "", {{"run", args}}});
}

TEST(HermesToolParser, ArgumentsBeforeNameAndAsString) {
  expect_answer(tools_config("hermes"), "<tool_call>{\"arguments\": {\"x\": [1, 2]}, \"name\": \"f\"}</tool_call>",
                Answer{"", "", {{"f", R"({"x": [1, 2]})"}}});
  expect_answer(tools_config("hermes"), "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>",
                Answer{"", "", {{"f", R"({"x": 1})"}}});
}

TEST(HermesToolParser, NoArgumentsIsEmptyObject) {
  expect_answer(tools_config("hermes"), "<tool_call>{\"name\": \"now\"}</tool_call>", Answer{"", "", {{"now", "{}"}}});
}

TEST(HermesToolParser, PlainAnswersComeBackByteForByte) {
  for (std::string text : {"Hello, world!\n", "a < b and <tool", "  \n", "x <tool_call", "<tool_cal", "{\"name\": 1}"}) {
    expect_answer(tools_config("hermes"), text, Answer{text, "", {}});
  }
}

TEST(HermesToolParser, NotACallIsContent) {
  expect_answer(tools_config("hermes"), "<tool_call>oops</tool_call> done",
                Answer{"<tool_call>oops</tool_call> done", "", {}});
  expect_answer(tools_config("hermes"), "<tool_call>{\"x\": 1}</tool_call>", Answer{"<tool_call>{\"x\": 1}</tool_call>", "", {}});
}

TEST(HermesToolParser, CutBeforeTheNameIsContent) {
  expect_answer(tools_config("hermes"), "Sure <tool_call>\n{\"na", Answer{"Sure <tool_call>\n{\"na", "", {}});
}

TEST(HermesToolParser, CutAfterTheNameKeepsTheCall) {
  expect_answer(tools_config("hermes"), "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"b",
                Answer{"", "", {{"f", R"({"a": "b)"}}});
}

TEST(HermesToolParser, TextAfterTheCallsIsContent) {
  expect_answer(tools_config("hermes"), "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n\nDone.\n",
                Answer{"Done.\n", "", {{"f", "{}"}}});
}

TEST(HermesToolParser, StreamsArgumentsAsTheyGrow) {
  ChatOutput output(tools_config("hermes"), [] { return std::string("call_1"); });
  auto pieces = output.push("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Pa", {});
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].kind, ChatPiece::Kind::kToolCallStart);
  EXPECT_EQ(pieces[0].text, "f");
  EXPECT_EQ(pieces[0].tool_id, "call_1");
  EXPECT_EQ(pieces[1].kind, ChatPiece::Kind::kToolCallArguments);
  EXPECT_EQ(pieces[1].text, "{\"city\": \"Pa");
  pieces = output.push("ris\"}}\n</tool_call>", {});
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].text, "ris\"}");
  EXPECT_TRUE(output.finish().empty());
  EXPECT_EQ(output.finish_reason("stop"), "tool_calls");
  EXPECT_EQ(output.finish_reason("length"), "length");
}

// ---- Llama 3.1 / 3.2 JSON ----

TEST(Llama3JsonToolParser, OneCallWithAndWithoutTag) {
  const Answer expected{"", "", {{"get_weather", R"({"city": "Paris"})"}}};
  expect_answer(tools_config("llama3_json"), R"({"name": "get_weather", "parameters": {"city": "Paris"}})", expected);
  expect_answer(tools_config("llama3_json"), "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                expected);
  expect_answer(tools_config("llama3_json"), "\n {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", expected);
}

TEST(Llama3JsonToolParser, SeveralCallsSeparatedBySemicolons) {
  expect_answer(tools_config("llama3_json"),
                R"({"name": "a", "parameters": {"q": "x; y"}}; {"name": "b", "parameters": {}})",
                Answer{"", "", {{"a", R"({"q": "x; y"})"}, {"b", "{}"}}});
}

TEST(Llama3JsonToolParser, JsonThatIsNoCallIsContent) {
  for (std::string text : {R"({"answer": 42})", R"(The call would be {"name": "f", "parameters": {}})",
                           "<|python_tag|>print(1)", "{\"name\": 7, \"parameters\": {}}", "<|python"}) {
    expect_answer(tools_config("llama3_json"), text, Answer{text, "", {}});
  }
}

TEST(Llama3JsonToolParser, TextAfterTheCallIsContent) {
  expect_answer(tools_config("llama3_json"), R"({"name": "f", "parameters": {"a": [1]}} and then some)",
                Answer{"and then some", "", {{"f", R"({"a": [1]})"}}});
}

TEST(Llama3JsonToolParser, CutShortKeepsTheCall) {
  expect_answer(tools_config("llama3_json"), R"({"name": "f")", Answer{"", "", {{"f", "{}"}}});
  expect_answer(tools_config("llama3_json"), R"({"name": "f", "parameters": {"a": "b)",
                Answer{"", "", {{"f", R"({"a": "b)"}}});
}

// ---- Mistral ----

TEST(MistralToolParser, ArrayOfCalls) {
  expect_answer(tools_config("mistral"),
                R"([TOOL_CALLS][{"name": "a", "arguments": {"x": "[1]"}}, {"name": "b", "arguments": {}}])",
                Answer{"", "", {{"a", R"({"x": "[1]"})"}, {"b", "{}"}}});
}

TEST(MistralToolParser, NamedCallsOfTheV11Tokenizer) {
  expect_answer(tools_config("mistral"), "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
                Answer{"Checking.", "", {{"get_weather", R"({"city": "Paris"})"}}});
  expect_answer(tools_config("mistral"), "[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[CALL_ID]abc123[ARGS]{\"y\": [1, 2]}",
                Answer{"", "", {{"a", "{}"}, {"b", R"({"y": [1, 2]})"}}});
}

TEST(MistralToolParser, NoCallIsContent) {
  for (std::string text : {"[TOOL_CALLS] nonsense here", R"([TOOL_CALLS][{"foo": 1}])", "[TOOL_CALL", "[TOOL_CALLS]"}) {
    expect_answer(tools_config("mistral"), text, Answer{text, "", {}});
  }
}

TEST(MistralToolParser, CutShortKeepsTheCall) {
  expect_answer(tools_config("mistral"), R"([TOOL_CALLS][{"name": "a", "arguments": {"x": 1)",
                Answer{"", "", {{"a", R"({"x": 1)"}}});
}

// ---- DeepSeek-V3 / R1 / V3.1 ----

const std::string kDsCall = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>";

TEST(DeepseekV3ToolParser, TheTemplatesFormat) {
  const std::string text = "I will look.<｜tool▁calls▁begin｜>" + kDsCall + "get_weather\n```json\n{\"city\": \"Paris\"}\n```" +
                           "<｜tool▁call▁end｜>\n" + kDsCall + "get_time\n```json\n{}\n```<｜tool▁call▁end｜>" +
                           "<｜tool▁calls▁end｜>";
  expect_answer(tools_config("deepseek_v3"), text,
                Answer{"I will look.", "", {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}}});
}

TEST(DeepseekV3ToolParser, TheV31Format) {
  expect_answer(tools_config("deepseek_v31"),
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"東京\"}"
                "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                Answer{"", "", {{"get_weather", R"({"city": "東京"})"}}});
}

TEST(DeepseekV3ToolParser, NoCallIsContent) {
  for (std::string text : {std::string("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>func"), std::string("<｜tool▁calls▁begin｜>"),
                           std::string("a <｜tool▁calls▁begin｜> b"), std::string("<｜tool▁calls")}) {
    expect_answer(tools_config("deepseek_v3"), text, Answer{text, "", {}});
  }
}

TEST(DeepseekV3ToolParser, TextAfterTheBlockIsContent) {
  expect_answer(tools_config("deepseek_v3"),
                "<｜tool▁calls▁begin｜>" + kDsCall + "f\n```json\n{\"a\": \"}\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>\nDone",
                Answer{"Done", "", {{"f", R"({"a": "}"})"}}});
}

TEST(DeepseekV3ToolParser, CutShortKeepsTheCall) {
  expect_answer(tools_config("deepseek_v3"), "<｜tool▁calls▁begin｜>" + kDsCall + "f\n```json\n{\"a\": 1",
                Answer{"", "", {{"f", R"({"a": 1)"}}});
}

// ---- GLM-4.5 / 4.7 / 5 ----

nlohmann::ordered_json weather_tools() {
  return nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters":
      {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
       "zip": {"type": ["string", "null"]}}}}}])");
}

TEST(Glm45ToolParser, Glm45FormatWithSchemaTypes) {
  expect_answer(tools_config("glm45", weather_tools()),
                "Let me see.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
                "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
                Answer{"Let me see.", "", {{"get_weather", R"({"city": "Paris", "days": 3})"}}});
}

TEST(Glm45ToolParser, Glm47FormatStringsStayStrings) {
  expect_answer(tools_config("glm47", weather_tools()),
                "<tool_call>get_weather<arg_key>city</arg_key><arg_value>123</arg_value>"
                "<arg_key>zip</arg_key><arg_value>75001</arg_value></tool_call>"
                "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Zürich \"old town\"</arg_value></tool_call>",
                Answer{"", "", {{"get_weather", R"({"city": "123", "zip": "75001"})"},
                                {"get_weather", R"({"city": "Zürich \"old town\""})"}}});
}

TEST(Glm45ToolParser, WithoutSchemaValuesAreJsonWhenTheyParse) {
  expect_answer(tools_config("glm45"),
                "<tool_call>f\n<arg_key>obj</arg_key>\n<arg_value>{\"a\": [1, 2]}</arg_value>\n"
                "<arg_key>text</arg_key>\n<arg_value>hello world</arg_value>\n</tool_call>",
                Answer{"", "", {{"f", R"({"obj": {"a": [1, 2]}, "text": "hello world"})"}}});
}

TEST(Glm45ToolParser, NoArgumentsAndNotACall) {
  expect_answer(tools_config("glm45"), "<tool_call>list_files</tool_call>", Answer{"", "", {{"list_files", "{}"}}});
  expect_answer(tools_config("glm45"), "<tool_call></tool_call>", Answer{"<tool_call></tool_call>", "", {}});
  expect_answer(tools_config("glm45"), "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1",
                Answer{"", "", {{"f", "{}"}}});  // cut short inside the only value: no complete pair
}

// ---- Qwen3-Coder, Qwen3.5 (XML-like tags, raw values) ----

nlohmann::ordered_json coder_tools() {
  return nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "write_file", "parameters":
      {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"},
       "mode": {"type": ["integer", "null"]}, "append": {"type": "boolean"}, "tags": {"type": "array"},
       "meta": {"type": "object"}, "zip": {"type": ["string", "null"]}}}}}])");
}

TEST(Qwen3CoderToolParser, OneCallWithSchemaTypes) {
  expect_answer(tools_config("qwen3_coder", coder_tools()),
                "I'll write it.\n<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/a.py\n</parameter>\n"
                "<parameter=mode>\n420\n</parameter>\n<parameter=append>\nFalse\n</parameter>\n"
                "<parameter=zip>\n75001\n</parameter>\n</function>\n</tool_call>",
                Answer{"I'll write it.", "", {{"write_file",
                        R"({"path": "src/a.py", "mode": 420, "append": false, "zip": "75001"})"}}});
}

TEST(Qwen3CoderToolParser, StringValuesAreRawTextWithTagsAndNewlinesInside) {
  // Code with '<', a '</param' that closes nothing, blank lines; one newline on each side is the format's.
  const std::string code = "if (a < b) {\n  s = \"</param\";\n}\n\n";
  expect_answer(tools_config("qwen3_coder", coder_tools()),
                "<tool_call>\n<function=write_file>\n<parameter=content>\n" + code +
                    "\n</parameter>\n<parameter=path>\nZürich 東京.txt\n</parameter>\n</function>\n</tool_call>",
                Answer{"", "", {{"write_file", R"({"content": "if (a < b) {\n  s = \"</param\";\n}\n\n", )"
                                               R"("path": "Zürich 東京.txt"})"}}});
  // A </function> inside a value its closing tag follows is the value's.
  expect_answer(tools_config("qwen3_coder", coder_tools()),
                "<tool_call>\n<function=write_file>\n<parameter=content>\n<function>x</function>\n</parameter>\n"
                "</function>\n</tool_call>",
                Answer{"", "", {{"write_file", R"({"content": "<function>x</function>"})"}}});
}

TEST(Qwen3CoderToolParser, ParallelCallsAndPythonLiterals) {
  expect_answer(tools_config("qwen3_coder", coder_tools()),
                "<tool_call>\n<function=write_file>\n<parameter=tags>\n['a', \"b\", 3]\n</parameter>\n"
                "<parameter=meta>\n{'k': {'on': True, 'off': None}, 'n': -1.5e3}\n</parameter>\n</function>\n</tool_call>\n"
                "<tool_call>\n<function=now>\n</function>\n</tool_call>",
                Answer{"", "", {{"write_file", R"({"tags": ["a", "b", 3], "meta": {"k": {"on": true, "off": null}, "n": -1.5e3}})"},
                                {"now", "{}"}}});
}

TEST(Qwen3CoderToolParser, WithoutSchemaValuesAreJsonWhenTheyRead) {
  expect_answer(tools_config("qwen3_coder"),
                "<tool_call>\n<function=f>\n<parameter=n>\n7\n</parameter>\n<parameter=flag>\nTrue\n</parameter>\n"
                "<parameter=obj>\n{\"a\": [1, 2]}\n</parameter>\n<parameter=text>\nhello world\n</parameter>\n"
                "</function>\n</tool_call>",
                Answer{"", "", {{"f", R"({"n": 7, "flag": true, "obj": {"a": [1, 2]}, "text": "hello world"})"}}});
}

TEST(Qwen3CoderToolParser, MalformedAndCutShort) {
  const auto config = tools_config("qwen3_coder", coder_tools());
  // No function tag: content, verbatim.
  expect_answer(config, "<tool_call>oops</tool_call> done", Answer{"<tool_call>oops</tool_call> done", "", {}});
  // Cut before the name is complete: content.
  expect_answer(config, "Sure <tool_call>\n<function=wri", Answer{"Sure <tool_call>\n<function=wri", "", {}});
  // Cut inside a string value: the call keeps what it has.
  expect_answer(config, "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/ma",
                Answer{"", "", {{"write_file", R"({"path": "src/ma"})"}}});
  // A parameter whose closing tag the model forgot ends at </function>.
  expect_answer(config, "<tool_call>\n<function=write_file>\n<parameter=path>\na.txt\n</function>\n</tool_call>",
                Answer{"", "", {{"write_file", R"({"path": "a.txt"})"}}});
  for (std::string text : {"a <tool_call", "x <function=f>", "<parameter=a>\n1\n</parameter>", "  \n"}) {
    expect_answer(config, text, Answer{text, "", {}});
  }
}

TEST(Qwen3CoderToolParser, StringArgumentsStreamAsTheyArrive) {
  ChatOutput output(tools_config("qwen3_coder", coder_tools()), [] { return std::string("call_1"); });
  auto pieces = output.push("<tool_call>\n<function=write_file>\n<parameter=content>\nline 1\nline", {});
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].text, "write_file");
  EXPECT_EQ(pieces[1].text, R"({"content": "line 1\nline)");
  pieces = output.push(" 2\n</para", {});  // the newline and a partial tag are held back
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].text, " 2");
  pieces = output.push("meter>\n<parameter=mode>\n6", {});  // a number waits for its tag
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].text, "\"");
  pieces = output.push("44\n</parameter>\n</function>\n</tool_call>", {});
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].text, R"(, "mode": 644})");
}

TEST(PythonLiteral, ReadsWhatJinjasStringFilterWrites) {
  EXPECT_EQ(python_literal_as_json("{'a': [1, True, None], \"b\": (2, 3.5,), 'c': 'it\\'s\\n'}"),
            R"({"a": [1, true, null], "b": [2, 3.5], "c": "it's\n"})");
  EXPECT_EQ(python_literal_as_json(" [ ] "), "[]");
  EXPECT_EQ(python_literal_as_json("'\\u00e9\\x41'"), R"("éA")");
  for (const char* no : {"{1: 2}", "{'a' 1}", "[1, 2", "set()", "TrueX", "'open", "1 + 2", "", "{'a': nan}"}) {
    EXPECT_EQ(python_literal_as_json(no), std::nullopt) << no;
  }
  std::string deep(70, '[');
  deep += std::string(70, ']');
  EXPECT_EQ(python_literal_as_json(deep), std::nullopt) << "nesting past 64";
  // Any text: no crash, and what it reads is JSON.
  const std::string alphabet = "{}[](),:'\"\\ TrueFalsNn0123456789.-+eExu\xC3\xA9";
  std::mt19937 gen(11);
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    const int length = std::uniform_int_distribution<int>(0, 16)(gen);
    for (int c = 0; c < length; ++c) text += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(gen)];
    if (const std::optional<std::string> json = python_literal_as_json(text)) {
      EXPECT_TRUE(nlohmann::json::accept(*json)) << ::testing::PrintToString(text) << " -> " << *json;
    }
  }
}

// ---- every format: random answers, random pieces ----

// Answers glued from each format's own fragments (markers, names, values, stray '<', cut UTF-8
// characters) parse the same whole and in random pieces: the contract at the top of
// tool_parser.h, on texts nobody wrote by hand.
TEST(ToolParserChunking, RandomAnswersParseAlikeInAnyPieces) {
  const std::vector<std::string> common = {"x", " ", "\n", "<", ">", "{", "}", "\"", "é", "\xE6\x9D", "\xB1", "1", "True"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> formats = {
      {"hermes", {"<tool_call>", "</tool_call>", "{\"name\": \"f\"", ", \"arguments\": ", "{\"a\": 1}", "}"}},
      {"llama3_json", {"<|python_tag|>", "{\"name\": \"f\", \"parameters\": ", "{\"a\": [1]}", "}", "; "}},
      {"mistral", {"[TOOL_CALLS]", "[", "]", "{\"name\": \"f\", \"arguments\": {}}", "f[ARGS]", ", "}},
      {"deepseek_v3", {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "function<｜tool▁sep｜>f", "\n```json\n",
                       "{\"a\": 1}", "\n```", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"}},
      {"glm45", {"<tool_call>", "f", "<arg_key>", "city", "</arg_key>", "<arg_value>", "Paris", "</arg_value>",
                 "</tool_call>"}},
      {"qwen3_coder", {"<tool_call>", "<function=write_file>", "<function=f>", "<parameter=content>", "<parameter=mode>",
                       "<parameter=meta>", "</parameter>", "</function>", "</tool_call>", "{'k': [None]}", "</para",
                       "</func"}},
  };
  std::mt19937 gen(20261205);
  // Behind a reasoning parser too, its markers among the parts.
  auto check = [&](const std::string& format, const std::vector<std::string>& fragments, bool reasoning) {
    ChatOutputConfig config = tools_config(format, coder_tools());
    std::vector<std::string> parts = common;
    parts.insert(parts.end(), fragments.begin(), fragments.end());
    if (reasoning) {
      config.reasoning_parser = "qwen3";
      parts.insert(parts.end(), {"<think>", "</think>", "</thi"});
    }
    std::uniform_int_distribution<size_t> part(0, parts.size() - 1);
    for (int answer = 0; answer < 2000; ++answer) {
      std::string text;
      const int length = std::uniform_int_distribution<int>(1, 24)(gen);
      for (int i = 0; i < length; ++i) text += parts[part(gen)];
      const testing::Answer whole = testing::run_chunks(config, {text});
      for (int chunking = 0; chunking < 3; ++chunking) {
        std::vector<std::string> pieces;
        for (size_t at = 0; at < text.size();) {
          const size_t n = std::uniform_int_distribution<size_t>(1, 6)(gen);
          pieces.push_back(text.substr(at, n));
          at += n;
        }
        EXPECT_EQ(testing::run_chunks(config, pieces), whole) << format << ": " << ::testing::PrintToString(text);
      }
      if (whole.calls.empty() && !reasoning) {
        EXPECT_EQ(whole.content, text) << format << ": an answer without calls comes back byte for byte";
      }
    }
  };
  for (const auto& [format, fragments] : formats) {
    check(format, fragments, false);
    check(format, fragments, true);
  }
}

// ---- the table ----

TEST(ToolParserTable, NamesAndTemplates) {
  EXPECT_EQ(canonical_tool_parser("glm47"), "glm45");
  EXPECT_EQ(canonical_tool_parser("deepseek_v31"), "deepseek_v3");
  EXPECT_EQ(canonical_tool_parser("nonsense"), "");
  EXPECT_EQ(tool_parser_for_template("{{ '<tool_call>\\n{\"name\": ' }}"), "hermes");
  EXPECT_EQ(tool_parser_for_template("{{ '<tool_call>' + name + '<arg_key>' }}"), "glm45");
  EXPECT_EQ(tool_parser_for_template("{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}"
                                     "{{- '<parameter=' + args_name + '>\\n' }}"),
            "qwen3_coder");
  EXPECT_EQ(canonical_tool_parser("qwen3_xml"), "qwen3_coder");
  EXPECT_EQ(tool_parser_for_template("{{ '[TOOL_CALLS]' }}"), "mistral");
  EXPECT_EQ(tool_parser_for_template("{{- '<|python_tag|>' }}"), "llama3_json");
  EXPECT_EQ(tool_parser_for_template("{{ '<|start_header_id|>' }}"), "");
  for (const std::string& name : tool_parser_names()) EXPECT_NE(make_tool_parser(name, nullptr), nullptr) << name;
}

}  // namespace
}  // namespace tachyon::server
