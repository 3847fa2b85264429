// What a GPU forward reads besides its weights: the step's shape (from the plan, on the host:
// sizes that shape launches never come from device memory), its metadata on the device (views
// into the runner's staging buffer), the limits everything was planned for, and the KV cache.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tachyon/kernels/dcp_layout.h"
#include "tachyon/tensor/cuda/cuda_check.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::model::gpu {

using kernels::cuda::bf16;

struct ForwardShape {
  int32_t num_tokens = 0;
  int32_t num_seqs = 0;
  int32_t num_logits_rows = 0;
  int32_t max_query_len = 0;
  int32_t max_context_len = 0;
  int32_t num_decode_seqs = 0;  // leading one-token sequences: the split-KV decode kernels; the rest: prefill
  // Context tokens of the prefill sequences (the rest), earlier chunks included; 0 where the step's
  // maker does not count them, which keeps latent attention's prefill in the absorbed form.
  int64_t prefill_context_tokens = 0;
};

// Device views of one step's metadata, int32 throughout.
struct StepMetadata {
  const int32_t* token_ids = nullptr;     // [num_tokens]
  const int32_t* positions = nullptr;     // [num_tokens]
  const int32_t* slots = nullptr;         // [num_tokens] -1: padding, no K/V write
  const int32_t* context_lens = nullptr;  // [num_seqs]
  const int32_t* query_starts = nullptr;  // [num_seqs + 1]
  const int32_t* block_tables = nullptr;  // [num_seqs, block_table_stride]
  const int32_t* logits_rows = nullptr;   // [num_logits_rows]
};

// Prefill context parallelism: a split step runs only this rank's rows (ForwardShape and
// StepMetadata describe those), while every rank stores every row of the step: these are all of
// them in the group's gather order (rank 0's rows, then rank 1's, ...). Empty otherwise.
struct GatheredRows {
  const int32_t* positions = nullptr;  // [num_rows] device
  const int32_t* slots = nullptr;      // [num_rows] device
  int32_t num_rows = 0;                // rows of the whole step; 0: not a split step
  std::span<const int32_t> rank_rows;  // [group size] host: the rows rank r computes and sends
};

// Data-parallel attention: each rank of the expert group (TpSeam::ep_comm) runs its own
// sequences, and every MoE layer serves all of their tokens: rank_rows[r] is how many rank r
// brings this step (host, known to every rank from the split plan, so nothing is exchanged
// first). Empty otherwise.
struct ExpertGroupRows {
  std::span<const int32_t> rank_rows;  // [expert group size]
};

struct GpuStep {
  ForwardShape shape;
  StepMetadata metadata;
  GatheredRows gathered{};
  ExpertGroupRows expert_rows{};
};

// What memory was planned for; fixed at start-up.
struct GpuLimits {
  int32_t max_tokens = 0;          // rows of one forward
  int32_t max_seqs = 0;            // sequences of one forward
  // Logits rows of one forward, in [max_seqs, max_tokens]: one per sampled sequence, plus one per
  // draft token when the runner verifies drafts (max_seqs without them).
  int32_t max_logits_rows = 0;
  int32_t max_model_len = 0;       // tokens of one sequence
  int32_t block_size = 0;          // tokens per KV block
  int32_t block_table_stride = 0;  // ints per sequence's block table
  // --kv-cache-dtype fp8: dense attention caches K and V as E4M3 codes with one f32 factor per
  // token and KV head (kernels/cuda/rope_store_kv.h rope_store_kv_fp8).
  bool fp8_kv_cache = false;
  // Decode context parallelism (kernels/dcp_layout.h): this rank caches only the tokens dcp deals
  // it, block_size / dcp.size rows per engine block (latent attention only; the decoder's
  // TpSeam::dcp_comm is the group).
  kernels::DcpLayout dcp{};
  int32_t kv_block_rows() const { return block_size / dcp.size; }  // cache rows per engine block
  // Prefill context parallelism: ranks of the group that split a prefill step's rows (the
  // decoder's TpSeam::pcp_comm); 1: none.
  int32_t pcp_size = 1;
};

// One region of a layer's KV cache: what an attention block stores per token, e.g. K and V, or a
// latent row and an index key. The runner lays out num_blocks * GpuLimits::kv_block_rows() tokens
// of every region of every layer (layer-major, regions in order) and hands back their addresses.
struct KvRegion {
  std::string name;           // "k", "v", "latent", "index_keys"
  size_t bytes_per_token = 0;
  DType dtype = DType::kBF16;
};

class KvCache {
 public:
  KvCache() = default;
  KvCache(std::byte* base, std::vector<size_t> region_bytes) : base_(base), region_bytes_(std::move(region_bytes)) {
    for (size_t bytes : region_bytes_) layer_bytes_ += bytes;
  }
  // Region `region` (an index into the attention block's kv_regions()) of layer `layer`.
  std::byte* bytes(int64_t layer, size_t region) const {
    size_t offset = static_cast<size_t>(layer) * layer_bytes_;
    for (size_t r = 0; r < region; ++r) offset += region_bytes_[r];
    return base_ + offset;
  }
  bf16* region(int64_t layer, size_t region) const { return reinterpret_cast<bf16*>(bytes(layer, region)); }

 private:
  std::byte* base_ = nullptr;
  std::vector<size_t> region_bytes_;  // one layer's region r, every block
  size_t layer_bytes_ = 0;
};

}  // namespace tachyon::model::gpu
