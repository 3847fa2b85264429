#include "tachyon/server/embeddings_request.h"

#include <bit>
#include <cstring>

namespace tachyon::server {
namespace {

using fields::Json;

std::vector<int32_t> read_token_ids(const Json& ids, const std::string& path, const ServerLimits& limits) {
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t hi = limits.vocab_size > 0 ? limits.vocab_size - 1 : INT32_MAX;
    out.push_back(static_cast<int32_t>(fields::as_int(ids[i], path + "[" + std::to_string(i) + "]", 0, hi)));
  }
  return out;
}

// One entry of `input` as token ids: a string (tokenized) or an array of token ids.
std::vector<int32_t> read_one_input(const Json& value, const std::string& path, const tokenizer::Tokenizer& tokenizer,
                                    const ServerLimits& limits) {
  std::vector<int32_t> ids;
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    if (text.empty()) fields::fail(path, "'" + path + "' is an empty string; every input needs at least one token.");
    ids = tokenizer.encode(text);
  } else if (value.is_array()) {
    ids = read_token_ids(value, path, limits);
  } else {
    fields::fail(path, "Invalid type for '" + path + "': expected a string or an array of token ids, but got " +
                           fields::type_name(value) + ".");
  }
  if (ids.empty()) fields::fail(path, "'" + path + "' has no tokens; every input needs at least one token.");
  if (static_cast<int64_t>(ids.size()) > limits.max_model_len) {
    fields::fail(path, "'" + path + "' has " + std::to_string(ids.size()) + " tokens, more than this model's context of " +
                           std::to_string(limits.max_model_len) + " tokens (--max-model-len). Shorten or split the input.");
  }
  return ids;
}

std::vector<std::vector<int32_t>> read_inputs(const Json& body, const tokenizer::Tokenizer& tokenizer,
                                              const ServerLimits& limits) {
  const Json* input = fields::find(body, "input");
  if (input == nullptr) fields::fail("input", "'input' is required: a string, an array of strings, or token ids.");
  if (input->is_string()) return {read_one_input(*input, "input", tokenizer, limits)};
  if (!input->is_array()) {
    fields::fail("input", "Invalid type for 'input': expected a string or an array, but got " + fields::type_name(*input) + ".");
  }
  if (input->empty()) fields::fail("input", "'input' is an empty array; send at least one input.");
  // An array of numbers is one input given as token ids; otherwise each entry is one input.
  if ((*input)[0].is_number()) return {read_one_input(*input, "input", tokenizer, limits)};
  if (static_cast<int64_t>(input->size()) > limits.max_prompts) {
    fields::fail("input", "'input' has " + std::to_string(input->size()) + " entries; at most " +
                              std::to_string(limits.max_prompts) + " per request.");
  }
  std::vector<std::vector<int32_t>> out;
  out.reserve(input->size());
  for (size_t i = 0; i < input->size(); ++i) {
    out.push_back(read_one_input((*input)[i], "input[" + std::to_string(i) + "]", tokenizer, limits));
  }
  return out;
}

}  // namespace

EmbeddingsRequest read_embeddings_request(const Json& body, const tokenizer::Tokenizer& tokenizer,
                                          const ServerLimits& limits, const PoolingConfig& pooling, int64_t hidden_size) {
  EmbeddingsRequest request;
  request.inputs = read_inputs(body, tokenizer, limits);
  for (const std::vector<int32_t>& ids : request.inputs) request.prompt_tokens += static_cast<int64_t>(ids.size());
  const std::string format = fields::read_string(body, "encoding_format", "encoding_format").value_or("float");
  if (format != "float" && format != "base64") {
    fields::fail("encoding_format", "'encoding_format' must be 'float' or 'base64', got '" + format + "'.");
  }
  request.base64 = format == "base64";
  request.dimensions = fields::read_int(body, "dimensions", "dimensions", 1, hidden_size);
  // Shortening keeps the first d values and normalizes them: a vector the model was trained to
  // give only when its embeddings are unit length (Matryoshka training); of an unnormalized
  // model's vector it would make something no similarity was trained on.
  if (request.dimensions && *request.dimensions != hidden_size && !pooling.normalize) {
    fields::fail("dimensions", "'dimensions' shortens a normalized embedding (first d values, made unit length again); "
                               "this model's embeddings are not normalized, so it gives only its full " +
                                   std::to_string(hidden_size) + " dimensions.");
  }
  fields::read_string(body, "user", "user");  // accepted, as OpenAI's; it changes nothing here
  return request;
}

std::string base64_floats(const std::vector<float>& values) {
  static_assert(std::endian::native == std::endian::little, "base64 embeddings are little-endian f32");
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t left = bytes.size() - i;
    uint32_t chunk = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (left > 1) chunk |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    if (left > 2) chunk |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 2]));
    out += kAlphabet[(chunk >> 18) & 63];
    out += kAlphabet[(chunk >> 12) & 63];
    out += left > 1 ? kAlphabet[(chunk >> 6) & 63] : '=';
    out += left > 2 ? kAlphabet[chunk & 63] : '=';
  }
  return out;
}

std::string embeddings_response(const EmbeddingsRequest& request, const std::vector<std::vector<float>>& vectors,
                                const std::string& model_name) {
  Json data = Json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    Json item = {{"object", "embedding"}, {"index", i}};
    if (request.base64) {
      item["embedding"] = base64_floats(vectors[i]);
    } else {
      item["embedding"] = vectors[i];
    }
    data.push_back(std::move(item));
  }
  const Json body = {{"object", "list"},
                     {"data", std::move(data)},
                     {"model", model_name},
                     {"usage", {{"prompt_tokens", request.prompt_tokens}, {"total_tokens", request.prompt_tokens}}}};
  return body.dump();
}

}  // namespace tachyon::server
