#include "tachyon/server/openai_request_fields.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tachyon/base/check.h"

namespace tachyon::server::fields {

namespace {

std::string quoted(std::string_view path) { return "'" + std::string(path) + "'"; }

[[noreturn]] void wrong_type(std::string_view path, const char* expected, const Json& got) {
  fail(std::string(path),
       "Invalid type for " + quoted(path) + ": expected " + expected + ", but got " + type_name(got) + ".");
}

std::string format_number(double value) {
  Json j = value;
  return j.dump();
}

}  // namespace

void fail(std::string param, std::string message) {
  throw ApiException(bad_request(std::move(param), std::move(message)));
}

std::string type_name(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}

const Json& object_at(const Json& value, const std::string& path) {
  if (!value.is_object()) {
    fail(path, "Invalid type for '" + path + "': expected an object, but got " + type_name(value) + ".");
  }
  return value;
}

namespace {

// Calls on_byte(c) for each byte of the JSON text outside its strings (whose brackets, colons and
// escapes are no structure): one linear pass, for the checks that must run before parsing.
template <typename OnByte>
void for_each_structural_byte(std::string_view text, OnByte&& on_byte) {
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else {
      on_byte(c);
    }
  }
}

}  // namespace

namespace {

// Both checks that must run before a JSON text is parsed, in one linear pass: its nesting (when
// max_depth >= 0) and the cost of reading its objects (when sizes). A nesting past max_depth fails
// at once; objects too large to read quickly fail once the pass is done, so a text that breaks both
// limits is refused for its nesting, as when the two were separate passes.
void check_json_shape(std::string_view text, const std::string& path, int32_t max_depth, bool sizes) {
  constexpr int64_t kMaxComparisons = 50'000'000;
  int64_t depth = 0;
  std::vector<int64_t> members;  // per open container: members so far (-1: an array)
  int64_t comparisons = 0, largest = 0;
  for_each_structural_byte(text, [&](char c) {
    if (c == '[' || c == '{') {
      if (max_depth >= 0 && ++depth > max_depth) {
        fail("", "The request body is nested more than " + std::to_string(max_depth) + " levels deep; at most " +
                     std::to_string(max_depth) + " levels are allowed.");
      }
      if (sizes) members.push_back(c == '{' ? 0 : -1);
    } else if (c == ']' || c == '}') {
      --depth;
      if (!members.empty()) members.pop_back();
    } else if (c == ':' && !members.empty() && members.back() >= 0 && comparisons <= kMaxComparisons) {
      comparisons += members.back()++;  // a member of the open object, compared with those before it
      largest = std::max(largest, members.back());
    }
  });
  if (comparisons > kMaxComparisons) {
    const std::string what = path.empty() ? "The request body" : "'" + path + "'";
    fail(path, what + " holds JSON objects too large to read quickly (one of " + std::to_string(largest) +
                   " members so far): an object's keys are read in order, each compared with those before it, "
                   "and the objects of one document may cost at most " + std::to_string(kMaxComparisons) +
                   " comparisons (an object of about 10,000 members).");
  }
}

}  // namespace

// Refuses nesting deeper than max_depth with one linear pass over the bytes, before anything walks
// the JSON recursively (nlohmann's copy and dump, Value::from_json: one stack frame per level).
// Brackets count only outside strings; inside one, a backslash skips the byte after it. On
// invalid JSON the count may be off, but such a body fails to parse anyway: a body that passes
// both is valid JSON nested at most max_depth deep.
void check_body_depth(std::string_view body, int32_t max_depth) { check_json_shape(body, "", max_depth, false); }

void check_object_sizes(std::string_view text, const std::string& path) { check_json_shape(text, path, -1, true); }

Json parse_body(std::string_view body, const ServerLimits& limits) {
  check_json_shape(body, "", limits.max_json_depth, /*sizes=*/true);
  // JSON has no raw NUL (a string escapes it as \u0000), and the parser stops at one as at the
  // end of its input: whatever followed would be ignored instead of refused.
  if (body.find('\0') != std::string_view::npos) {
    fail("", "The request body is not valid JSON: it contains a NUL byte (write \\u0000 inside a string).");
  }
  Json parsed;
  try {
    parsed = Json::parse(body);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for numbers like 1e400
    // e.what() may quote the offending bytes; error_body makes them valid UTF-8.
    std::string what = e.what();
    if (what.find("UTF-8") != std::string::npos) {
      fail("", "The request body is not valid UTF-8: " + what);
    }
    fail("", "The request body is not valid JSON: " + what);
  }
  if (!parsed.is_object()) fail("", "The request body must be a JSON object, but got " + type_name(parsed) + ".");
  return parsed;
}

