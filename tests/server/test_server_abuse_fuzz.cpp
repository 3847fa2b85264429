// Fuzzers of HTTP framing and of request JSON, with fixed seeds and a time bound (~10 s each;
// TACHYON_ABUSE_FULL=1: 5 minutes each; TACHYON_ABUSE_SEED=N: the fuzzers' cases from seed N;
// TACHYON_ABUSE_REPLAY=N: the framing fuzzer's case N, sent again and again). Every answer must be
// well-formed, below 500, and an OpenAI error body from 400 up (Anthropic's on /v1/messages);
// /health must answer within 1 s every 50 cases. A crash leaves the last two cases in the file
// named at the fuzzer's start.
//   build/tests/server_tests --gtest_filter='ServerAbuseFuzz.*'
#include "abuse_common.h"

namespace tachyon::server::testing {
namespace {

// ---------------------------------------------------------------------------------------------
// Fuzzers. Each case's answers must be well-formed HTTP/1.x with a status below 500 and an
// OpenAI error body from 400 on; the server may close without an answer only on framing
// garbage. /health must answer within a second every 50 cases and at the end.

Clock::duration fuzz_budget() { return full_run() ? Clock::duration(5min) : Clock::duration(10s); }

// The fixed seed, or TACHYON_ABUSE_SEED's (a campaign of other cases; the failure names it).
uint64_t fuzz_seed(uint64_t fixed) {
  const char* given = std::getenv("TACHYON_ABUSE_SEED");
  const uint64_t seed = given != nullptr ? std::strtoull(given, nullptr, 10) : fixed;
  std::printf("[fuzz] seed %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

size_t pick(std::mt19937_64& rng, size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); }

// What a fuzzer saw, printed at the end.
struct FuzzTally {
  int cases = 0;
  int closed_without_answer = 0;
  int cut_short = 0;  // a generation's answer ended by the server after the client's half-close
  std::map<int, int> statuses;
  std::string failure;  // the first broken promise, with its case
  void print(const char* name) const {
    std::printf("[%s fuzz] %d cases, %d closed without an answer, %d cut short; statuses:", name, cases,
                closed_without_answer, cut_short);
    for (auto [status, count] : statuses) std::printf(" %d x%d", status, count);
    std::printf("\n");
  }
};

// Keeps the last two cases in a file: a case that crashes the process takes the test's report
// with it, and the crash may come while the next case is being sent (a server thread trips over
// what the previous one left). Written aside and renamed, so a crash never finds it half
// written; removed when the fuzzer ends, unless a case failed (keep_file: the failure names it).
class CaseLog {
 public:
  explicit CaseLog(const char* name)
      : path_(std::filesystem::temp_directory_path() /
              ("tachyon-abuse-" + std::to_string(::getpid()) + "-" + name + ".txt")) {
    std::printf("[%s fuzz] the last two cases are kept in %s (read it after a crash)\n", name, path_.c_str());
    std::fflush(stdout);
  }
  ~CaseLog() {
    if (!kept_) std::filesystem::remove(path_);
  }
  // The file stays after the fuzzer: its last case is the one that failed.
  void keep_file() {
    kept_ = true;
    std::printf("[fuzz] the failing case is the last one in %s\n", path_.c_str());
  }
  void keep(int number, std::string bytes) {
    const std::string text = previous_ + "== case " + std::to_string(number) + " ==\n" + bytes + "\n";
    const std::filesystem::path aside = path_.string() + ".new";
    std::ofstream(aside, std::ios::binary).write(text.data(), static_cast<std::streamsize>(text.size()));
    std::filesystem::rename(aside, path_);
    previous_ = "== case " + std::to_string(number) + " ==\n" + std::move(bytes) + "\n";
  }

 private:
  std::filesystem::path path_;
  std::string previous_;
  bool kept_ = false;
};

// The promise on one answer; empty when kept.
// Anthropic's error body on its routes: {"type":"error","error":{"type","message"}}.
bool is_anthropic_error(const RawResponse& r) {
  const json body = json::parse(r.body, nullptr, false);
  return body.is_object() && body.value("type", "") == "error" && body.contains("error") &&
         body["error"].is_object() && body["error"].contains("type") && body["error"]["type"].is_string() &&
         body["error"].contains("message") && body["error"]["message"].is_string();
}

// `anthropic`: the answer of a /v1/messages route (its errors in Anthropic's shape).
std::string check_answer(const RawResponse& r, bool anthropic = false) {
  if (r.status >= 500) return "status " + std::to_string(r.status) + ": " + printable(r.body);
  if (r.status >= 400 && !(anthropic ? is_anthropic_error(r) : static_cast<bool>(is_openai_error(r)))) {
    return "status " + std::to_string(r.status) + " without an error body: " + printable(r.body);
  }
  const char* internal = anthropic ? "\"api_error\"" : "internal_server_error";
  if (r.status == 200 && r.body.find(internal) != std::string::npos) return "an internal error: " + printable(r.body);
  return "";
}

class ServerAbuseFuzz : public ServerAbuseHttp {};

std::string chunked_body(std::string_view body) {
  std::string out;
  for (std::string_view part : {body.substr(0, body.size() / 2), body.substr(body.size() / 2)}) {
    if (part.empty()) continue;
    char size[24];
    std::snprintf(size, sizeof(size), "%zx\r\n", part.size());
    out += size + std::string(part) + "\r\n";
  }
  return out + "0\r\n\r\n";
}

// Valid requests the framing fuzzer starts from, one per framing: none, Content-Length, chunked.
std::vector<std::string> framing_seeds() {
  return {http_request("GET", "/health"), http_request("GET", "/v1/models"),
          http_request("POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":1})"),
          http_request("POST", "/tokenize", R"({"prompt":"Hello"})"),
          "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          "Transfer-Encoding: chunked\r\n\r\n" +
              chunked_body(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1})")};
}

size_t head_end(const std::string& s) {
  size_t end = s.find("\r\n\r\n");
  return end == std::string::npos ? s.size() : end + 4;
}

// `lines` inserted as header fields right after the request line.
std::string with_header(std::string s, std::string_view lines) {
  size_t at = s.find("\r\n");
  s.insert(at == std::string::npos ? s.size() : at + 2, lines);
  return s;
}

std::string any_of(std::mt19937_64& rng, const std::vector<std::string>& choices) {
  return choices[pick(rng, choices.size())];
}

// One framing mutation of a request (or a pipeline of them).
std::string mutate_framing(std::string s, std::mt19937_64& rng) {
  if (s.empty()) s = "\r\n";
  const size_t at = pick(rng, s.size());
  const size_t line_end = std::min(s.find("\r\n"), s.size());
  switch (pick(rng, 15)) {
    case 0:  // truncated
      return s.substr(0, at);
    case 1:  // bytes flipped, NUL and high bytes among them
      for (size_t i = 0, n = 1 + pick(rng, 8); i < n && !s.empty(); ++i) {
        s[pick(rng, s.size())] = static_cast<char>(pick(rng, 3) == 0   ? 0
                                                   : pick(rng, 3) == 0 ? 0x80 + pick(rng, 128)
                                                                       : pick(rng, 256));
      }
      return s;
    case 2:  // random bytes inserted
      for (size_t i = 0, n = 1 + pick(rng, 16); i < n; ++i) {
        s.insert(s.begin() + static_cast<ptrdiff_t>(at), static_cast<char>(pick(rng, 256)));
      }
      return s;
    case 3: {  // a bad, huge or negative chunk size (reframed as chunked first when it is not)
      size_t body = head_end(s);
      if (s.find("Transfer-Encoding: chunked") == std::string::npos) {
        std::string head = with_header(s.substr(0, body), "Transfer-Encoding: chunked\r\n");
        if (size_t cl = head.find("Content-Length: "); cl != std::string::npos) {
          head.erase(cl, head.find("\r\n", cl) + 2 - cl);
        }
        s = head + chunked_body(s.substr(body));
        body = head.size();
      }
      const std::string bad =
          any_of(rng, {"zz", "-1", "-0", "ffffffffffffffffffff", "7fffffffffffffff", "ffffffff", "0x10", " 5", "5 ;x",
                       "", std::string(1, '\0'), "1;" + std::string(20000, 'x'), "+5"});
      return s.replace(body, std::min(s.find("\r\n", body), s.size()) - body, bad);
    }
    case 4:  // both Content-Length and Transfer-Encoding
      return with_header(s, any_of(rng, {"Transfer-Encoding: chunked\r\n", "Content-Length: 5\r\n",
                                         "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n"}));
    case 5:  // Content-Length repeated, disagreeing, huge, negative, signed, listed
      return with_header(s, "Content-Length: " +
                                any_of(rng, {"0", "1", "3", "99999999999999999999", "18446744073709551616", "-1", "+3",
                                             "3, 3", "", "0x10", " 1 2"}) +
                                "\r\n");
    case 6:  // another method
      return s.replace(0, std::min(s.find(' '), s.size()),
                       any_of(rng, {"", "GETT", "get", "G ET", "PRI", "CONNECT", "TRACE", "OPTIONS",
                                    std::string("\0GET", 4), std::string(5000, 'A'), "PO\xffST", "M-SEARCH"}));
    case 7: {  // another version
      const size_t version = s.rfind(' ', line_end);
      if (version == std::string::npos) return s;
      return s.replace(version + 1, line_end - version - 1,
                       any_of(rng, {"HTTP/1.2", "HTTP/2.0", "HTTP/0.9", "HTTP/1", "HTTP/11", "HTTPS/1.1", "http/1.1",
                                    "HTTP/1.1 ", "", "HTTP/9.9", "HTTP/1.10", "HTTP/\xff.1"}));
    }
    case 8: {  // an overlong request line
      const size_t target_end = s.rfind(' ', line_end);
      if (target_end == std::string::npos) return s;
      const size_t length = std::vector<size_t>{8 << 10, 31 << 10, 40 << 10, 1 << 20}[pick(rng, 4)];
      return s.insert(target_end, "?q=" + std::string(length, 'a'));
    }
    case 9:  // an HTTP/2 client's preface and a SETTINGS frame
      return std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00", 33) + s.substr(0, at);
    case 10: {  // line endings damaged
      size_t crlf = s.find("\r\n", at);
      if (crlf == std::string::npos) crlf = s.find("\r\n");
      if (crlf == std::string::npos) return s;
      return s.replace(crlf, 2, any_of(rng, {"\n", "\r", "\r\r\n", "\n\r", "\r\n\r\n\r\n"}));
    }
    case 11: {  // odd header fields
      std::string many;
      for (int i = 0; i < 150; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
      return with_header(
          s, any_of(rng, {"NoColon\r\n", " Leading-Space: x\r\n", "Name : x\r\n", "X: a\r\n b\r\n", ":\r\n",
                          std::string("X-Nul: a\0b\r\n", 12), "Expect: 100-continue\r\n", "Transfer-Encoding: gzip\r\n",
                          "Transfer-Encoding: chunked, chunked\r\n", "Transfer-Encoding: identity\r\n",
                          "Host: a\r\nHost: b\r\n", "Connection: close\r\n", "Upgrade: h2c\r\nConnection: Upgrade\r\n",
                          many, "X-Big: " + std::string(40 << 10, 'b') + "\r\n"}));
    }
    case 12: {  // a slice repeated many times
      const size_t length = 1 + pick(rng, std::min<size_t>(64, s.size() - at));
      const std::string slice = s.substr(at, length);
      for (size_t i = 0, n = 1 + pick(rng, 500); i < n; ++i) s.insert(at, slice);
      return s;
    }
    case 13: {  // garbage only
      std::string garbage(1 + pick(rng, 4096), '\0');
      for (char& ch : garbage) ch = static_cast<char>(pick(rng, 256));
      return garbage;
    }
    default: {  // Content-Length that does not match the body
      const size_t cl = s.find("Content-Length: ");
      if (cl == std::string::npos) return s;
      const size_t eol = s.find("\r\n", cl);
      return s.replace(cl + 16, eol - cl - 16, std::to_string(pick(rng, 200)));
    }
  }
}

// One framing case on a fresh connection. Well-framed pipelines must be answered in full; for
// anything else the client half-closes, and the server answers, closes, or both.
std::string run_framing_case(int port, const std::string& bytes, bool well_framed, int requests, FuzzTally& tally) {
  RawConnection c(port);
  if (!c.connected()) return "cannot connect";
  c.send(bytes, 2s);  // may fail: the server can refuse and close before the end
  if (!well_framed) c.shutdown_write();
  int answers = 0;
  for (;;) {
    RawResponse r;
    // A flipped byte may turn max_tokens into an unknown field: a chat then runs to the end of
    // its context, seconds on this machine, and over 20 s once while ctest ran the heavy server
    // tests beside it on 2 cores (that case answered at once alone). A hang never answers.
    const ReadResult got = c.read_response(r, 60s);
    if (got == ReadResult::kClosed) break;
    if (got == ReadResult::kTimeout) {
      return (well_framed ? "no answer within 60 s" : "neither answered nor closed 60 s after the client's half-close") +
             std::string(" (after ") + std::to_string(answers) + " answers)";
    }
    if (got == ReadResult::kMalformed) return "a malformed answer: " + printable(c.pending());
    if (got == ReadResult::kTruncated) {
      // After the client's half-close the server may take it for gone, as nginx does, and cut a
      // generation short; error bodies are written whole and never cut.
      if (well_framed || r.status >= 400) return "an answer cut short: status " + std::to_string(r.status);
      ++tally.cut_short;
      return "";
    }
    ++answers;
    ++tally.statuses[r.status];
    if (std::string broken = check_answer(r); !broken.empty()) return broken;
    if (well_framed && answers == requests) break;
  }
  if (answers == 0) ++tally.closed_without_answer;
  if (well_framed && answers < requests) {
    return "closed after " + std::to_string(answers) + " of " + std::to_string(requests) +
           " answers to well-framed requests";
  }
  c.reset();
  return "";
}

// One case of the framing fuzzer: 1-3 pipelined requests, mutated unless well framed.
struct FramingCase {
  std::string bytes;
  int requests = 0;
  bool well_framed = false;
};

FramingCase next_framing_case(std::mt19937_64& rng, const std::vector<std::string>& seeds) {
  FramingCase c;
  c.requests = 1 + static_cast<int>(pick(rng, 3));
  for (int i = 0; i < c.requests; ++i) c.bytes += seeds[pick(rng, seeds.size())];
  c.well_framed = pick(rng, 8) == 0;
  if (!c.well_framed) {
    for (size_t i = 0, n = 1 + pick(rng, 3); i < n; ++i) c.bytes = mutate_framing(std::move(c.bytes), rng);
  }
  return c;
}

// TACHYON_ABUSE_REPLAY=N: the framing fuzzer sends its case N (of the seed's sequence) again and
// again for the budget, to reproduce a failure that depends on timing.
int replayed_case() {
  const char* given = std::getenv("TACHYON_ABUSE_REPLAY");
  return given != nullptr ? std::atoi(given) : 0;
}

TEST_F(ServerAbuseFuzz, HttpFraming) {
  std::mt19937_64 rng(fuzz_seed(20240611));
  const std::vector<std::string> seeds = framing_seeds();
  FuzzTally tally;
  CaseLog log("framing");
  const int replay = replayed_case();
  FramingCase replayed;
  for (int generated = 0; generated < replay; ++generated) replayed = next_framing_case(rng, seeds);
  if (replay > 0) {
    std::printf("[framing fuzz] replaying case %d (%zu bytes, %s)\n", replay, replayed.bytes.size(),
                replayed.well_framed ? "well framed" : "then a half-close");
  }
  const auto end = Clock::now() + fuzz_budget();
  while (Clock::now() < end && tally.failure.empty()) {
    const FramingCase next = replay > 0 ? replayed : next_framing_case(rng, seeds);
    const std::string& bytes = next.bytes;
    ++tally.cases;
    log.keep(tally.cases, bytes);
    std::string broken = run_framing_case(port(), bytes, next.well_framed, next.requests, tally);
    if (broken.empty() && tally.cases % 50 == 0 && !health_ok(port())) broken = "/health did not answer 200 within 1 s";
    if (!broken.empty()) {
      tally.failure = "case " + std::to_string(tally.cases) + ": " + broken + "\n  sent: " + printable(bytes, 600);
      log.keep_file();
    }
  }
  tally.print("framing");
  EXPECT_EQ(tally.failure, "");
  EXPECT_TRUE(health_ok(port()));
  EXPECT_TRUE(server_->wait_idle());
}

// Valid bodies the JSON fuzzer starts from, with their routes.
std::vector<std::pair<std::string, json>> json_seeds() {
  const json user = {{"role", "user"}, {"content", "Hi"}};
  const json anthropic_tool = {
      {"name", "get_weather"},
      {"description", "Weather in a city"},
      {"input_schema", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}};
  const json tool = {
      {"type", "function"},
      {"function",
       {{"name", "get_weather"},
        {"description", "Weather in a city"},
        {"parameters",
         {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}}}}}};
  return {
      {"/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 2}, {"temperature", 0}}},
      {"/v1/completions",
       {{"prompt", {"a", "b"}},
        {"max_tokens", 1},
        {"n", 2},
        {"logprobs", 2},
        {"echo", true},
        {"stop", {"x"}},
        {"seed", 3}}},
      {"/v1/completions",
       {{"prompt", {1, 2, 3}}, {"max_tokens", 2}, {"stream", true}, {"stream_options", {{"include_usage", true}}}}},
      {"/v1/chat/completions",
       {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, user}}, {"max_tokens", 2}}},
      {"/v1/chat/completions",
       {{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hi"}}}}}}},
        {"max_completion_tokens", 2},
        {"stream", true},
        {"logprobs", true},
        {"top_logprobs", 2}}},
      {"/v1/chat/completions",
       {{"messages",
         {user,
          {{"role", "assistant"},
           {"content", nullptr},
           {"tool_calls",
            {{{"id", "c1"},
              {"type", "function"},
              {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}}}}}},
          {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}}},
        {"tools", {tool}},
        {"max_tokens", 2},
        {"chat_template_kwargs", {{"enable_thinking", false}}}}},
      {"/v1/chat/completions",
       {{"messages", {user, {{"role", "assistant"}, {"content", "The answer is"}}}},
        {"continue_final_message", true},
        {"add_generation_prompt", false},
        {"max_tokens", 2}}},
      {"/v1/chat/completions",
       {{"messages", {user}},
        {"max_tokens", 3},
        {"response_format",
         {{"type", "json_schema"},
          {"json_schema", {{"name", "a"}, {"schema", {{"type", "object"}, {"properties", {{"x", {{"type", "integer"}}}}}}}}}}},
        {"tools", {tool}},
        {"tool_choice", "required"},
        {"user", "fuzz"}}},
      {"/v1/chat/completions",
       {{"messages", {user}},
        {"max_tokens", 4},
        {"response_format",
         {{"type", "json_schema"},
          {"json_schema",
           {{"name", "b"},
            {"schema",
             {{"type", "object"},
              {"properties",
               {{"p", {{"type", "number"}, {"minimum", -1.5}, {"exclusiveMaximum", 2.25}}},
                {"t", {{"type", "array"}, {"prefixItems", {{{"type", "string"}}, {{"format", "ipv4"}}}}, {"items", false}}},
                {"m", {{"type", "object"}, {"additionalProperties", {{"type", "integer"}}}, {"maxProperties", 2}}},
                {"u", {{"type", "array"}, {"items", {{"enum", {"a", 1, true}}}}, {"uniqueItems", true}, {"minItems", 1}}},
                {"k", {{"type", "integer"}, {"multipleOf", 15}, {"minimum", 0}}},
                {"w", {{"type", "string"}, {"format", "uri"}, {"minLength", 1}, {"maxLength", 2083}}}}},
              {"required", {"p", "t"}}}}}}}}}},
      {"/tokenize", {{"messages", {user}}}},
      {"/detokenize", {{"tokens", {1, 2, 3}}}},
      {"/v1/messages", {{"model", "tiny"}, {"max_tokens", 2}, {"messages", {user}}}},
      {"/v1/messages",
       {{"model", "tiny"},
        {"max_tokens", 2},
        {"stream", true},
        {"system", {{{"type", "text"}, {"text", "Be brief."}}}},
        {"stop_sequences", {"x"}},
        {"top_k", 5},
        {"metadata", {{"user_id", "fuzz"}}},
        {"thinking", {{"type", "disabled"}}},
        {"tools", {anthropic_tool}},
        {"tool_choice", {{"type", "auto"}}},
        {"messages",
         {user,
          {{"role", "assistant"},
           {"content", {{{"type", "tool_use"}, {"id", "t1"}, {"name", "get_weather"}, {"input", {{"city", "Paris"}}}}}}},
          {{"role", "user"},
           {"content", {{{"type", "tool_result"}, {"tool_use_id", "t1"}, {"content", "sunny"}}}}},
          {{"role", "assistant"}, {"content", "It is"}}}}}},
      {"/v1/messages",
       {{"model", "tiny"},
        {"max_tokens", 3},
        {"tools", {anthropic_tool}},
        {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}},
        {"messages", {user}}}},
      {"/v1/messages/count_tokens", {{"model", "tiny"}, {"tools", {anthropic_tool}}, {"messages", {user}}}},
      {"/v1/responses", {{"model", "tiny"}, {"input", "hi"}, {"max_output_tokens", 2}}},
      {"/v1/responses",
       {{"model", "tiny"},
        {"instructions", "Be brief."},
        {"max_output_tokens", 3},
        {"stream", true},
        {"metadata", {{"k", "v"}}},
        {"reasoning", {{"effort", "minimal"}}},
        {"tools",
         {{{"type", "function"},
           {"name", "get_weather"},
           {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}},
        {"tool_choice", "auto"},
        {"input",
         {{{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "Weather?"}}}}},
          {{"type", "reasoning"}, {"content", {{{"type", "reasoning_text"}, {"text", "Look it up."}}}}},
          {{"type", "function_call"}, {"call_id", "c1"}, {"name", "get_weather"}, {"arguments", "{\"city\":\"Paris\"}"}},
          {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "sunny"}},
          {{"type", "message"}, {"role", "assistant"}, {"content", {{{"type", "output_text"}, {"text", "It is"}}}}},
          {{"role", "user"}, {"content", "And tomorrow?"}}}}}},
      {"/v1/responses",
       {{"model", "tiny"},
        {"input", "A city"},
        {"max_output_tokens", 4},
        {"text", {{"format", {{"type", "json_schema"}, {"name", "c"}, {"schema", {{"type", "object"}}}}}}},
        {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}},
        {"tools", {{{"type", "function"}, {"name", "get_weather"}}}}}},
  };
}

