// OpenAI request parsing: every bad input -> the right status, param and a message naming the
// fix; every good shape -> the expected native struct. Runs in milliseconds.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tachyon/server/chat_constraint.h"
#include "tachyon/server/openai_protocol.h"
#include "tachyon/server/openai_request_fields.h"

namespace tachyon::server {
namespace {

ServerLimits limits() {
  ServerLimits l;
  l.model_name = "tiny";
  l.max_model_len = 100;
  l.vocab_size = 1000;
  l.max_n = 4;
  l.max_stop = 2;
  l.max_logprobs = 5;
  return l;
}

ApiError completion_error(const std::string& body) {
  try {
    parse_completion_request(body, limits());
  } catch (const ApiException& e) {
    return e.error();
  }
  ADD_FAILURE() << "no error for " << body.substr(0, 200);
  return {};
}

// As the chat route does it: the request parsed, then its constraint compiled
// (server/chat_constraint.h: the request parser itself compiles nothing).
ApiError chat_error(const std::string& body) {
  try {
    ChatRequest request = parse_chat_request(body, limits());
    apply_chat_constraint(request, {}, "", limits(), request.params);
  } catch (const ApiException& e) {
    return e.error();
  }
  ADD_FAILURE() << "no error for " << body.substr(0, 200);
  return {};
}

// Expects a 400 on `param` whose message contains `fragment`, from both endpoints when the field
// is shared (the chat body gets a valid messages list instead of the prompt).
void expect_400(const std::string& fields, const std::string& param, const std::string& fragment) {
  ApiError c = completion_error(R"({"prompt":"hi",)" + fields + "}");
  EXPECT_EQ(c.status, 400) << fields;
  EXPECT_EQ(c.type, "invalid_request_error") << fields;
  EXPECT_EQ(c.param, param) << fields;
  EXPECT_NE(c.message.find(fragment), std::string::npos) << fields << " -> " << c.message;
  ApiError h = chat_error(R"({"messages":[{"role":"user","content":"hi"}],)" + fields + "}");
  EXPECT_EQ(h.status, 400) << fields;
  EXPECT_EQ(h.param, param) << fields;
  EXPECT_NE(h.message.find(fragment), std::string::npos) << fields << " -> " << h.message;
}

TEST(OpenaiRequest, InvalidBodies) {
  for (const std::string& body : {std::string("{"), std::string(""), std::string("{\"prompt\": hi}")}) {
    ApiError e = completion_error(body);
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(e.message.find("not valid JSON"), std::string::npos) << e.message;
  }
  ApiError array = completion_error("[1,2]");
  EXPECT_EQ(array.status, 400);
  EXPECT_NE(array.message.find("must be a JSON object, but got an array"), std::string::npos);
  ApiError utf8 = chat_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\xfe\"}]}");
  EXPECT_EQ(utf8.status, 400);
  EXPECT_NE(utf8.message.find("UTF-8"), std::string::npos) << utf8.message;
  // The error body stays valid JSON even though the parser quoted the bad bytes.
  EXPECT_TRUE(nlohmann::json::accept(error_body(utf8)));
  // Deep nesting is refused cleanly, not by a crash.
  std::string deep = R"({"prompt":"hi","x":)" + std::string(300000, '[') + std::string(300000, ']') + "}";
  EXPECT_EQ(completion_error(deep).status, 400);
}

// `levels` nested arrays, innermost empty.
std::string nested(size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); }

TEST(OpenaiRequest, JsonDepthLimit) {
  // The body object is level 1, so 63 arrays inside it make 64 levels.
  EXPECT_NO_THROW(parse_completion_request(R"({"prompt":"hi","x":)" + nested(63) + "}", limits()));
  ApiError e = completion_error(R"({"prompt":"hi","x":)" + nested(64) + "}");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(e.param, "");
  EXPECT_EQ(e.message, "The request body is nested more than 64 levels deep; at most 64 levels are allowed.");
  // Brackets inside strings, escaped quotes included, are text, not nesting.
  const std::string brackets = std::string(200, '[') + "\\\"" + std::string(200, '{');
  EXPECT_NO_THROW(parse_completion_request(R"({"prompt":")" + brackets + R"("})", limits()));
  ServerLimits shallow = limits();
  shallow.max_json_depth = 2;
  EXPECT_NO_THROW(parse_completion_request(R"({"prompt":["a"]})", shallow));
  EXPECT_THROW(parse_completion_request(R"({"prompt":[[1]]})", shallow), ApiException);
}

TEST(OpenaiRequest, VeryDeepChatBodiesAreRefusedWithoutCrashing) {
  // 100,000 levels overflowed the stack while the request was copied and turned into template
  // values; running here, in the test process, a crash fails the test.
  const std::string deep = nested(100000);
  const std::vector<std::string> bodies = {
      R"({"messages":[{"role":"user","content":)" + deep + "}]}",
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"a","x":)" + deep + "}]}]}",
      R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f",)"
      R"("parameters":{"type":"object","properties":{"a":)" + deep + "}}}}]}",
      R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":)" + deep + "}}]}]}",
      R"({"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"x":)" + deep + "}}",
  };
  for (const std::string& body : bodies) {
    ApiError e = chat_error(body);
    EXPECT_EQ(e.status, 400) << body.substr(0, 120);
    EXPECT_NE(e.message.find("at most 64 levels"), std::string::npos) << e.message;
  }
}