std::optional<Json> parse_nested_document(const std::string& text, const std::string& path, int32_t max_depth) {
  check_object_sizes(text, path);
  bool too_deep = false;
  Json parsed = Json::parse(
      text,
      [&](int depth, Json::parse_event_t event, Json&) {  // the parser itself does not recurse
        // A container opened at callback depth d is level d + 1 (a scalar in it comes at d + 1 too).
        const bool opens = event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start;
        too_deep = too_deep || (opens && depth + 1 > max_depth);
        return !too_deep;
      },
      false);
  if (too_deep) fail(path, "'" + path + "' is nested more than " + std::to_string(max_depth) + " levels deep.");
  if (parsed.is_discarded()) return std::nullopt;
  return parsed;
}

const Json* find(const Json& object, std::string_view name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t as_int(const Json& value, std::string_view path, int64_t lo, int64_t hi) {
  // nullopt: outside int64, which is out of range for every field (never clamped or wrapped).
  std::optional<int64_t> result;
  bool negative = false;
  if (value.is_number_unsigned()) {
    uint64_t u = value.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) result = static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    result = value.get<int64_t>();
  } else if (value.is_number_float()) {
    double d = value.get<double>();
    if (std::floor(d) != d) wrong_type(path, "an integer", value);
    negative = d < 0;
    // (-2^63, 2^63): -2^63 itself is left out because an integer literal below int64's minimum
    // (-9223372036854775809) is parsed into that very double.
    constexpr double kTwoTo63 = 9223372036854775808.0;
    if (d > -kTwoTo63 && d < kTwoTo63) result = static_cast<int64_t>(d);
  } else {
    wrong_type(path, "an integer", value);
  }
  if (!result || *result < lo || *result > hi) {
    // Below the minimum of an otherwise unbounded field: just say ">= lo" (seed's range is int64's
    // own, so it gets both ends).
    bool open_top = hi >= std::numeric_limits<int32_t>::max() && hi < std::numeric_limits<int64_t>::max();
    bool below = result ? *result < lo : negative;
    std::string range = below && open_top ? ">= " + std::to_string(lo)
                                          : "between " + std::to_string(lo) + " and " + std::to_string(hi);
    fail(std::string(path), quoted(path) + " must be " + range + ", but got " + value.dump() + ".");
  }
  return *result;
}

std::optional<int64_t> read_int(const Json& object, std::string_view name, std::string_view path, int64_t lo,
                                int64_t hi) {
  const Json* value = find(object, name);
  if (value == nullptr) return std::nullopt;
  return as_int(*value, path, lo, hi);
}

std::optional<double> read_number(const Json& object, std::string_view name, std::string_view path) {
  const Json* value = find(object, name);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) wrong_type(path, "a number", *value);
  return value->get<double>();
}

std::optional<bool> read_bool(const Json& object, std::string_view name, std::string_view path) {
  const Json* value = find(object, name);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) wrong_type(path, "a boolean", *value);
  return value->get<bool>();
}

std::optional<std::string> read_string(const Json& object, std::string_view name, std::string_view path) {
  const Json* value = find(object, name);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) wrong_type(path, "a string", *value);
  return value->get<std::string>();
}

void check_model(const Json& body, const ServerLimits& limits) {
  std::optional<std::string> model = read_string(body, "model", "model");
  if (!model || model->empty() || limits.model_name.empty() || *model == limits.model_name) return;
  throw ApiException(model_not_found(*model, limits.model_name));
}