// A string of random code points (valid UTF-8: control, Latin, CJK, emoji, the last code point).
std::string random_unicode(std::mt19937_64& rng) {
  std::string out;
  for (size_t i = 0, n = pick(rng, 64); i < n; ++i) {
    const uint32_t ranges[][2] = {{0, 0x1f},        {0x20, 0x7e},       {0x80, 0x7ff},        {0x4e00, 0x9fff},
                                  {0xe000, 0xfffd}, {0x1f600, 0x1f64f}, {0x10fffe, 0x10ffff}, {0x300, 0x36f}};
    const auto& range = ranges[pick(rng, 8)];
    const uint32_t cp = range[0] + static_cast<uint32_t>(pick(rng, range[1] - range[0] + 1));
    auto tail = [cp](int shift) { return static_cast<char>(0x80 | (cp >> shift & 0x3f)); };
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += {static_cast<char>(0xc0 | cp >> 6), tail(0)};
    } else if (cp < 0x10000) {
      out += {static_cast<char>(0xe0 | cp >> 12), tail(6), tail(0)};
    } else {
      out += {static_cast<char>(0xf0 | cp >> 18), tail(12), tail(6), tail(0)};
    }
  }
  return out;
}

// Stands for a deeply nested value until the body is serialized (dump() recurses; the server
// must not, but this test must not either).
constexpr const char* kNested = "\x01nested\x01";

