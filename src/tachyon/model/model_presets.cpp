// The preset table of make-model. Tiny presets are a few MB and each one exercises one
// variant (GQA ratio, tied embeddings, rope scaling, sliding window, biases, head_dim override,
// experts, latent attention) that the goldens cover; real presets copy the shapes of published checkpoints.
#include "tachyon/model/make_model.h"

namespace tachyon::model {
namespace {

ModelConfig tiny_shape() {
  ModelConfig c;
  c.vocab_size = 512;
  c.hidden_size = 64;
  c.intermediate_size = 160;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 2048;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  return c;
}

// tiny-deepseek: every DeepSeek-V3 feature at hidden 64 (see build_presets).
ModelConfig tiny_deepseek_shape() {
  ModelConfig c = tiny_shape();
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 4;
  c.intermediate_size = 128;
  c.q_lora_rank = 32;
  c.kv_lora_rank = 16;
  c.qk_nope_head_dim = 16;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 16;
  c.head_dim = 24;
  c.rope_interleave = true;
  c.rope_scaling.type = RopeScalingType::kYarn;
  c.rope_scaling.factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.rope_scaling.beta_fast = 32.0;
  c.rope_scaling.beta_slow = 1.0;
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 1.0;
  c.max_position_embeddings = 256;
  c.router = RouterKind::kSigmoidGroupLimited;
  c.num_experts = 16;
  c.num_experts_per_tok = 4;
  c.moe_intermediate_size = 32;
  c.n_shared_experts = 1;
  c.n_group = 4;
  c.topk_group = 2;
  c.routed_scaling_factor = 2.5;
  c.norm_topk_prob = true;
  c.first_k_dense_replace = 1;
  return c;
}

// tiny-dsa: tiny-deepseek plus DeepSeek-V3.2's indexer; top-8 so that prompts past 8 tokens
// really attend a subset. 16 index heads, not fewer: a token's index score is exactly 0 when every
// head's relu is 0 (or every head weight is negative and the best scores are the zeros), and such
// exact ties at the top-k boundary are broken differently by torch.topk and by us (earlier token);
// with 4 heads they happened in half the golden's rows, with 16 the chance is ~2^-16 per score.
ModelConfig tiny_dsa_shape() {
  ModelConfig c = tiny_deepseek_shape();
  c.index_n_heads = 16;
  c.index_head_dim = 16;
  c.index_topk = 8;
  return c;
}

// tiny-glm-dsa: tiny-dsa's dims in GLM-5's architecture over 4 layers whose indexer_types are
// full, shared, full, shared: layer 1 attends layer 0's top-k and layer 3 layer 2's (not layer
// 0's), so a 40-token prompt shows whether the selection is carried and refreshed. GLM-5's
// indexer rope is interleaved (the architecture's, set again by the config round trip).
ModelConfig tiny_glm_dsa_shape() {
  ModelConfig c = tiny_dsa_shape();
  c.num_hidden_layers = 4;
  c.rms_norm_eps = 1e-5;
  c.index_rope_layout = RopeLayout::kInterleaved;
  c.indexer_types = {IndexerType::kFull, IndexerType::kShared, IndexerType::kFull, IndexerType::kShared};
  return c;
}

// GLM-5's per-layer shapes (zai-org/GLM-5 config.json: hidden 6144, 64 heads, q LoRA 2048, qk
// 192 + 64, v 256, a 32-head indexer of 128 keeping 2048, 256 experts of 2048 top-8 in one group)
// with 4 of its 78 layers (one dense, three MoE) and 64 of the 256 experts, as
// deepseek-v32-reduced does for DeepSeek-V3.2. Every layer runs its own indexer (GLM-5 has no
// shared layers; its indexer_types default to full).
ModelConfig glm5_reduced_shape() {
  ModelConfig c;
  c.vocab_size = 154880; c.hidden_size = 6144; c.intermediate_size = 12288; c.num_hidden_layers = 4;
  c.num_attention_heads = 64; c.num_key_value_heads = 64; c.max_position_embeddings = 202752;
  c.rms_norm_eps = 1e-5; c.rope_theta = 1000000.0; c.tie_word_embeddings = false;
  c.q_lora_rank = 2048; c.kv_lora_rank = 512; c.qk_nope_head_dim = 192; c.qk_rope_head_dim = 64; c.v_head_dim = 256;
  c.head_dim = 256; c.rope_interleave = true;
  c.router = RouterKind::kSigmoidGroupLimited; c.num_experts = 64; c.num_experts_per_tok = 8;
  c.moe_intermediate_size = 2048; c.n_shared_experts = 1; c.n_group = 1; c.topk_group = 1;
  c.routed_scaling_factor = 2.5; c.norm_topk_prob = true; c.first_k_dense_replace = 1;
  c.index_n_heads = 32; c.index_head_dim = 128; c.index_topk = 2048; c.index_rope_layout = RopeLayout::kInterleaved;
  c.bos_token_id = 0; c.eos_token_id = 154820;
  return c;
}

ModelPreset tiny(std::string name, std::string description, ModelConfig shape, std::string only_arch = "") {
  return ModelPreset{std::move(name), std::move(description), std::move(only_arch), std::move(shape), DType::kF32, 0};
}

std::vector<ModelPreset> build_presets() {
  std::vector<ModelPreset> presets;
  ModelConfig c = tiny_shape();
  presets.push_back(tiny("tiny", "2 layers, hidden 64, 4 heads / 2 kv heads (GQA 2)", c));

  c = tiny_shape();
  c.num_key_value_heads = 4;
  c.tie_word_embeddings = true;
  presets.push_back(tiny("tiny-tied", "MHA with tied input/output embeddings", c));

  c = tiny_shape();
  c.num_attention_heads = 8;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  presets.push_back(tiny("tiny-mqa", "8 heads sharing 1 kv head (GQA 8)", c));

  c = tiny_shape();
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;  // q_size 128 != hidden 64: the head_dim override path
  presets.push_back(tiny("tiny-head-dim", "head_dim 32 overriding hidden/heads = 16", c));

  c = tiny_shape();
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeScalingType::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 256;  // small so every band is exercised
  presets.push_back(tiny("tiny-rope-llama3", "llama3 rope scaling with all three frequency bands", c));

  c = tiny_shape();
  c.rope_scaling.type = RopeScalingType::kLinear;
  c.rope_scaling.factor = 4.0;
  presets.push_back(tiny("tiny-rope-linear", "linear rope scaling, factor 4", c));

  c = tiny_shape();
  c.sliding_window = 8;
  presets.push_back(tiny("tiny-window", "sliding window of 8 tokens", c, "mistral"));

  c = tiny_shape();
  c.qkv_bias = true;
  c.o_proj_bias = true;
  c.mlp_bias = true;
  presets.push_back(tiny("tiny-bias", "attention_bias and mlp_bias on", c, "llama"));

  // The tiny shape the GPU kernels serve (head_dim 64/128, widths multiples of 8): the CUDA
  // runner is tested against the CPU reference on these.
  c = tiny_shape();
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.head_dim = 64;
  presets.push_back(tiny("tiny-gpu", "hidden 256, 4 heads / 2 kv heads of 64: the GPU kernels' tiny shape", c));

  c.num_attention_heads = 8;
  c.num_key_value_heads = 1;
  c.head_dim = 128;
  presets.push_back(tiny("tiny-gpu-mqa", "8 heads of 128 sharing 1 kv head (GQA 8), on the GPU", c));

  c = tiny_shape();
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.head_dim = 64;
  c.sliding_window = 24;
  presets.push_back(tiny("tiny-gpu-window", "sliding window of 24 tokens, on the GPU", c, "mistral"));

  c.sliding_window.reset();
  c.qkv_bias = true;
  c.o_proj_bias = true;
  c.mlp_bias = true;
  presets.push_back(tiny("tiny-gpu-bias", "attention and mlp biases, on the GPU", c, "llama"));

  // Mixture of experts (qwen3_moe only). tiny-moe: 8 experts, top-2 renormalized, every layer
  // sparse but layer 0, which mlp_only_layers keeps dense. tiny-moe-nonorm: top-3 without
  // renormalization, and decoder_sparse_step 2 makes layers 1 and 3 sparse, 0 and 2 dense.
  c = tiny_shape();
  c.intermediate_size = 128;
  c.num_hidden_layers = 4;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 32;
  c.norm_topk_prob = true;
  c.decoder_sparse_step = 1;
  c.mlp_only_layers = {0};
  presets.push_back(tiny("tiny-moe", "4 layers, 8 experts top-2 renormalized; layer 0 dense (mlp_only_layers)", c,
                         "qwen3_moe"));

  c.num_experts_per_tok = 3;
  c.norm_topk_prob = false;
  c.decoder_sparse_step = 2;
  c.mlp_only_layers = {};
  presets.push_back(tiny("tiny-moe-nonorm", "8 experts top-3 not renormalized; decoder_sparse_step 2", c, "qwen3_moe"));

  // The GPU kernels' MoE shape (head_dim 64, widths multiples of 8): 16 experts top-4, layer 0
  // dense, for the CUDA runner's MoE path against the CPU reference.
  c = tiny_shape();
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.head_dim = 64;
  c.num_hidden_layers = 3;
  c.num_experts = 16;
  c.num_experts_per_tok = 4;
  c.moe_intermediate_size = 128;
  c.norm_topk_prob = true;
  c.decoder_sparse_step = 1;
  c.mlp_only_layers = {0};
  presets.push_back(tiny("tiny-gpu-moe", "hidden 256, heads of 64, 16 experts top-4; layer 0 dense: on the GPU", c,
                         "qwen3_moe"));
  // The same with every expert chosen: routing then makes no discrete choice, so bf16 rounding on
  // the GPU cannot flip an expert and the runner's logits can be held to the f32 reference's
  // tolerance (with top-4, router near-ties flip experts in a few rows of every run).
  c.num_experts_per_tok = 16;
  presets.push_back(tiny("tiny-gpu-moe-all", "tiny-gpu-moe routing every token to all 16 experts: on the GPU", c,
                         "qwen3_moe"));

  // Mixtral (mixtral only): Mistral's attention, every layer MoE of 8 experts top-2 renormalized,
  // each expert intermediate_size wide, MixtralConfig's rope_theta and rms_norm_eps.
  // tiny-mixtral: tiny-moe's dims for the CPU goldens. tiny-gpu-mixtral: the GPU kernels' shape;
  // tiny-gpu-mixtral-all routes to every expert, as tiny-gpu-moe-all and for the same reason.
  c = tiny_shape();
  c.num_hidden_layers = 4;
  c.intermediate_size = 32;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 32;
  c.norm_topk_prob = true;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 1000000.0;
  presets.push_back(tiny("tiny-mixtral", "4 layers, every one 8 experts of 32 top-2 renormalized", c, "mixtral"));
  c = tiny_shape();
  c.hidden_size = 256;
  c.head_dim = 64;
  c.num_hidden_layers = 3;
  c.intermediate_size = 256;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 256;
  c.norm_topk_prob = true;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 1000000.0;
  presets.push_back(tiny("tiny-gpu-mixtral", "hidden 256, heads of 64, every layer 8 experts of 256 top-2: on the GPU",
                         c, "mixtral"));
  c.num_experts_per_tok = 8;
  presets.push_back(tiny("tiny-gpu-mixtral-all", "tiny-gpu-mixtral routing every token to all 8 experts: on the GPU",
                         c, "mixtral"));
  // Mixtral-8x7B's shapes (mistralai/Mixtral-8x7B-v0.1 config.json): 46.7 B parameters, 12.9 B active.
  c = ModelConfig{};
  c.vocab_size = 32000; c.hidden_size = 4096; c.intermediate_size = 14336; c.num_hidden_layers = 32;
  c.num_attention_heads = 32; c.num_key_value_heads = 8; c.head_dim = 128; c.max_position_embeddings = 32768;
  c.rms_norm_eps = 1e-5; c.rope_theta = 1000000.0; c.tie_word_embeddings = false;
  c.num_experts = 8; c.num_experts_per_tok = 2; c.moe_intermediate_size = 14336; c.norm_topk_prob = true;
  c.bos_token_id = 1; c.eos_token_id = 2;
  presets.push_back({"mixtral-8x7b", "Mixtral-8x7B shapes (32 layers of 8 experts, top-2)", "mixtral", c,
                     DType::kBF16, 4ull << 30});

  // DeepSeek-V3 (deepseek_v3 only): latent attention with q LoRA and YaRN (max_position_embeddings
  // = factor * original, so transformers versions that derive the factor from that ratio agree),
  // 16 experts in 4 groups, 2 groups kept, top-4, one shared expert, layer 0 dense.
  // tiny-deepseek-noqlora: plain q_proj, no rope scaling, and the non-interleaved rope layout.
  presets.push_back(tiny("tiny-deepseek",
                         "MLA (q LoRA 32, kv LoRA 16), YaRN x4; 16 experts / 4 groups, top-4, 1 shared",
                         tiny_deepseek_shape(), "deepseek_v3"));
  // tiny-deepseek-mtp: tiny-deepseek plus one MTP module (layer 3; mtp.h). Every main tensor has
  // tiny-deepseek's name and shape, so with the same seed the main model is the same.
  c = tiny_deepseek_shape();
  c.num_nextn_predict_layers = 1;
  presets.push_back(tiny("tiny-deepseek-mtp", "tiny-deepseek + 1 multi-token-prediction module (layer 3)", c,
                         "deepseek_v3"));
  c = tiny_deepseek_shape();
  c.q_lora_rank = 0;
  c.rope_scaling = RopeScaling{};
  c.max_position_embeddings = 2048;
  c.rope_interleave = false;
  presets.push_back(tiny("tiny-deepseek-noqlora", "MLA with a plain q_proj, no rope scaling, rope_interleave false", c,
                         "deepseek_v3"));

  // DeepSeek-V3.2 (deepseek_v32 only): tiny-deepseek with a 4-head indexer of 16 dims keeping 8 tokens.
  // The CUDA runner's DeepSeek variants: tiny-deepseek / tiny-dsa routing to every expert (all
  // groups kept) and, for DSA, a top-k above every test prompt, so no discrete choice can flip
  // between the GPU's bf16 and the f32 reference and the logits can be held to a tolerance. The
  // choices themselves are tested kernel by kernel (tests/gpu/test_moe_kernels.cpp, test_dsa_kernels.cpp).
  c = tiny_deepseek_shape();
  c.num_experts_per_tok = c.num_experts;
  c.topk_group = c.n_group;
  presets.push_back(tiny("tiny-gpu-deepseek-all", "tiny-deepseek routing to all 16 experts: on the GPU", c,
                         "deepseek_v3"));
  // FP8 on tensor-parallel GPUs cuts row-parallel weights on 128-column factor spans
  // (fp8_tp_shard.h): at --tp 2 each rank's o_proj (2 heads of 64 values), MLP, expert and
  // shared-expert widths are 128 here.
  c.hidden_size = 256;
  c.v_head_dim = 64;
  c.qk_nope_head_dim = 64;
  c.head_dim = 72;
  c.intermediate_size = 256;
  c.moe_intermediate_size = 256;
  presets.push_back(tiny("tiny-gpu-deepseek-tp", "tiny-gpu-deepseek-all at widths --tp 2 can cut in FP8 (hidden 256)",
                         c, "deepseek_v3"));
  c = tiny_dsa_shape();
  c.num_experts_per_tok = c.num_experts;
  c.topk_group = c.n_group;
  c.index_topk = 128;
  presets.push_back(tiny("tiny-gpu-dsa-all", "tiny-dsa routing to all 16 experts, indexer top-128: on the GPU", c,
                         "deepseek_v32"));
  presets.push_back(tiny("tiny-dsa", "tiny-deepseek + DSA indexer (16 heads x 16, top-8)", tiny_dsa_shape(),
                         "deepseek_v32"));
  // GLM-5 (glm_moe_dsa only): tiny-dsa in 4 layers, 2 of them sharing the previous layer's top-k.
  presets.push_back(tiny("tiny-glm-dsa", "tiny-dsa dims, 4 layers with indexer_types full/shared/full/shared",
                         tiny_glm_dsa_shape(), "glm_moe_dsa"));
  c = tiny_glm_dsa_shape();  // the CUDA runner's variant, as tiny-gpu-dsa-all for DeepSeek-V3.2
  c.num_experts_per_tok = c.num_experts;
  c.topk_group = c.n_group;
  c.index_topk = 128;
  presets.push_back(tiny("tiny-gpu-glm-all", "tiny-glm-dsa routing to all 16 experts, indexer top-128: on the GPU", c,
                         "glm_moe_dsa"));
  // The same two with one MTP module each (its layer a full DSA layer with its own indexer):
  // MTP drafting on the GPU with the sparse indexer (tests/gpu/test_cuda_speculative.cpp).
  c.num_nextn_predict_layers = 1;
  presets.push_back(tiny("tiny-gpu-glm-mtp", "tiny-gpu-glm-all + 1 multi-token-prediction module (layer 4)", c,
                         "glm_moe_dsa"));
  c = tiny_dsa_shape();
  c.num_experts_per_tok = c.num_experts;
  c.topk_group = c.n_group;
  c.index_topk = 128;
  c.num_nextn_predict_layers = 1;
  presets.push_back(tiny("tiny-gpu-dsa-mtp", "tiny-gpu-dsa-all + 1 multi-token-prediction module (layer 3)", c,
                         "deepseek_v32"));
  presets.push_back({"glm-5-reduced", "GLM-5 layer shapes, 4 layers (1 dense + 3 MoE of 64 experts), DSA top-2048",
                     "glm_moe_dsa", glm5_reduced_shape(), DType::kBF16, 4ull << 30});

  // Real shapes, from the published config.json files.
  c = ModelConfig{};
  c.vocab_size = 128256; c.hidden_size = 2048; c.intermediate_size = 8192; c.num_hidden_layers = 16;
  c.num_attention_heads = 32; c.num_key_value_heads = 8; c.head_dim = 64; c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5; c.rope_theta = 500000.0; c.tie_word_embeddings = true;
  c.rope_scaling = {RopeScalingType::kLlama3, 32.0, 1.0, 4.0, 8192};
  c.bos_token_id = 128000; c.eos_token_id = 128001;
  presets.push_back({"llama-3.2-1b", "Llama-3.2-1B shapes", "llama", c, DType::kBF16, 2ull << 30});

  c.hidden_size = 4096; c.intermediate_size = 14336; c.num_hidden_layers = 32; c.head_dim = 128;
  c.tie_word_embeddings = false; c.rope_scaling.factor = 8.0;
  presets.push_back({"llama-3.1-8b", "Llama-3.1-8B shapes", "llama", c, DType::kBF16, 4ull << 30});

  c = ModelConfig{};
  c.vocab_size = 151936; c.hidden_size = 1024; c.intermediate_size = 3072; c.num_hidden_layers = 28;
  c.num_attention_heads = 16; c.num_key_value_heads = 8; c.head_dim = 128; c.max_position_embeddings = 40960;
  c.rms_norm_eps = 1e-6; c.rope_theta = 1000000.0; c.tie_word_embeddings = true;
  c.bos_token_id = 151643; c.eos_token_id = 151645;
  presets.push_back({"qwen3-0.6b", "Qwen3-0.6B shapes", "qwen3", c, DType::kBF16, 2ull << 30});

  c.hidden_size = 4096; c.intermediate_size = 12288; c.num_hidden_layers = 36; c.num_attention_heads = 32;
  c.tie_word_embeddings = false;
  presets.push_back({"qwen3-8b", "Qwen3-8B shapes", "qwen3", c, DType::kBF16, 4ull << 30});

  c = ModelConfig{};
  c.vocab_size = 151936; c.hidden_size = 2048; c.intermediate_size = 6144; c.num_hidden_layers = 48;
  c.num_attention_heads = 32; c.num_key_value_heads = 4; c.head_dim = 128; c.max_position_embeddings = 40960;
  c.rms_norm_eps = 1e-6; c.rope_theta = 1000000.0; c.tie_word_embeddings = false;
  c.num_experts = 128; c.num_experts_per_tok = 8; c.moe_intermediate_size = 768; c.norm_topk_prob = true;
  c.decoder_sparse_step = 1;
  c.bos_token_id = 151643; c.eos_token_id = 151645;
  presets.push_back({"qwen3-30b-a3b", "Qwen3-30B-A3B shapes (128 experts, top-8)", "qwen3_moe", c, DType::kBF16,
                     4ull << 30});

  // DeepSeek-V3's per-layer shapes with 4 of its 61 layers (one dense, three MoE) and 64 of its 256
  // routed experts per layer (8 groups of 8, 4 groups kept, top-8 as in the real model), so that
  // it fits one H200 and its disk: about 11.6 B parameters, ~23 GB in bf16. Attention, the latent
  // cache, one expert's and the shared expert's shapes, and the active bytes per token are the
  // real model's.
  c = ModelConfig{};
  c.vocab_size = 129280; c.hidden_size = 7168; c.intermediate_size = 18432; c.num_hidden_layers = 4;
  c.num_attention_heads = 128; c.num_key_value_heads = 128; c.max_position_embeddings = 163840;
  c.rms_norm_eps = 1e-6; c.rope_theta = 10000.0; c.tie_word_embeddings = false;
  c.q_lora_rank = 1536; c.kv_lora_rank = 512; c.qk_nope_head_dim = 128; c.qk_rope_head_dim = 64; c.v_head_dim = 128;
  c.head_dim = 192; c.rope_interleave = true;
  c.rope_scaling.type = RopeScalingType::kYarn; c.rope_scaling.factor = 40.0;
  c.rope_scaling.original_max_position_embeddings = 4096; c.rope_scaling.beta_fast = 32.0;
  c.rope_scaling.beta_slow = 1.0; c.rope_scaling.mscale = 1.0; c.rope_scaling.mscale_all_dim = 1.0;
  c.router = RouterKind::kSigmoidGroupLimited; c.num_experts = 64; c.num_experts_per_tok = 8;
  c.moe_intermediate_size = 2048; c.n_shared_experts = 1; c.n_group = 8; c.topk_group = 4;
  c.routed_scaling_factor = 2.5; c.norm_topk_prob = true; c.first_k_dense_replace = 1;
  c.bos_token_id = 0; c.eos_token_id = 1;
  presets.push_back({"deepseek-v3-reduced", "DeepSeek-V3 layer shapes, 4 layers (1 dense + 3 MoE of 64 experts)",
                     "deepseek_v3", c, DType::kBF16, 4ull << 30});
  // DeepSeek-V3.2(-Exp)'s config.json: DeepSeek-V3's shapes plus a 64-head indexer of 128 keeping 2048.
  c.index_n_heads = 64; c.index_head_dim = 128; c.index_topk = 2048;
  presets.push_back({"deepseek-v32-reduced",
                     "DeepSeek-V3.2 layer shapes, 4 layers (1 dense + 3 MoE of 64 experts), DSA top-2048",
                     "deepseek_v32", c, DType::kBF16, 4ull << 30});
  // DeepSeek-V2-Lite's shapes (15.7B, 64 routed experts top-6 + 2 shared, no q LoRA) in the
  // deepseek_v3 architecture: V2's softmax routing becomes V3's sigmoid scoring with one group,
  // which reads the same weights per token. The single-GPU performance shape.
  c = ModelConfig{};
  c.vocab_size = 102400; c.hidden_size = 2048; c.intermediate_size = 10944; c.num_hidden_layers = 27;
  c.num_attention_heads = 16; c.num_key_value_heads = 16; c.max_position_embeddings = 163840;
  c.rms_norm_eps = 1e-6; c.rope_theta = 10000.0; c.tie_word_embeddings = false;
  c.q_lora_rank = 0; c.kv_lora_rank = 512; c.qk_nope_head_dim = 128; c.qk_rope_head_dim = 64; c.v_head_dim = 128;
  c.head_dim = 192; c.rope_interleave = true;
  c.rope_scaling.type = RopeScalingType::kYarn; c.rope_scaling.factor = 40.0;
  c.rope_scaling.original_max_position_embeddings = 4096; c.rope_scaling.beta_fast = 32.0;
  c.rope_scaling.beta_slow = 1.0; c.rope_scaling.mscale = 0.707; c.rope_scaling.mscale_all_dim = 0.707;
  c.router = RouterKind::kSigmoidGroupLimited; c.num_experts = 64; c.num_experts_per_tok = 6;
  c.moe_intermediate_size = 1408; c.n_shared_experts = 2; c.n_group = 1; c.topk_group = 1;
  c.routed_scaling_factor = 1.0; c.norm_topk_prob = false; c.first_k_dense_replace = 1;
  c.bos_token_id = 100000; c.eos_token_id = 100001;
  presets.push_back({"deepseek-v2-lite", "DeepSeek-V2-Lite shapes (27 layers, 64 experts top-6 + 2 shared)",
                     "deepseek_v3", c, DType::kBF16, 4ull << 30});
  // The same with one DeepSeek-V3-style MTP module (an MoE layer of these shapes, with its own
  // embedding and head copies, as DeepSeek-V3's checkpoint stores them): the MTP speed figures.
  c.num_nextn_predict_layers = 1;
  presets.push_back({"deepseek-v2-lite-mtp", "deepseek-v2-lite + 1 multi-token-prediction module (layer 27)",
                     "deepseek_v3", c, DType::kBF16, 4ull << 30});
  return presets;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = build_presets();
  return presets;
}

}  // namespace tachyon::model
