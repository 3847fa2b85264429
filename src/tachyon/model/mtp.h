// DeepSeek-V3's multi-token-prediction (MTP) module on the CPU reference (DeepSeek-V3 paper,
// section 2.2). Module k, stored as checkpoint layer num_hidden_layers + k, predicts the token
// two (k = 0) or more steps ahead from a hidden state and the token that follows it:
//   x      = eh_proj([enorm(embed(token_{t+1})) | hnorm(h_t)])     (embedding first, then hidden)
//   h'     = decoder_layer(x), with a KV cache of the module's own
//   logits = shared_head.head(shared_head.norm(h'))                 (predicts token t+2)
// h_t is the main model's last hidden state BEFORE its final norm (DenseModel's "final_hidden"
// hook) for module 0, and module k-1's h' for module k (whose token is then token_{t+1+k}).
// The one non-obvious decision: the module runs as layer 0 of a one-layer decoder config
// (mtp_layer_config) through the main forward's own decoder_layer (dense_forward.h), so its cache
// is an ordinary one-layer SequenceKvCache or AttentionBackend and no layer code is copied.
// Row i of a module's cache holds main position i's entry; it is roped at position i + 1, the
// position of the token it embeds (RoPE is relative, so i or i + 1 give the same attention up to
// rounding; vLLM's and SGLang's drafts use i).
// Drafting with these modules is engine/mtp_drafter.h's on the CPU; on the GPU the runner drafts
// itself (runner/cuda/cuda_mtp_drafter.h) over the module in bf16 (Bf16MtpModule below).
// Tests: tests/unit/test_mtp.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "tachyon/model/attention_backend.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/layer_plan.h"
#include "tachyon/model/model_config.h"
#include "tachyon/model/model_weights.h"

namespace tachyon::model {

// The config an MTP module's layer runs under: the main config with one layer, which is MoE (as
// DeepSeek-V3's MTP layer is), and no MTP modules of its own. Its caches are built from it.
ModelConfig mtp_layer_config(const ModelConfig& main_config);

struct MtpOutput {
  std::vector<float> logits;  // [n, vocab] for the token two (k = 0) or more steps ahead of each row
  std::vector<float> hidden;  // [n, hidden] h', before shared_head.norm: module k+1's input hidden
};

class MtpModule {
 public:
  MtpModule(const ModelConfig& main_config, MtpWeights weights);

  const ModelConfig& layer_config() const { return layer_config_; }
  const MtpWeights& weights() const { return weights_; }

  // hidden: [n, hidden] the previous hidden states (h_t); next_tokens: [n] the tokens after them;
  // positions: [n] where the module's layer ropes each row. `attention` is a backend over the
  // module's own cache (built from layer_config()). The hook sees "mtp_input" (x) and the
  // decoder layer's intermediates, with layer = the checkpoint layer.
  MtpOutput forward(std::span<const float> hidden, std::span<const int32_t> next_tokens,
                    std::span<const int64_t> positions, AttentionBackend& attention,
                    const ForwardHook& hook = nullptr) const;

  // One sequence: rows after the cache's current contents (row i roped at cache.length + i + 1),
  // appended to it. The cache comes from make_cache.
  MtpOutput forward(std::span<const float> hidden, std::span<const int32_t> next_tokens, SequenceKvCache& cache,
                    const ForwardHook& hook = nullptr) const;
  SequenceKvCache make_cache(int64_t capacity) const { return SequenceKvCache(layer_config_, capacity); }

 private:
  ModelConfig layer_config_;
  MtpWeights weights_;
  std::vector<float> inv_freq_;  // [qk_rope_head_dim / 2]
  LayerKinds layer_kinds_;       // the module's layer: layer_plan(layer_config_)'s one entry
};

// Grows `cache` (from make_cache) to at least `capacity` rows, keeping its rows: the row is the
// outer dimension of every per-layer array, so each array only gets longer.
void reserve_rows(SequenceKvCache& cache, int64_t capacity);

// The cache's rows [0, length) (length <= capacity) as one array (each per-layer array's rows in turn: keys, values,
// latents, index keys), the form a sequence's module rows move in between servers (prefill/decode
// disaggregation), and back: `cache` (from make_cache) holding `length` rows of that form; false,
// the cache unchanged, when `values` do not hold exactly `length` rows of its arrays.
std::vector<float> copy_rows(const SequenceKvCache& cache, int64_t length);
bool set_rows(SequenceKvCache& cache, std::span<const float> values, int64_t length);

// An MTP module as the GPU runs it: its decoder layer as a one-layer bf16 model (embed_tokens =
// the module's embedding, final_norm = shared_head.norm, lm_head = shared_head.head; config =
// mtp_layer_config), so the GPU decoder runs it as it runs any model, and the front's norms and
// eh_proj beside it. Values rounded to bf16 (exact for a bf16 checkpoint).
struct Bf16MtpModule {
  Bf16ModelWeights layer_model;
  std::vector<uint16_t> enorm;    // [hidden]
  std::vector<uint16_t> hnorm;    // [hidden]
  std::vector<uint16_t> eh_proj;  // [hidden, 2 * hidden]
};
Bf16MtpModule to_bf16_module(const ModelConfig& main_config, MtpWeights&& weights);

// The config.json's num_nextn_predict_layers modules of the model in `model_dir`, in order.
std::vector<MtpModule> load_mtp_modules(const std::filesystem::path& model_dir);

}  // namespace tachyon::model