TEST(OpenaiRequest, RequestSizeLimits) {
  ServerLimits l = limits();
  l.max_stop = 16;
  l.max_n = 1000;  // a config above the ceiling does not lift it
  l.max_prompts = 3;
  l.max_sequences_per_request = 6;
  auto error = [&l](const std::string& body) {
    try {
      parse_completion_request(body, l);
    } catch (const ApiException& e) {
      return e.error();
    }
    ADD_FAILURE() << "no error for " << body.substr(0, 200);
    return ApiError{};
  };
  // Stop strings: at most 1024 bytes each by default.
  EXPECT_EQ(ServerLimits{}.max_stop_length, 1024);
  EXPECT_NO_THROW(parse_completion_request(R"({"prompt":"hi","stop":")" + std::string(1024, 'x') + R"("})", l));
  ApiError e = error(R"({"prompt":"hi","stop":["a",")" + std::string(1025, 'x') + R"("]})");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "stop");
  EXPECT_EQ(e.message, "'stop[1]' is 1025 bytes long; a stop string may be at most 1024 bytes.");
  // Prompts per request: a list of strings or of token-id lists.
  EXPECT_EQ(ServerLimits{}.max_prompts, 2048);
  EXPECT_NO_THROW(parse_completion_request(R"({"prompt":["a","b","c"]})", l));
  for (const std::string& prompt : {std::string(R"(["a","b","c","d"])"), std::string("[[1],[2],[3],[4]]")}) {
    e = error(R"({"prompt":)" + prompt + "}");
    EXPECT_EQ(e.param, "prompt") << prompt;
    EXPECT_EQ(e.message, "'prompt' holds 4 prompts; at most 3 are allowed in one request.") << prompt;
  }
  // One prompt given as token ids is one prompt, whatever its length.
  EXPECT_NO_THROW(parse_completion_request(R"({"prompt":[1,2,3,4,5]})", l));
  // n: never above 128, whatever max_n says.
  EXPECT_EQ(kMaxNCeiling, 128);
  e = error(R"({"prompt":"hi","n":129})");
  EXPECT_EQ(e.param, "n");
  EXPECT_EQ(e.message, "'n' must be between 1 and 128, but got 129.");
  // Sequences: prompts x n.
  EXPECT_EQ(ServerLimits{}.max_sequences_per_request, 256);
  EXPECT_NO_THROW(parse_completion_request(R"({"prompt":["a","b","c"],"n":2})", l));
  e = error(R"({"prompt":["a","b","c"],"n":3})");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "n");
  EXPECT_EQ(e.message, "This request would start 9 sequences; the limit is 6 (prompts x n).");
  e = error(R"({"prompt":"hi","n":7})");
  EXPECT_EQ(e.message, "This request would start 7 sequences; the limit is 6 (prompts x n).");
  try {
    parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}],"n":7})", l);
    ADD_FAILURE() << "chat n above max_sequences_per_request";
  } catch (const ApiException& chat) {
    EXPECT_EQ(chat.error().param, "n");
  }
  // With the defaults, 16 prompts x n = 16 is the largest square that fits.
  auto prompts = [](int count) {
    std::string list = "[\"a\"";
    for (int i = 1; i < count; ++i) list += ",\"a\"";
    return list + "]";
  };
  EXPECT_NO_THROW(parse_completion_request(R"({"n":16,"prompt":)" + prompts(16) + "}", ServerLimits{}));
  EXPECT_THROW(parse_completion_request(R"({"n":16,"prompt":)" + prompts(17) + "}", ServerLimits{}), ApiException);
}

TEST(OpenaiRequest, SeedMustFitInt64) {
  EXPECT_EQ(parse_completion_request(R"({"prompt":"hi","seed":9223372036854775807})", limits()).params.seed,
            9223372036854775807ULL);
  EXPECT_EQ(parse_completion_request(R"({"prompt":"hi","seed":-9223372036854775808})", limits()).params.seed,
            9223372036854775808ULL);  // negative seeds are used bit for bit
  EXPECT_EQ(parse_completion_request(R"({"prompt":"hi","seed":-1})", limits()).params.seed, UINT64_MAX);
  EXPECT_EQ(parse_completion_request(R"({"prompt":"hi","seed":1e18})", limits()).params.seed, 1000000000000000000ULL);
  const std::string range = "'seed' must be between -9223372036854775808 and 9223372036854775807, but got ";
  for (const char* seed : {"18446744073709551615", "9223372036854775808", "-9223372036854775809", "1e30", "-1e30",
                           "9.3e18", "9223372036854775807.0"}) {
    ApiError e = completion_error(R"({"prompt":"hi","seed":)" + std::string(seed) + "}");
    EXPECT_EQ(e.status, 400) << seed;
    EXPECT_EQ(e.param, "seed") << seed;
    EXPECT_EQ(e.message.rfind(range, 0), 0u) << seed << " -> " << e.message;
  }
  expect_400(R"("seed":1.5)", "seed", "expected an integer");
}

TEST(OpenaiRequest, WrongTypeOfEveryField) {
  for (const char* field :
       {"temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"}) {
    expect_400("\"" + std::string(field) + "\":\"1\"", field, "expected a number, but got a string");
  }
  for (const char* field : {"max_tokens", "top_k", "seed", "n", "best_of", "min_tokens", "priority"}) {
    expect_400("\"" + std::string(field) + "\":[1]", field, "expected an integer, but got an array");
  }
  for (const char* field : {"ignore_eos", "include_stop_str_in_output", "stream"}) {
    expect_400("\"" + std::string(field) + "\":\"true\"", field, "expected a boolean, but got a string");
  }
  expect_400(R"("stop_token_ids":["7"])", "stop_token_ids", "expected an integer, but got a string");
  expect_400(R"("model":{})", "model", "expected a string, but got an object");
  // A number JSON cannot hold in a double is a 400 too (the parser reports it as out of range).
  ApiError e = completion_error(R"({"prompt":"hi","temperature":1e400})");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("not valid JSON"), std::string::npos) << e.message;
  expect_400(R"("temperature":1e300)", "temperature", "'temperature' must be >= 0 as a 32-bit float");
}