// A value of another type or size than the field expects.
json odd_value(std::mt19937_64& rng) {
  switch (pick(rng, 15)) {
    case 0: return nullptr;
    case 1: return pick(rng, 2) == 0;
    case 2: return std::vector<int64_t>{0, -1, 1, 2, 17, 100000}[pick(rng, 6)];
    case 3: return std::numeric_limits<int64_t>::max();
    case 4: return std::numeric_limits<uint64_t>::max();
    case 5: return std::vector<double>{1e308, -1e308, 0.5, -0.0, 4.9e-324, 2147483648.0}[pick(rng, 6)];
    case 6: return std::string(pick(rng, 100000), 'x');
    case 7: return random_unicode(rng);
    case 8: {  // a long array of token-id-like numbers
      json array = json::array();
      for (size_t i = 0, n = pick(rng, 20000); i < n; ++i) {
        array.push_back(static_cast<int64_t>(pick(rng, 300000)) - 10);
      }
      return array;
    }
    case 9: return json::array({random_unicode(rng), nullptr, 1});
    case 10: return json::object({{"type", random_unicode(rng)}, {"text", 5}});
    case 11: return kNested;
    case 12: return std::string(50000, '[') + std::string(50000, ']');  // deep once parsed (tool arguments)
    case 13: return json::array();
    default: return json::object();
  }
}