namespace {

// A number in [lo, hi] (open ends when lo_open / hi_open), stored as float: checked as the float
// it becomes too, so 1e300 (inf as a float) or 1e-50 (0) cannot slip past the bounds.
std::optional<float> read_ranged(const Json& body, const char* name, double lo, bool lo_open, double hi, bool hi_open,
                                 const char* range_text) {
  std::optional<double> value = read_number(body, name, name);
  if (!value) return std::nullopt;
  const double stored = static_cast<float>(*value);
  auto in_range = [&](double x) { return (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi); };
  if (!in_range(*value)) {
    fail(name, quoted(name) + " must be " + range_text + ", but got " + format_number(*value) + ".");
  }
  if (!std::isfinite(stored) || !in_range(stored)) {
    fail(name, quoted(name) + " must be " + range_text + " as a 32-bit float, but " + format_number(*value) +
                   " becomes " + format_number(stored) + ".");
  }
  return static_cast<float>(stored);
}

void read_stop(const Json& body, const ServerLimits& limits, core::SamplingParams& params) {
  const Json* stop = find(body, "stop");
  if (stop == nullptr) return;
  if (stop->is_string()) {
    params.stop = {stop->get<std::string>()};
  } else if (stop->is_array()) {
    for (size_t i = 0; i < stop->size(); ++i) {
      const Json& s = (*stop)[i];
      if (!s.is_string()) wrong_type("stop[" + std::to_string(i) + "]", "a string", s);
      params.stop.push_back(s.get<std::string>());
    }
  } else {
    wrong_type("stop", "a string or an array of strings", *stop);
  }
  if (static_cast<int64_t>(params.stop.size()) > limits.max_stop) {
    fail("stop", "'stop' has " + std::to_string(params.stop.size()) + " strings; at most " +
                     std::to_string(limits.max_stop) + " are allowed.");
  }
  for (size_t i = 0; i < params.stop.size(); ++i) {
    const std::string& s = params.stop[i];
    if (s.empty()) fail("stop", "'stop' strings must not be empty.");
    if (static_cast<int64_t>(s.size()) > limits.max_stop_length) {
      std::string path = stop->is_string() ? "stop" : "stop[" + std::to_string(i) + "]";
      fail("stop", "'" + path + "' is " + std::to_string(s.size()) + " bytes long; a stop string may be at most " +
                       std::to_string(limits.max_stop_length) + " bytes.");
    }
  }
}

void read_unsupported(const Json& body, const core::SamplingParams& params) {
  if (const Json* bias = find(body, "logit_bias")) {
    if (!bias->is_object()) wrong_type("logit_bias", "an object", *bias);
    if (!bias->empty()) fail("logit_bias", "'logit_bias' is not supported by this server; remove it.");
  }
  if (std::optional<int64_t> best_of = read_int(body, "best_of", "best_of", 1, std::numeric_limits<int32_t>::max())) {
    if (*best_of != params.n)
      fail("best_of", "'best_of' is not supported by this server; remove it or set it equal to 'n'.");
  }
}

}  // namespace

void read_sampling_fields(const Json& body, const ServerLimits& limits, core::SamplingParams& params) {
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
  if (auto v = read_ranged(body, "temperature", 0.0, false, std::numeric_limits<double>::max(), false, ">= 0")) {
    params.temperature = *v;
  }
  if (auto v = read_ranged(body, "top_p", 0.0, true, 1.0, false, "in (0, 1]")) params.top_p = *v;
  if (auto v = read_int(body, "top_k", "top_k", kInt32Min, kInt32Max)) {
    if (*v < -1) fail("top_k", "'top_k' must be >= -1 (-1 or 0 disables it), but got " + std::to_string(*v) + ".");
    params.top_k = *v == -1 ? 0 : static_cast<int32_t>(*v);
  }
  if (auto v = read_ranged(body, "min_p", 0.0, false, 1.0, false, "in [0, 1]")) params.min_p = *v;
  if (auto v = read_ranged(body, "presence_penalty", -2.0, false, 2.0, false, "in [-2, 2]"))
    params.presence_penalty = *v;
  if (auto v = read_ranged(body, "frequency_penalty", -2.0, false, 2.0, false, "in [-2, 2]"))
    params.frequency_penalty = *v;
  if (auto v = read_ranged(body, "repetition_penalty", core::SamplingParams::kMinRepetitionPenalty, false,
                           core::SamplingParams::kMaxRepetitionPenalty, false, "in [1e-6, 1e6]")) {
    params.repetition_penalty = *v;
  }
  // OpenAI's seed is an int64; a negative one is used bit for bit.
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  if (auto v = read_int(body, "seed", "seed", std::numeric_limits<int64_t>::min(), kInt64Max)) {
    params.seed = static_cast<uint64_t>(*v);
  }
  if (auto v = read_int(body, "n", "n", 1, std::min(limits.max_n, kMaxNCeiling))) params.n = static_cast<int32_t>(*v);
  read_stop(body, limits, params);
  if (const Json* ids = find(body, "stop_token_ids")) {
    if (!ids->is_array()) wrong_type("stop_token_ids", "an array of integers", *ids);
    int64_t hi = limits.vocab_size > 0 ? limits.vocab_size - 1 : kInt32Max;
    for (size_t i = 0; i < ids->size(); ++i) {
      params.stop_token_ids.push_back(static_cast<int32_t>(as_int((*ids)[i], "stop_token_ids", 0, hi)));
    }
  }
  if (auto v = read_bool(body, "ignore_eos", "ignore_eos")) params.ignore_eos = *v;
  if (auto v = read_int(body, "min_tokens", "min_tokens", 0, kInt32Max)) params.min_tokens = static_cast<int32_t>(*v);
  if (auto v = read_bool(body, "include_stop_str_in_output", "include_stop_str_in_output")) {
    params.include_stop_str_in_output = *v;
  }
  if (auto v = read_int(body, "priority", "priority", kInt32Min, kInt32Max)) params.priority = static_cast<int32_t>(*v);
  read_unsupported(body, params);
}