// sampling_field_specs() (what `tachyon generate` offers) and the parser name the same fields:
// each field of OpenAI's and vLLM's completions requests, given an object where it wants a
// number, a boolean, a string or an array, is refused (naming it) exactly when it is listed. The
// request's own fields are left out: the prompt and its framing, fields refused unless they change
// nothing, and the scheduler's priority. A field added to one side only fails here.
TEST(OpenaiRequest, SamplingFieldSpecsAreTheFieldsTheParserReads) {
  std::set<std::string> listed;
  for (const fields::FieldSpec& spec : fields::sampling_field_specs(limits())) {
    EXPECT_TRUE(listed.insert(spec.name).second) << spec.name << " is listed twice";
    EXPECT_FALSE(spec.help.empty()) << spec.name;
    EXPECT_FALSE(spec.default_text.empty()) << spec.name;
  }
  const std::set<std::string> request_fields = {"model",   "prompt",     "suffix",          "echo",    "stream",
                                                "stream_options", "best_of", "logit_bias", "response_format",
                                                "priority", "guided_json", "guided_regex", "guided_choice",
                                                "guided_grammar", "structured_outputs", "user"};
  const std::set<std::string> api_fields = {
      // OpenAI
      "model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
      "presence_penalty", "seed", "stop", "stream", "stream_options", "suffix", "temperature", "top_p", "user",
      // vLLM's extras
      "use_beam_search", "top_k", "min_p", "repetition_penalty", "length_penalty", "stop_token_ids",
      "include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens",
      "spaces_between_special_tokens", "truncate_prompt_tokens", "allowed_token_ids", "prompt_logprobs",
      "add_special_tokens", "response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
      "structured_outputs", "priority", "request_id", "logits_processors", "return_tokens_as_token_ids",
      "bad_words", "return_token_ids", "cache_salt", "kv_transfer_params", "vllm_xargs", "max_completion_tokens",
      "top_logprobs"};
  for (const std::string& name : listed) {
    EXPECT_TRUE(api_fields.count(name)) << name << " is listed but is no field of the OpenAI or vLLM API";
  }
  for (const std::string& name : api_fields) {
    if (request_fields.count(name)) continue;
    bool refused = false;
    try {
      parse_completion_request(R"({"prompt":"hi",")" + name + R"(":{}})", limits());
    } catch (const ApiException& e) {
      refused = true;
      EXPECT_EQ(e.error().param, name) << e.error().message;
    }
    EXPECT_EQ(refused, listed.count(name) > 0)
        << name << (refused ? " is read by the parser but missing from sampling_field_specs()"
                            : " is listed in sampling_field_specs() but the parser ignores it");
  }
}

TEST(OpenaiRequest, ModelMustMatch) {
  ApiError e = completion_error(R"({"model":"other","prompt":"hi"})");
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(e.type, "NotFoundError");
  EXPECT_EQ(e.param, "model");
  EXPECT_NE(e.message.find("`other` does not exist"), std::string::npos);
  EXPECT_EQ(chat_error(R"({"model":"other","messages":[{"role":"user","content":"x"}]})").status, 404);
  EXPECT_NO_THROW(parse_completion_request(R"({"model":"tiny","prompt":"hi"})", limits()));
  EXPECT_NO_THROW(parse_completion_request(R"({"model":"","prompt":"hi"})", limits()));
  EXPECT_NO_THROW(parse_completion_request(R"({"model":null,"prompt":"hi"})", limits()));
  expect_400(R"("model":3)", "model", "expected a string, but got an integer");
}

TEST(OpenaiRequest, PromptShapes) {
  CompletionRequest r = parse_completion_request(R"({"prompt":"hello"})", limits());
  EXPECT_EQ(r.prompt_texts, std::vector<std::string>{"hello"});
  EXPECT_TRUE(r.prompt_ids.empty());
  r = parse_completion_request(R"({"prompt":["a","b"]})", limits());
  EXPECT_EQ(r.prompt_texts, (std::vector<std::string>{"a", "b"}));
  r = parse_completion_request(R"({"prompt":[1,2,999]})", limits());
  EXPECT_EQ(r.prompt_ids, (std::vector<std::vector<int32_t>>{{1, 2, 999}}));
  EXPECT_TRUE(r.prompt_texts.empty());
  r = parse_completion_request(R"({"prompt":[[1],[0,2]]})", limits());
  EXPECT_EQ(r.prompt_ids, (std::vector<std::vector<int32_t>>{{1}, {0, 2}}));
}

