#include "tachyon/model/layer_plan.h"

#include "tachyon/base/check.h"

namespace tachyon::model {

std::vector<LayerKinds> layer_plan(const ModelConfig& c) {
  std::vector<LayerKinds> plan;
  plan.reserve(static_cast<size_t>(c.num_hidden_layers));
  const AttentionKind attention = c.is_mla() ? AttentionKind::kLatent : AttentionKind::kDense;
  const bool sparse = c.has_sparse_attention();
  TACHYON_CHECK(!sparse || attention == AttentionKind::kLatent)
      << c.architecture << ": DeepSeek sparse attention needs latent attention (kv_lora_rank > 0)";
  bool full_before = false;  // a full indexer layer precedes this one
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    LayerKinds kinds;
    kinds.attention = attention;
    kinds.mlp = c.is_moe_layer(l) ? MlpKind::kExperts : MlpKind::kDense;
    if (sparse) kinds.indexer = c.has_indexer(l) ? IndexerKind::kFull : IndexerKind::kShared;
    TACHYON_CHECK(kinds.indexer != IndexerKind::kShared || full_before)
        << c.architecture << ": layer " << l << " shares a top-k, but no full indexer layer comes before it";
    full_before = full_before || kinds.indexer == IndexerKind::kFull;
    plan.push_back(kinds);
  }
  return plan;
}

}  // namespace tachyon::model
