// The layer plan: the one place a model's per-layer structure is decided. For each decoder layer
// it says which attention (dense q/k/v or latent), which MLP (dense or a mixture of experts) and
// which DSA indexer (none, its own, or the last full layer's top-k) the layer runs. Both forwards
// build from it: the CPU reference (dense_model.cpp, and DeepSeek's MTP layer through the same
// decoder_layer) dispatches each layer's blocks on its kinds, and the GPU decoder
// (gpu/gpu_decoder.cpp) builds its blocks from it, so the two cannot disagree about a family.
// The rules themselves stay ModelConfig's (is_mla, is_moe_layer, has_indexer over indexer_types);
// the plan asks each of them once per layer, and nothing downstream asks them again.
// Tests: tests/unit/test_layer_plan.cpp.
#pragma once

#include <vector>

#include "tachyon/model/architecture.h"
#include "tachyon/model/model_config.h"

namespace tachyon::model {

// Where a layer's DeepSeek-sparse-attention top-k comes from.
enum class IndexerKind {
  kNone,   // no sparse attention: the layer attends every earlier token
  kFull,   // runs its own lightning indexer (weights, cached index keys) and computes its top-k
  kShared  // GLM-5's "shared" layers: no indexer, attends the top-k of the last full layer before it
};

// The block kinds of one decoder layer.
struct LayerKinds {
  AttentionKind attention = AttentionKind::kDense;
  MlpKind mlp = MlpKind::kDense;
  IndexerKind indexer = IndexerKind::kNone;  // kNone unless attention is kLatent
};

// [c.num_hidden_layers]: layer l's kinds. A config for an MTP module's layer (mtp_layer_config)
// gives that layer's kinds as its one entry.
std::vector<LayerKinds> layer_plan(const ModelConfig& c);

}  // namespace tachyon::model