TEST(OpenaiRequest, BadPrompts) {
  struct Case {
    std::string body, param, fragment;
  };
  std::vector<Case> cases = {
      {R"({})", "prompt", "'prompt' is required"},
      {R"({"prompt":null})", "prompt", "'prompt' is required"},
      {R"({"prompt":""})", "prompt", "must not be empty"},
      {R"({"prompt":[]})", "prompt", "must not be empty"},
      {R"({"prompt":[[]]})", "prompt", "'prompt[0]' must not be empty"},
      {R"({"prompt":["a",""]})", "prompt", "'prompt[1]' must not be empty"},
      {R"({"prompt":3})", "prompt", "expected a string, a list of strings, token ids"},
      {R"({"prompt":{"a":1}})", "prompt", "but got an object"},
      {R"({"prompt":["a",1]})", "prompt", "only strings or only token-id lists"},
      {R"({"prompt":[1,"a"]})", "prompt", "must contain only integers, but got a string"},
      {R"({"prompt":[1,2.5]})", "prompt", "expected an integer, but got a number"},
      {R"({"prompt":[1000]})", "prompt", "between 0 and 999, but got 1000"},
      {R"({"prompt":[-1]})", "prompt", "between 0 and 999, but got -1"},
      {R"({"prompt":[[1],[5000]]})", "prompt[1]", "between 0 and 999"},
      {R"({"prompt":[true]})", "prompt", "only strings or only token-id lists, but got a boolean"},
      {R"({"prompt":"hi","suffix":"x"})", "suffix", "not supported"},
      {R"({"prompt":"hi","echo":"yes"})", "echo", "expected a boolean"},
      {R"({"prompt":"hi","echo":true,"logprobs":1})", "echo", "drop one of them"},
      {R"({"prompt":"hi","logprobs":6})", "logprobs", "between 0 and 5, but got 6"},
      {R"({"prompt":"hi","logprobs":-1})", "logprobs", "between 0 and 5"},
      {R"({"prompt":"hi","logprobs":true})", "logprobs", "expected an integer, but got a boolean"},
  };
  for (const Case& c : cases) {
    ApiError e = completion_error(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_NE(e.message.find(c.fragment), std::string::npos) << c.body << " -> " << e.message;
  }
}

TEST(OpenaiRequest, CompletionDefaults) {
  CompletionRequest r = parse_completion_request(R"({"prompt":"hi","unknown_field":{"x":[1]},"user":"u"})", limits());
  ASSERT_TRUE(r.max_tokens.has_value());
  EXPECT_EQ(*r.max_tokens, 16);
  EXPECT_EQ(r.params.max_tokens, 16);
  EXPECT_EQ(r.params.temperature, 1.0f);
  EXPECT_EQ(r.params.logprobs, -1);
  EXPECT_EQ(r.params.n, 1);
  EXPECT_FALSE(r.echo);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
}

TEST(OpenaiRequest, EveryCompletionField) {
  CompletionRequest r = parse_completion_request(R"({
    "model":"tiny","prompt":"hi","max_tokens":20.0,"temperature":0,"top_p":0.5,"top_k":-1,"min_p":0.1,
    "presence_penalty":-2,"frequency_penalty":1.5,"repetition_penalty":1.2,"seed":-1,"n":3,"best_of":3,
    "stop":"\n","stop_token_ids":[7,8],"ignore_eos":true,"min_tokens":2,"logprobs":5,
    "include_stop_str_in_output":true,"priority":-3,"echo":false,"stream":true,
    "stream_options":{"include_usage":true},"response_format":{"type":"text"},"logit_bias":{}})",
                                                 limits());
  EXPECT_EQ(*r.max_tokens, 20);
  EXPECT_EQ(r.params.max_tokens, 20);
  EXPECT_EQ(r.params.temperature, 0.0f);
  EXPECT_EQ(r.params.top_p, 0.5f);
  EXPECT_EQ(r.params.top_k, 0);
  EXPECT_EQ(r.params.min_p, 0.1f);
  EXPECT_EQ(r.params.presence_penalty, -2.0f);
  EXPECT_EQ(r.params.frequency_penalty, 1.5f);
  EXPECT_EQ(r.params.repetition_penalty, 1.2f);
  EXPECT_EQ(r.params.seed, UINT64_MAX);
  EXPECT_EQ(r.params.n, 3);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(r.params.stop_token_ids, (std::vector<int32_t>{7, 8}));
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_EQ(r.params.min_tokens, 2);
  EXPECT_EQ(r.params.logprobs, 5);
  EXPECT_TRUE(r.params.include_stop_str_in_output);
  EXPECT_EQ(r.params.priority, -3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  r = parse_completion_request(R"({"prompt":"hi","top_k":5,"seed":42,"stop":["a","b"],"logprobs":0})", limits());
  EXPECT_EQ(r.params.top_k, 5);
  EXPECT_EQ(r.params.seed, 42u);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.params.logprobs, 0);
  EXPECT_TRUE(parse_completion_request(R"({"prompt":"hi","echo":true})", limits()).echo);
  r = parse_completion_request(R"({"prompt":"hi","seed":-1,"stream":false,"stream_options":null})", limits());
  EXPECT_EQ(r.params.seed, UINT64_MAX);
  EXPECT_FALSE(r.include_usage);
}

