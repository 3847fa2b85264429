// The OpenAI embeddings protocol: a request body read into token ids (each input tokenized with
// the model's tokenizer, special tokens as its post-processor adds them, as sentence-transformers
// does) and the response written in OpenAI's shape. Every check happens here, before any forward
// runs (DESIGN rule 7): 400 naming the field for a wrong type, an empty input, a token id outside
// the vocabulary, an input longer than the context (the limit named), an unknown encoding_format,
// and a `dimensions` the model cannot give. Tests: ctest -R Embeddings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tachyon/server/openai_protocol.h"
#include "tachyon/server/openai_request_fields.h"
#include "tachyon/server/pooling_config.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::server {

struct EmbeddingsRequest {
  std::vector<std::vector<int32_t>> inputs;  // [num_inputs][num_tokens], each non-empty, <= max_model_len
  bool base64 = false;                       // encoding_format "base64": little-endian f32 bytes
  std::optional<int64_t> dimensions;         // shorten to this many values (<= hidden_size)
  int64_t prompt_tokens = 0;                 // every input's tokens
};

// `input`: a string, an array of strings, an array of token ids, or an array of arrays of token ids.
EmbeddingsRequest read_embeddings_request(const fields::Json& body, const tokenizer::Tokenizer& tokenizer,
                                          const ServerLimits& limits, const PoolingConfig& pooling, int64_t hidden_size);

// {"object":"list","data":[{"object":"embedding","index":i,"embedding":[...] or "<base64>"}],
//  "model", "usage":{"prompt_tokens","total_tokens"}}; vectors: [num_inputs][dims].
std::string embeddings_response(const EmbeddingsRequest& request, const std::vector<std::vector<float>>& vectors,
                                const std::string& model_name);

// RFC 4648 base64 of the vector's f32 values, little-endian: what OpenAI's encoding_format
// "base64" sends and its clients decode with Float32Array / numpy.frombuffer.
std::string base64_floats(const std::vector<float>& values);

}  // namespace tachyon::server
