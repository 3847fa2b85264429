// Post-processors of tokenizer.json ("post_processor"): TemplateProcessing (adds BOS/EOS around a
// single sequence), ByteLevel (offsets only, so ids pass through) and Sequence. Only the
// single-sequence template is used: the engine never encodes sentence pairs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tachyon::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Called only when special tokens are requested; returns the final ids.
  virtual std::vector<int32_t> process(std::vector<int32_t> ids) const = 0;
};

// Null JSON gives nullptr. Unknown types throw tachyon::Error naming the type and `source`.
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& config, const std::string& source);

}  // namespace tachyon::tokenizer