TEST(OpenaiRequest, SharedFieldErrors) {
  expect_400(R"("max_tokens":0)", "max_tokens", "'max_tokens' must be >= 1, but got 0.");
  expect_400(R"("max_tokens":-5)", "max_tokens", "but got -5");
  expect_400(R"("max_tokens":"10")", "max_tokens", "expected an integer, but got a string");
  expect_400(R"("max_tokens":1.5)", "max_tokens", "expected an integer");
  expect_400(R"("max_tokens":1e12)", "max_tokens", "must be between 1 and 2147483647");
  expect_400(R"("temperature":-0.1)", "temperature", "'temperature' must be >= 0, but got -0.1");
  expect_400(R"("temperature":"hot")", "temperature", "expected a number, but got a string");
  expect_400(R"("top_p":0)", "top_p", "in (0, 1]");
  expect_400(R"("top_p":1.01)", "top_p", "in (0, 1]");
  expect_400(R"("top_k":-2)", "top_k", "'top_k' must be >= -1 (-1 or 0 disables it), but got -2.");
  expect_400(R"("top_k":0.5)", "top_k", "expected an integer");
  expect_400(R"("min_p":1.5)", "min_p", "in [0, 1]");
  expect_400(R"("presence_penalty":2.5)", "presence_penalty", "in [-2, 2]");
  expect_400(R"("frequency_penalty":-3)", "frequency_penalty", "in [-2, 2]");
  expect_400(R"("repetition_penalty":0)", "repetition_penalty", "in [1e-6, 1e6]");
  // Past these bounds a logit it divides became +inf (uniform sampling) or one it multiplies -inf
  // (with a grammar allowing one token: none left, and the engine failed).
  expect_400(R"("repetition_penalty":1e-38)", "repetition_penalty", "in [1e-6, 1e6]");
  expect_400(R"("repetition_penalty":3e38)", "repetition_penalty", "in [1e-6, 1e6]");
  // A bound checked on the double alone let a value through that the float it becomes breaks.
  expect_400(R"("temperature":1e39)", "temperature", "'temperature' must be >= 0 as a 32-bit float, but 1e+39");
  expect_400(R"("seed":"1")", "seed", "expected an integer");
  expect_400(R"("seed":1.5)", "seed", "expected an integer");
  expect_400(R"("n":0)", "n", "'n' must be between 1 and 4, but got 0");
  expect_400(R"("n":5)", "n", "between 1 and 4");
  expect_400(R"("n":2,"best_of":3)", "best_of", "not supported");
  expect_400(R"("stop":["a","b","c"])", "stop", "at most 2 are allowed");
  expect_400(R"("stop":"")", "stop", "must not be empty");
  expect_400(R"("stop":5)", "stop", "expected a string or an array of strings");
  expect_400(R"("stop":["a",5])", "stop[1]", "expected a string, but got an integer");
  expect_400(R"("stop_token_ids":[1000])", "stop_token_ids", "between 0 and 999");
  expect_400(R"("stop_token_ids":5)", "stop_token_ids", "expected an array of integers");
  expect_400(R"("ignore_eos":1)", "ignore_eos", "expected a boolean, but got an integer");
  expect_400(R"("min_tokens":-1)", "min_tokens", ">= 0");
  expect_400(R"("max_tokens":4,"min_tokens":5)", "min_tokens", "min_tokens must be in [0, max_tokens]");
  expect_400(R"("include_stop_str_in_output":"no")", "include_stop_str_in_output", "expected a boolean");
  expect_400(R"("priority":"high")", "priority", "expected an integer");
  expect_400(R"("stream":"true")", "stream", "expected a boolean, but got a string");
  expect_400(R"("stream_options":{"include_usage":true})", "stream_options", "only allowed when 'stream' is true");
  expect_400(R"("stream":true,"stream_options":true)", "stream_options", "expected an object");
  expect_400(R"("stream":true,"stream_options":{"include_usage":1})", "stream_options.include_usage",
             "expected a boolean");
  expect_400(R"("response_format":{"type":"json_object"})", "response_format", "structured outputs are not available");
  expect_400(R"("response_format":{"type":"json_schema","json_schema":{}})", "response_format.json_schema.schema",
             "needs a 'schema'");
  expect_400(R"("response_format":{"type":"xml"})", "response_format", "'xml' is not supported");
  expect_400(R"("response_format":"text")", "response_format", "expected an object");
  expect_400(R"("response_format":{})", "response_format", "string 'type'");
  expect_400(R"("logit_bias":{"5":10})", "logit_bias", "not supported");
  expect_400(R"("logit_bias":[1])", "logit_bias", "expected an object");
}

TEST(OpenaiRequest, ChatMessages) {
  ChatRequest r = parse_chat_request(R"({"model":"tiny","messages":[
      {"role":"system","content":"be brief"},
      {"role":"developer","content":""},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"name":"bob"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
          "function":{"name":"f","arguments":"{\"x\":1}"}}]},
      {"role":"tool","content":"42","tool_call_id":"c1"},
      {"role":"assistant","content":"ok","reasoning_content":"hmm"}]})",
                                     limits());
  nlohmann::ordered_json expected = nlohmann::ordered_json::parse(R"([
      {"role":"system","content":"be brief"},
      {"role":"developer","content":""},
      {"role":"user","content":"a\nb","name":"bob"},
      {"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function",
          "function":{"name":"f","arguments":{"x":1}}}]},
      {"role":"tool","content":"42","tool_call_id":"c1"},
      {"role":"assistant","content":"ok","reasoning_content":"hmm"}])");
  EXPECT_EQ(r.messages.dump(), expected.dump());
  EXPECT_TRUE(r.tools.is_null());
  EXPECT_EQ(r.chat_template_kwargs.dump(), "{}");
  EXPECT_TRUE(r.add_generation_prompt);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.params.max_tokens, 100);  // max_model_len while unknown
  EXPECT_EQ(r.params.logprobs, -1);
  // An assistant turn with tool_calls may omit content; templates then see "" (vLLM does the same).
  r = parse_chat_request(R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f",
      "arguments":{"y":2}}}]}]})",
                         limits());
  EXPECT_EQ(r.messages[0]["content"].dump(), R"("")");
  EXPECT_EQ(r.messages[0]["tool_calls"][0]["function"]["arguments"].dump(), R"({"y":2})");
}