// Every value of the tree (the seeds are shallow; long arrays only add leaves).
void collect_values(json& value, std::vector<json*>& out) {
  out.push_back(&value);
  if (value.is_structured()) {
    for (json& child : value) collect_values(child, out);
  }
}

// Structural mutations on the tree, then (sometimes) byte-level ones on the serialized text.
std::string mutate_json(json body, std::mt19937_64& rng) {
  // The fields of both routes and of the others, wherever they land.
  static const std::vector<std::string> kFields = [] {
    std::vector<std::string> out;
    std::istringstream names(
        "prompt messages max_tokens max_completion_tokens n stream stream_options temperature top_p top_k min_p "
        "stop stop_token_ids logprobs top_logprobs echo seed tools tool_choice response_format logit_bias "
        "chat_template_kwargs model min_tokens ignore_eos priority best_of presence_penalty frequency_penalty "
        "repetition_penalty tokens content role add_generation_prompt include_stop_str_in_output suffix user "
        "system metadata user_id stop_sequences thinking budget_tokens continue_final_message structured_outputs "
        "guided_json guided_regex guided_choice guided_grammar json_schema schema safety_identifier functions "
        "modalities audio input input_schema tool_use_id id name type text prefixItems additionalItems "
        "additionalProperties minProperties maxProperties minimum maximum exclusiveMinimum exclusiveMaximum format "
        "uniqueItems multipleOf minLength maxLength enum input instructions max_output_tokens text effort "
        "reasoning call_id output arguments previous_response_id background truncation include input_text");
    for (std::string name; names >> name;) out.push_back(name);
    return out;
  }();
  std::string duplicate;  // a field written twice, first with another value
  for (size_t round = 0, rounds = 1 + pick(rng, 3); round < rounds; ++round) {
    std::vector<json*> values;
    collect_values(body, values);
    json& target = *values[pick(rng, values.size())];
    switch (pick(rng, 4)) {
      case 0:  // a value replaced
        target = odd_value(rng);
        break;
      case 1:  // a field deleted
        if (target.is_object() && !target.empty()) {
          target.erase(std::next(target.begin(), static_cast<ptrdiff_t>(pick(rng, target.size()))));
        }
        break;
      case 2:  // a field added
        if (target.is_object()) {
          target[pick(rng, 8) == 0 ? random_unicode(rng) : kFields[pick(rng, kFields.size())]] = odd_value(rng);
        }
        break;
      default:  // a field of the body duplicated
        if (body.is_object() && !body.empty()) {
          const std::string key = std::next(body.begin(), static_cast<ptrdiff_t>(pick(rng, body.size()))).key();
          duplicate = json(key).dump() + ":" + odd_value(rng).dump() + ",";
        }
    }
  }
  std::string text = body.dump();
  if (!duplicate.empty() && text.size() > 1 && text[0] == '{') text.insert(1, duplicate);
  // The nested placeholder becomes arrays or objects up to 50,000 deep.
  for (size_t at; (at = text.find(json(kNested).dump())) != std::string::npos;) {
    const size_t depth = 1 + pick(rng, 50000);
    std::string nested;
    if (pick(rng, 2) == 0) {
      nested = std::string(depth, '[') + std::string(depth, ']');
    } else {
      for (size_t i = 0; i < depth; ++i) nested += R"({"a":)";
      nested += "1" + std::string(depth, '}');
    }
    text.replace(at, json(kNested).dump().size(), nested);
  }
  if (pick(rng, 3) != 0 || text.empty()) return text;
  const size_t at = pick(rng, text.size());
  switch (pick(rng, 4)) {
    case 0:  // truncated
      return text.substr(0, at);
    case 1:  // a byte replaced
      text[at] = static_cast<char>(pick(rng, 256));
      return text;
    case 2:  // escapes and bytes that are not valid UTF-8 or not valid JSON, inside a string
      if (size_t quote = text.find('"', at); quote != std::string::npos) {
        text.insert(quote + 1, any_of(rng, {"\\ud800", "\\udfff\\ud800", "\\u0000", "\\uZZZZ", "\\x41", "\xc0\x80",
                                            "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff", std::string(1, '\0'), "\\"}));
      }
      return text;
    default:  // a number that does not fit
      if (size_t digit = text.find_first_of("0123456789", at); digit != std::string::npos) {
        text.replace(digit, text.find_first_not_of("0123456789.eE+-", digit) - digit,
                     any_of(rng, {"1e999999", "123456789012345678901234567890", "-0", "1E-400", "9223372036854775808",
                                  "-9223372036854775809", "0.0000000000000000000000001", "2147483648", "-2147483649"}));
      }
      return text;
  }
}

