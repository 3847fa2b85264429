#include "tachyon/model/gpu_support.h"

#include "tachyon/model/layer_plan.h"

namespace tachyon::model {

std::string dense_attention_gpu_unsupported(const ModelConfig& c) {
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256) {
    return "head_dim " + std::to_string(c.head_dim) + " (the CUDA attention kernels serve 64, 128 and 256)";
  }
  return "";
}

std::string latent_attention_gpu_unsupported(const ModelConfig& c) {
  if (c.has_sparse_attention() &&
      (c.q_lora_rank == 0 || c.index_head_dim % 8 != 0 || c.index_head_dim > 128 || c.index_n_heads > 256)) {
    return "DeepSeek sparse attention (" + c.architecture + ") on the GPU needs a q LoRA, index_head_dim a "
           "multiple of 8 up to 128 and at most 256 index heads";
  }
  if (c.kv_lora_rank % 8 != 0 || c.kv_lora_rank > 512 || c.qk_rope_head_dim % 8 != 0 || c.qk_rope_head_dim > 64) {
    return "multi-head latent attention on the GPU takes kv_lora_rank a multiple of 8 up to 512 and "
           "qk_rope_head_dim a multiple of 8 up to 64";
  }
  return "";
}

std::string moe_mlp_gpu_unsupported(const ModelConfig& c) {
  if (c.num_experts > 256 || c.num_experts_per_tok > 16 || c.moe_intermediate_size % 8 != 0) {
    return "the CUDA MoE kernels take at most 256 experts, top-16, and a moe_intermediate_size that is a multiple of 8";
  }
  return "";
}

std::string gpu_decoder_unsupported(const ModelConfig& c) {
  bool latent = false, experts = false;  // the blocks GpuDecoder builds: those of the layer plan's kinds
  for (const LayerKinds& kinds : layer_plan(c)) {
    latent = latent || kinds.attention == AttentionKind::kLatent;
    experts = experts || kinds.mlp == MlpKind::kExperts;
  }
  std::string reason = latent ? latent_attention_gpu_unsupported(c) : dense_attention_gpu_unsupported(c);
  if (reason.empty() && experts) reason = moe_mlp_gpu_unsupported(c);
  if (reason.empty() && (c.hidden_size % 8 != 0 || c.intermediate_size % 8 != 0 || c.vocab_size % 8 != 0)) {
    reason = "hidden, intermediate and vocab sizes must be multiples of 8 for the GPU's 16-byte loads";
  }
  return reason;
}

std::string fp8_kv_cache_gpu_unsupported(const ModelConfig& config, bool tensor_parallel) {
  if (config.is_mla() && (config.kv_lora_rank % 16 != 0 || (config.has_sparse_attention() && config.index_head_dim % 16 != 0))) {
    return "the GPU's FP8 latent (MLA) cache takes kv_lora_rank and index_head_dim multiples of 16";
  }
  if (tensor_parallel) return "an FP8 KV cache over tensor-parallel GPUs is not verified by any test yet";
  return "";
}

}  // namespace tachyon::model