TEST(OpenaiRequest, BadChatMessages) {
  struct Case {
    std::string body, param, fragment;
  };
  std::vector<Case> cases = {
      {R"({})", "messages", "'messages' is required"},
      {R"({"messages":null})", "messages", "'messages' is required"},
      {R"({"messages":[]})", "messages", "at least one message"},
      {R"({"messages":"hi"})", "messages", "expected an array, but got a string"},
      {R"({"messages":["hi"]})", "messages[0]", "expected an object, but got a string"},
      {R"({"messages":[{"content":"hi"}]})", "messages[0].role", "'messages[0].role' is required"},
      {R"({"messages":[{"role":"robot","content":"hi"}]})", "messages[0].role", "Invalid role 'robot'"},
      {R"({"messages":[{"role":5,"content":"hi"}]})", "messages[0].role", "expected a string"},
      {R"({"messages":[{"role":"user"}]})", "messages[0].content", "is required"},
      {R"({"messages":[{"role":"user","content":null}]})", "messages[0].content", "is required"},
      {R"({"messages":[{"role":"assistant","content":null}]})", "messages[0].content", "only for an assistant"},
      {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content",
       "expected a string or an array of text parts, but got an integer"},
      {R"({"messages":[{"role":"user","content":{"type":"text"}}]})", "messages[0].content", "but got an object"},
      {R"({"messages":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"image_url",
          "image_url":{"url":"x"}}]}]})",
       "messages[1].content[0].type", "'image_url' is not supported"},
      {R"({"messages":[{"role":"user","content":["a"]}]})", "messages[0].content[0]", "expected an object"},
      {R"({"messages":[{"role":"user","content":[{"text":"a"}]}]})", "messages[0].content[0].type", "is required"},
      {R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", "messages[0].content[0].text", "is required"},
      {R"({"messages":[{"role":"user","content":[{"type":"text","text":3}]}]})", "messages[0].content[0].text",
       "expected a string"},
      {R"({"messages":[{"role":"user","content":"a","name":3}]})", "messages[0].name", "expected a string"},
      {R"({"messages":[{"role":"user","content":"a","tool_calls":[]}]})", "messages[0].tool_calls",
       "Only assistant messages"},
      {R"({"messages":[{"role":"assistant","tool_calls":{}}]})", "messages[0].tool_calls", "expected an array"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"id":"x"}]}]})", "messages[0].tool_calls[0]",
       "'function' object"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}]})",
       "messages[0].tool_calls[0].function.name", "is required"},
      {R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{oops"}}]}]})",
       "messages[0].tool_calls[0].function.arguments", "not valid JSON"},
      {R"({"messages":[{"role":"tool","content":"a","tool_call_id":7}]})", "messages[0].tool_call_id",
       "expected a string"},
  };
  for (const Case& c : cases) {
    ApiError e = chat_error(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_NE(e.message.find(c.fragment), std::string::npos) << c.body << " -> " << e.message;
  }
}

TEST(OpenaiRequest, EveryChatField) {
  const std::string messages = R"("messages":[{"role":"user","content":"hi"}])";
  ChatRequest r = parse_chat_request("{" + messages + R"(,"max_completion_tokens":7,"max_tokens":9,"logprobs":true,
      "top_logprobs":3,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
      "tool_choice":"auto","chat_template_kwargs":{"enable_thinking":false},"add_generation_prompt":false,
      "stream":true,"stream_options":{"include_usage":false},"temperature":0.7,"n":2,"stop":["x"]})",
                                     limits());
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_EQ(r.params.logprobs, 3);
  EXPECT_EQ(r.tools.dump(), R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])");
  EXPECT_EQ(r.chat_template_kwargs.dump(), R"({"enable_thinking":false})");
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_TRUE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_EQ(r.params.temperature, 0.7f);
  EXPECT_EQ(r.params.n, 2);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"x"});
  r = parse_chat_request("{" + messages + R"(,"max_tokens":9,"logprobs":true})", limits());
  EXPECT_EQ(*r.max_tokens, 9);
  EXPECT_EQ(r.params.logprobs, 0);
  r = parse_chat_request("{" + messages + R"(,"logprobs":false,"top_logprobs":0})", limits());
  EXPECT_EQ(r.params.logprobs, -1);
  // Text output asked for as OpenAI's clients may: accepted.
  EXPECT_NO_THROW(parse_chat_request("{" + messages + R"(,"modalities":["text"],"audio":null})", limits()));
  // continue_final_message: the final assistant text becomes the prefill, the rest is rendered
  // as for an answer, with any reasoning closed.
  r = parse_chat_request(R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Once"}],)"
                         R"("continue_final_message":true,"add_generation_prompt":false})",
                         limits());
  EXPECT_EQ(r.prefill, "Once");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0]["role"], "user");
  EXPECT_TRUE(r.add_generation_prompt);
  EXPECT_EQ(r.chat_template_kwargs.dump(), R"({"enable_thinking":false})");
  EXPECT_EQ(parse_chat_request("{" + messages + "}", limits()).prefill, "");
}

TEST(OpenaiRequest, BadChatFields) {
  const std::string m = R"({"messages":[{"role":"user","content":"hi"}],)";
  struct Case {
    std::string fields, param, fragment;
  };
  std::vector<Case> cases = {
      {R"("max_completion_tokens":0)", "max_completion_tokens", "'max_completion_tokens' must be >= 1, but got 0."},
      {R"("logprobs":1)", "logprobs", "expected a boolean, but got an integer"},
      {R"("logprobs":true,"top_logprobs":6)", "top_logprobs", "between 0 and 5"},
      {R"("top_logprobs":2)", "top_logprobs", "requires 'logprobs' to be true"},
      {R"("tools":{})", "tools", "expected an array"},
      {R"("tools":[{"type":"function"}])", "tools[0]", "\"type\": \"function\""},
      {R"("tools":[{"type":"retrieval","function":{"name":"f"}}])", "tools[0]", "\"type\": \"function\""},
      {R"("tools":[{"type":"function","function":{}}])", "tools[0].function.name", "is required"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":"x"}}])", "tools[0].function.parameters",
       "a JSON schema"},
      {R"("chat_template_kwargs":[])", "chat_template_kwargs", "expected an object"},
      {R"("add_generation_prompt":"yes")", "add_generation_prompt", "expected a boolean"},
      // Fields OpenAI defines and this server does not serve: refused by name, never ignored.
      {R"("functions":[{"name":"f","parameters":{"type":"object"}}])", "functions", "pass the functions as 'tools'"},
      {R"("function_call":"auto")", "function_call", "use 'tool_choice'"},
      {R"("modalities":["text","audio"])", "modalities", "text only"},
      {R"("modalities":"text")", "modalities", "expected an array"},
      {R"("audio":{"voice":"alloy","format":"mp3"})", "audio", "text only"},
      {R"("continue_final_message":true)", "continue_final_message", "an assistant's text"},
      {R"("continue_final_message":1)", "continue_final_message", "expected a boolean"},
  };
  for (const Case& c : cases) {
    ApiError e = chat_error(m + c.fields + "}");
    EXPECT_EQ(e.status, 400) << c.fields;
    EXPECT_EQ(e.param, c.param) << c.fields;
    EXPECT_NE(e.message.find(c.fragment), std::string::npos) << c.fields << " -> " << e.message;
  }
}

