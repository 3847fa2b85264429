#include "tachyon/core/engine_config.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "tachyon/base/check.h"

namespace tachyon::core {

std::string EngineConfig::plan_hash() const {
  // A canonical JSON of the plan-changing fields; adding a field here without a flip in the
  // test, or a plan-changing field without adding it here, is what the test catches.
  const nlohmann::ordered_json fields = {
      {"max_num_batched_tokens", scheduler.max_num_batched_tokens},
      {"max_num_seqs", scheduler.max_num_seqs},
      {"max_model_len", scheduler.max_model_len},
      {"block_size", block_size},
      {"kind", device.kind},
      {"enforce_eager", device.enforce_eager},
      {"cuda_graph_batch_sizes", cuda_graph_batch_sizes(*this)},
      {"dtype", dtype_name(device.dtype)},
      {"kv_cache_dtype", dtype_name(device.kv_cache_dtype)},
      {"quantization", device.quantization},
      {"tensor_parallel_size", device.tensor_parallel_size},
      {"enable_expert_parallel", device.enable_expert_parallel},
      {"data_parallel_size", device.data_parallel_size},
      {"decode_context_parallel_size", device.decode_context_parallel_size},
      {"dcp_kv_cache_interleave_size", device.dcp_kv_cache_interleave_size},
      {"prefill_context_parallel_size", device.prefill_context_parallel_size},
      {"enable_two_batch_overlap", device.enable_two_batch_overlap},
      {"gpu_name", device.gpu_name},
      {"model_identity", device.model_identity},
      // k sizes the CUDA runner's logits rows and sampler workspace (and the GEMM problems tuned).
      {"num_speculative_tokens", speculative.num_speculative_tokens},
  };
  const std::string text = fields.dump();
  const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return hex;
}

int32_t max_decode_rows(const EngineConfig& config) {
  const int64_t seqs = config.scheduler.max_num_seqs;
  const int64_t k = std::max<int64_t>(config.speculative.num_speculative_tokens, 0);
  const int64_t tokens = std::max(config.scheduler.max_num_batched_tokens, seqs);
  return static_cast<int32_t>(std::min(tokens, seqs * (1 + k)));
}

std::vector<int32_t> cuda_graph_batch_sizes(const EngineConfig& config) {
  const int32_t max_seqs = static_cast<int32_t>(config.scheduler.max_num_seqs);
  const int32_t max_rows = max_decode_rows(config);
  std::vector<int32_t> sizes = config.device.cuda_graph_batch_sizes;
  if (sizes.empty()) {
    // With drafts every small row count is a verify step of a few sequences (1 + k rows each):
    // each gets its own graph rather than padding to the next power of two.
    const bool verifies = max_rows > max_seqs;
    for (int32_t b = 1; b <= 8; ++b) {
      if (b <= max_rows && (verifies || (b & (b - 1)) == 0)) sizes.push_back(b);
    }
    for (int32_t b = 16; b <= max_seqs; b += 8) sizes.push_back(b);
    if (sizes.back() < max_seqs) sizes.push_back(max_seqs);
    // Verify steps' rows beyond max_num_seqs: steps of 8, coarser (64) past 256 rows.
    for (int32_t b = sizes.back() + (sizes.back() < 256 ? 8 : 64); b < max_rows; b += b < 256 ? 8 : 64) {
      sizes.push_back(b);
    }
    if (sizes.back() != max_rows) sizes.push_back(max_rows);
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (int32_t b : sizes) {
    TACHYON_CHECK(b >= 1 && b <= max_rows) << "CUDA graph batch size " << b << " is outside [1, " << max_rows
                                           << "] (max_num_seqs, times 1 + the speculative tokens)";
  }
  return sizes;
}

}  // namespace tachyon::core