// One JSON case on the kept-alive connection. A connection the server closed between two
// requests is retried once on a fresh one, as clients do; a fresh one must answer.
// `path`: the route, which says how its errors and streams end (Anthropic's, the Responses API's).
std::string run_json_case(int port, RawConnection& c, bool& fresh, const std::string& request, FuzzTally& tally,
                          const std::string& path) {
  const bool anthropic = path.starts_with("/v1/messages");
  RawResponse r;
  ReadResult got = ReadResult::kClosed;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!c.connected()) {
      c = RawConnection(port);
      fresh = true;
    }
    got = c.send(request, 10s) ? c.read_response(r, 60s) : ReadResult::kClosed;
    if (got != ReadResult::kClosed || fresh) break;
    c.close();
  }
  fresh = false;
  if (got != ReadResult::kResponse) {
    c.close();
    return got == ReadResult::kTimeout     ? "no answer within 60 s"
           : got == ReadResult::kClosed    ? "closed without an answer to a well-framed request"
           : got == ReadResult::kTruncated ? "an answer cut short: status " + std::to_string(r.status)
                                           : "a malformed answer: " + printable(c.pending());
  }
  ++tally.statuses[r.status];
  if (r.header("Connection") == "close") c.close();
  if (std::string broken = check_answer(r, anthropic); !broken.empty()) return broken;
  if (r.status == 200 && r.header("Content-Type").find("text/event-stream") != std::string::npos) {
    if (anthropic) {  // a message's stream ends with message_stop, or with an error event saying why
      if (r.body.find("event: message_stop\n") == std::string::npos && r.body.find("event: error\n") == std::string::npos) {
        return "a message stream without message_stop or an error event: " + printable(r.body);
      }
    } else if (path == "/v1/responses") {  // a response's stream ends with its last lifecycle event or an error
      if (r.body.find("event: response.completed\n") == std::string::npos &&
          r.body.find("event: response.incomplete\n") == std::string::npos &&
          r.body.find("event: error\n") == std::string::npos) {
        return "a response stream without response.completed / .incomplete or an error event: " + printable(r.body);
      }
    } else if (r.body.size() < 14 || r.body.substr(r.body.size() - 14) != "data: [DONE]\n\n") {
      return "a stream without [DONE]: " + printable(r.body);
    }
  } else if (r.status == 200 && !json::parse(r.body, nullptr, false).is_object()) {
    return "a 200 whose body is not a JSON object: " + printable(r.body);
  }
  return "";
}