TEST(OpenaiRequest, UnknownVocabularySkipsIdChecks) {
  ServerLimits l = limits();
  l.vocab_size = 0;
  CompletionRequest r = parse_completion_request(R"({"prompt":[123456],"stop_token_ids":[99999]})", l);
  EXPECT_EQ(r.prompt_ids[0][0], 123456);
  l.model_name = "";
  EXPECT_NO_THROW(parse_completion_request(R"({"model":"anything","prompt":"x"})", l));
}

TEST(OpenaiRequest, ContextLength) {
  ServerLimits l = limits();  // max_model_len 100
  EXPECT_NO_THROW(check_context(90, 10, l));
  EXPECT_NO_THROW(check_context(99, std::nullopt, l));
  EXPECT_EQ(resolve_max_tokens(90, std::nullopt, l), 10);
  EXPECT_EQ(resolve_max_tokens(90, 4, l), 4);
  try {
    check_context(95, 10, l);
    FAIL();
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error().status, 400);
    EXPECT_EQ(e.error().code, "context_length_exceeded");
    EXPECT_EQ(e.error().message,
              "This model's maximum context length is 100 tokens. However, you requested 105 tokens (95 in the "
              "messages, 10 in the completion). Please reduce the length of the messages or completion.");
  }
  try {
    check_context(100, std::nullopt, l);
    FAIL();
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error().status, 400);
    EXPECT_NE(e.error().message.find("your request has 100 input tokens"), std::string::npos);
  }
}

TEST(OpenaiErrors, Body) {
  EXPECT_EQ(
      error_body(bad_request("n", "'n' must be between 1 and 4, but got 0.")),
      R"({"error":{"message":"'n' must be between 1 and 4, but got 0.","type":"invalid_request_error","param":"n","code":null}})");
  EXPECT_EQ(error_body(ApiError{.status = 500, .message = "boom", .type = "server_error"}),
            R"({"error":{"message":"boom","type":"server_error","param":null,"code":null}})");
  EXPECT_EQ(
      error_body(model_not_found("x", "tiny")),
      R"({"error":{"message":"The model `x` does not exist. This server serves `tiny`.","type":"NotFoundError","param":"model","code":"model_not_found"}})");
  EXPECT_EQ(error_body(bad_request("", "bad \xff byte")),
            "{\"error\":{\"message\":\"bad \xEF\xBF\xBD "
            "byte\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":null}}");
  ApiException e(bad_request("p", "msg"));
  EXPECT_STREQ(e.what(), "msg");
}

