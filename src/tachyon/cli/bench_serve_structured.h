// The constraint `bench serve` puts on every request, so the GPU machine can measure what
// structured outputs and forced tool calls cost per step, end to end: response_format json_object
// or json_schema (a schema file), or tools (a file holding OpenAI's tools array) with tool_choice.
// Combinations the server refuses (a forced call beside response_format, tools on
// /v1/completions, --ignore-eos with a constraint: the grammar decides where an output ends) are
// refused before the first request, naming the options. Tested in tests/server/test_bench_serve.cpp.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tachyon::cli {

struct StructuredBenchOptions {
  std::string response_format;   // --response-format: "", json_object, json_schema
  std::string json_schema_file;  // --json-schema: the schema of json_schema
  std::string tools_file;        // --tools: [{"type": "function", "function": {...}}, ...]
  std::string tool_choice;       // --tool-choice: "", auto, none, required, or a function's name
};

// The fields every request body gets ({} when none is asked). Throws tachyon::Error naming the
// option on an unreadable file, a bad value or a combination the server refuses.
nlohmann::ordered_json structured_request_fields(const StructuredBenchOptions& options, bool chat_endpoint,
                                                 bool ignore_eos);

}  // namespace tachyon::cli