TEST_F(ServerAbuseFuzz, RequestJson) {
  std::mt19937_64 rng(fuzz_seed(20240612));
  const auto seeds = json_seeds();
  FuzzTally tally;
  CaseLog log("json");
  RawConnection c(port());
  bool fresh = true;
  const auto end = Clock::now() + fuzz_budget();
  while (Clock::now() < end && tally.failure.empty()) {
    const auto& [path, seed] = seeds[pick(rng, seeds.size())];
    const std::string body = mutate_json(seed, rng);
    ++tally.cases;
    log.keep(tally.cases, "POST " + path + "\n" + body);
    std::string broken =
        run_json_case(port(), c, fresh, http_request("POST", path, body), tally, path);
    if (broken.empty() && tally.cases % 50 == 0 && !health_ok(port())) broken = "/health did not answer 200 within 1 s";
    if (!broken.empty()) {
      tally.failure = "case " + std::to_string(tally.cases) + " (POST " + path + "): " + broken +
                      "\n  body: " + printable(body, 600);
      log.keep_file();
    }
  }
  tally.print("json");
  EXPECT_EQ(tally.failure, "");
  EXPECT_TRUE(health_ok(port()));
  EXPECT_TRUE(server_->wait_idle());
}

}  // namespace
}  // namespace tachyon::server::testing