TEST(OpenaiErrors, ValidUtf8) {
  EXPECT_EQ(to_valid_utf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"), "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(to_valid_utf8("a\xE2\x82"), "a\xEF\xBF\xBD");            // truncated 3-byte sequence: one U+FFFD
  EXPECT_EQ(to_valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: each byte replaced
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(to_valid_utf8("\xF0\x9F\x98"), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace tachyon::server

namespace tachyon::server {
namespace {

// Byte-level mutations of valid bodies: the parsers must answer with a request or an ApiException,
// never another exception or a crash.
TEST(OpenaiRequest, MutatedBodiesOnlyThrowApiErrors) {
  const std::vector<std::string> seeds = {
      R"({"model":"tiny","prompt":[[1,2],[3]],"max_tokens":5,"stop":["a"],"logprobs":2,"stream":true,"stream_options":{"include_usage":true}})",
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1e5}"}}]}],"tools":[{"type":"function","function":{"name":"f"}}],"top_logprobs":1,"logprobs":true})",
  };
  const std::string alphabet = "{}[]\",:0123456789-.eE truefalsnul\\\xff\xc3";
  uint64_t state = 12345;
  auto next = [&state]() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<size_t>(state >> 33);
  };
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::string body = seeds[iteration % seeds.size()];
    for (int edits = 1 + next() % 3; edits > 0; --edits) {
      size_t at = next() % body.size();
      switch (next() % 3) {
        case 0:
          body[at] = alphabet[next() % alphabet.size()];
          break;
        case 1:
          body.erase(at, 1 + next() % 4);
          break;
        default:
          body.insert(at, 1, alphabet[next() % alphabet.size()]);
          break;
      }
      if (body.empty()) body = "{";
    }
    try {
      if (iteration % 2 == 0) {
        (void)parse_completion_request(body, limits());
      } else {
        (void)parse_chat_request(body, limits());
      }
    } catch (const ApiException& e) {
      EXPECT_TRUE(e.error().status == 400 || e.error().status == 404) << body;
      EXPECT_TRUE(nlohmann::json::accept(error_body(e.error()))) << body;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-API exception for " << body << ": " << e.what();
    }
  }
}

// A tool's name is spelled inside the model's call markup: OpenAI's rule keeps it to letters,
// digits, '_' and '-' (a forced call to "</tool_call>" came back as plain text before); its
// parameters describe an object.
TEST(OpenaiRequest, ToolNamesAndParametersFollowOpenAisRules) {
  auto with_tool = [](const std::string& name) {
    return R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":)" +
           nlohmann::json(name).dump() + "}}]}";
  };
  for (const std::string& name : {std::string(""), std::string("</tool_call>"), std::string("a b"),
                                  std::string("get.weather"), std::string(65, 'x'), std::string("f\n")}) {
    ApiError e = chat_error(with_tool(name));
    EXPECT_EQ(e.status, 400) << name;
    EXPECT_EQ(e.param, "tools[0].function.name") << name;
  }
  for (const std::string& name : {std::string("get_weather"), std::string("search-web-2"), std::string(64, 'x')}) {
    EXPECT_NO_THROW(parse_chat_request(with_tool(name), limits())) << name;
  }
  // A call's arguments are an object: parameters typed otherwise are refused; untyped ones stay.
  auto with_parameters = [](const std::string& parameters) {
    return R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f",)"
           R"("parameters":)" + parameters + "}}]}";
  };
  for (const char* parameters : {R"({"type":"string"})", R"({"type":["object","null"]})"}) {
    ApiError e = chat_error(with_parameters(parameters));
    EXPECT_EQ(e.status, 400) << parameters;
    EXPECT_EQ(e.param, "tools[0].function.parameters") << parameters;
    EXPECT_NE(e.message.find("must describe an object"), std::string::npos) << e.message;
  }
  for (const char* parameters : {R"({"type":"object","properties":{"a":{"type":"integer"}}})", "{}"}) {
    EXPECT_NO_THROW(parse_chat_request(with_parameters(parameters), limits())) << parameters;
  }
}

// A schema given as a JSON string nests inside a string, where parse_body's scan does not look:
// 100,000 levels of it overflowed the stack when the schema was dumped (a crash of the server).
// Each field that takes one refuses nesting past the body's limit, naming the field.
TEST(OpenaiRequest, SchemaStringsNestedPastTheLimitAreRefused) {
  const int deep = 100000;
  const std::string schema = nlohmann::json(std::string(deep, '[') + std::string(deep, ']')).dump();
  ApiError e = completion_error(R"({"prompt":"hi","guided_json":)" + schema + "}");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "guided_json");
  EXPECT_NE(e.message.find("nested more than 64 levels"), std::string::npos) << e.message;
  e = completion_error(R"({"prompt":"hi","structured_outputs":{"json":)" + schema + "}}");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "structured_outputs.json");
  e = chat_error(R"({"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema",)"
                 R"("json_schema":{"name":"x","schema":)" + schema + "}}}");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "response_format.json_schema.schema");
  EXPECT_NE(e.message.find("nested more than 64 levels"), std::string::npos) << e.message;
  // Within the limit a string schema is taken (refused later here, for the missing compiler only).
  e = completion_error(R"({"prompt":"hi","guided_json":"{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}"})");
  EXPECT_EQ(e.message.find("nested"), std::string::npos) << e.message;
}

// Reading a JSON object compares each new key with those before it (ordered keys), so an object of
// n members costs n^2 / 2 comparisons: a logit_bias of 150,000 entries held a request thread for
// 21 s before its refusal. Bodies (and documents in string fields) whose objects together cost
// more than 50,000,000 are refused before parsing, naming the largest object; large but ordinary
// objects (a schema of 3,000 properties) are read.
TEST(OpenaiRequest, ObjectsTooLargeToReadQuicklyAreRefused) {
  auto object_of = [](int members) {
    std::string text = "{";
    for (int i = 0; i < members; ++i) text += (i ? ",\"" : "\"") + std::to_string(i) + "\":1";
    return text + "}";
  };
  ApiError e = completion_error(R"({"prompt":"hi","logit_bias":)" + object_of(150000) + "}");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("one of 10001 members so far"), std::string::npos) << e.message;  // read no further
  std::string many = R"({"prompt":"hi","x":[)";
  for (int i = 0; i < 40; ++i) many += (i ? "," : "") + object_of(2000);  // 40 x 2,000,000 comparisons
  e = completion_error(many + "]}");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("members"), std::string::npos) << e.message;
  // As a string field's document (a schema given as text).
  const std::string properties = object_of(150000);
  e = completion_error(R"({"prompt":"hi","guided_json":)" +
                       nlohmann::json(R"({"type":"object","properties":)" + properties + "}").dump() + "}");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "guided_json");
  EXPECT_NE(e.message.find("members"), std::string::npos) << e.message;
  // Ordinary large objects are read (refused later for other reasons here, never for their size).
  e = completion_error(R"({"prompt":"hi","logit_bias":)" + object_of(3000) + "}");
  EXPECT_EQ(e.message.find("members"), std::string::npos) << e.message;
}

// The limit counts levels as the body's does: a document of exactly max_depth levels is taken,
// with a scalar or an empty container innermost; one more level is refused.
TEST(OpenaiRequest, NestedDocumentsMayReachTheLimitExactly) {
  auto nested = [](int levels, const std::string& inner) {
    return std::string(static_cast<size_t>(levels), '[') + inner + std::string(static_cast<size_t>(levels), ']');
  };
  EXPECT_TRUE(fields::parse_nested_document(nested(3, "1"), "x", 3).has_value());
  EXPECT_TRUE(fields::parse_nested_document(nested(3, ""), "x", 3).has_value());
  EXPECT_TRUE(fields::parse_nested_document(R"({"a":{"b":{"c":1}}})", "x", 3).has_value());
  EXPECT_THROW(fields::parse_nested_document(nested(4, "1"), "x", 3), ApiException);
  EXPECT_THROW(fields::parse_nested_document(nested(4, ""), "x", 3), ApiException);
  EXPECT_THROW(fields::parse_nested_document(R"({"a":{"b":{"c":{}}}})", "x", 3), ApiException);
  EXPECT_FALSE(fields::parse_nested_document("[1,", "x", 3).has_value()) << "not JSON: nullopt";
}

}  // namespace
}  // namespace tachyon::server