void read_stream_fields(const Json& body, bool& stream, bool& include_usage) {
  stream = read_bool(body, "stream", "stream").value_or(false);
  const Json* options = find(body, "stream_options");
  if (options == nullptr) return;
  if (!options->is_object()) wrong_type("stream_options", "an object", *options);
  if (!stream) fail("stream_options", "'stream_options' is only allowed when 'stream' is true.");
  include_usage = read_bool(*options, "include_usage", "stream_options.include_usage").value_or(false);
}

std::string read_user(const Json& body) {
  for (const char* name : {"user", "safety_identifier"}) {
    std::optional<std::string> user = read_string(body, name, name);
    if (!user) continue;
    if (user->size() > kMaxUserBytes) {
      fail(name, "'" + std::string(name) + "' is " + std::to_string(user->size()) + " bytes; at most " +
                     std::to_string(kMaxUserBytes) + " are allowed.");
    }
    return *user;
  }
  return "";
}

void check_sequences(int64_t num_prompts, int32_t n, const ServerLimits& limits) {
  const int64_t sequences = num_prompts * n;
  if (sequences > limits.max_sequences_per_request) {
    fail("n", "This request would start " + std::to_string(sequences) + " sequences; the limit is " +
                  std::to_string(limits.max_sequences_per_request) + " (prompts x n).");
  }
}

std::string user_message(const tachyon::Error& e) {
  std::string message = e.what();
  size_t where = message.find(" (check `");
  if (where != std::string::npos) message.resize(where);
  return message;
}

void validate_params(const core::SamplingParams& params, const ServerLimits& limits) {
  try {
    params.validate(limits.vocab_size > 0 ? limits.vocab_size : std::numeric_limits<int32_t>::max());
  } catch (const tachyon::Error& e) {
    std::string message = user_message(e);
    // The message starts with the field name ("min_tokens must be ..."): report it as param.
    std::string param = message.substr(0, message.find_first_of(" :"));
    fail(param, message + ".");
  }
}

std::vector<FieldSpec> sampling_field_specs(const ServerLimits& limits) {
  const std::string max_n = std::to_string(std::min(limits.max_n, kMaxNCeiling));
  return {
      {"max_tokens", FieldKind::kInteger, "tokens to generate at most, >= 1", "16"},
      {"temperature", FieldKind::kNumber, "sampling temperature, >= 0; 0 is greedy", "1"},
      {"top_p", FieldKind::kNumber, "in (0, 1]: sample from the most likely tokens whose probabilities sum to top_p", "1"},
      {"top_k", FieldKind::kInteger, "sample from the k most likely tokens; -1 or 0: all", "0"},
      {"min_p", FieldKind::kNumber, "in [0, 1]: drop tokens less likely than min_p x the most likely one", "0"},
      {"presence_penalty", FieldKind::kNumber, "in [-2, 2]: subtracted from the logit of every token generated so far", "0"},
      {"frequency_penalty", FieldKind::kNumber, "in [-2, 2]: subtracted per time a token was generated so far", "0"},
      {"repetition_penalty", FieldKind::kNumber,
       "in [1e-6, 1e6]: divides the positive logits (multiplies the negative ones) of tokens in the prompt or output",
       "1"},
      {"seed", FieldKind::kInteger, "an int64: the same seed samples the same tokens", "random"},
      {"n", FieldKind::kInteger, "completions of the prompt, 1 to " + max_n, "1"},
      {"stop", FieldKind::kStringList,
       "a string that ends the completion, left out of the text; at most " + std::to_string(limits.max_stop), "none"},
      {"stop_token_ids", FieldKind::kIntegerList, "token ids that end the completion", "none"},
      {"min_tokens", FieldKind::kInteger, ">= 0: EOS, stop ids and stop strings count only after this many tokens", "0"},
      {"ignore_eos", FieldKind::kFlag, "keep generating past the end-of-sequence token", "off"},
      {"include_stop_str_in_output", FieldKind::kFlag, "keep the matched stop string in the text", "off"},
      {"logprobs", FieldKind::kInteger,
       "0 to " + std::to_string(limits.max_logprobs) + ": each token's logprob and its N most likely alternatives",
       "none"},
  };
}

}  // namespace tachyon::server::fields
