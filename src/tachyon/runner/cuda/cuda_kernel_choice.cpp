// The CUDA runner's timed kernel choices, made once at start-up and cached per kernel-choice key:
// cuBLASLt algorithms for the step's GEMM shapes (tune_gemms), and for decode-sized products
// (m <= 8) our GEMV or cuBLASLt, whichever is faster on the loaded weights (choose_gemv). Also
// the products by role (run_role) both the timing and the forward issue.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "tachyon/base/file_util.h"
#include "tachyon/dist/communicator.h"
#include "tachyon/kernels/cuda/activation.h"
#include "tachyon/kernels/cuda/gemv.h"
#include "tachyon/runner/cuda/cuda_model_runner.h"
#include "tachyon/runner/cuda/cuda_runner_workspace.h"

namespace tachyon::runner {

namespace kc = kernels::cuda;

void CudaModelRunner::tune_gemms(const core::EngineConfig& config) {
  // The shapes the step loop issues most: every decode bucket and a full prefill step. Tuned
  // choices are cached on disk under the plan hash, so a restart skips the timing.
  const model::ModelConfig& c = weights_.config();
  std::vector<int64_t> rows;
  for (int32_t b : cuda_graph_batch_sizes(config)) rows.push_back(b);
  rows.push_back(limits_.max_tokens);
  std::vector<kc::GemmProblem> problems;
  const auto bf = kc::GemmOutputType::kBF16, f32 = kc::GemmOutputType::kF32;
  for (int64_t m : rows) {
    if (c.is_mla()) {
      const int64_t heads = c.num_attention_heads, qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
      if (c.q_lora_rank > 0) {
        problems.push_back({m, c.q_lora_rank, c.hidden_size, bf, false});
        problems.push_back({m, heads * qk, c.q_lora_rank, bf, false});
      } else {
        problems.push_back({m, heads * qk, c.hidden_size, bf, false});
      }
      problems.push_back({m, c.kv_lora_rank + c.qk_rope_head_dim, c.hidden_size, bf, false});
      problems.push_back({m, c.hidden_size, heads * c.v_head_dim, bf, false});
      if (c.n_shared_experts > 0) {
        const int64_t shared_inter = c.moe_intermediate_size * c.n_shared_experts;
        problems.push_back({m, 2 * shared_inter, c.hidden_size, bf, false});
        problems.push_back({m, c.hidden_size, shared_inter, bf, false});
      }
      if (c.has_sparse_attention()) {
        problems.push_back({m, c.index_n_heads * c.index_head_dim, c.q_lora_rank, bf, false});
        problems.push_back({m, c.index_head_dim, c.hidden_size, bf, false});
        problems.push_back({m, c.index_n_heads, c.hidden_size, f32, false});
      }
    } else {
      problems.push_back({m, c.q_size() + 2 * c.kv_size(), c.hidden_size, bf, c.qkv_bias});
      problems.push_back({m, c.hidden_size, c.q_size(), bf, c.o_proj_bias});
    }
    problems.push_back({m, 2 * c.intermediate_size, c.hidden_size, kc::GemmOutputType::kBF16, c.mlp_bias});
    problems.push_back({m, c.hidden_size, c.intermediate_size, kc::GemmOutputType::kBF16, c.mlp_bias});
    if (m <= limits_.max_seqs) problems.push_back({m, vocab_rows_, c.hidden_size, kc::GemmOutputType::kF32, false});
    if (c.is_moe()) problems.push_back({m, c.num_experts, c.hidden_size, kc::GemmOutputType::kF32, false});  // router
  }
  // Tuned GEMM algorithms, one file per kernel-choice key.
  const std::string key = kernel_choice_key();
  const std::filesystem::path cache = user_cache_dir() / "gemm" / (key + ".json");
  if (gemm_.load_cache(cache.string(), key)) return;
  gemm_.tune(problems, stream_);
  std::error_code ignored;
  std::filesystem::create_directories(cache.parent_path(), ignored);
  try {
    gemm_.save_cache(cache.string(), key);
  } catch (const Error& e) {
    std::fprintf(stderr, "[tachyon] warning: GEMM choices not cached (%s)\n", e.what());
  }
}

bool CudaModelRunner::use_gemv(Role role, int64_t m) const {
  auto it = gemv_choice_.find({role, m});
  return it != gemv_choice_.end() && it->second;
}

void CudaModelRunner::plan_roles() {
  const model::ModelConfig& c = weights_.config();
  const int64_t H = c.hidden_size, heads = c.num_attention_heads;
  const int64_t qk = c.qk_nope_head_dim + c.qk_rope_head_dim, shared = c.moe_intermediate_size * c.n_shared_experts;
  const bool mla = c.is_mla(), moe = c.is_moe(), dense_mlp = has_dense_mlp();
  auto shape_of = [&](Role role) -> RoleShape {
    switch (role) {
      case Role::kQkv: return mla ? RoleShape{} : RoleShape{c.q_size() + 2 * c.kv_size(), H};
      case Role::kO: return mla ? RoleShape{} : RoleShape{H, c.q_size()};
      case Role::kGateUp: return dense_mlp ? RoleShape{2 * c.intermediate_size, H} : RoleShape{};
      case Role::kDownWithSilu: return dense_mlp ? RoleShape{H, c.intermediate_size} : RoleShape{};
      case Role::kLmHead: return {vocab_rows_, H};
      case Role::kMlaQA: return !mla ? RoleShape{} : RoleShape{c.q_lora_rank > 0 ? c.q_lora_rank : heads * qk, H};
      case Role::kMlaQB: return !mla || c.q_lora_rank == 0 ? RoleShape{} : RoleShape{heads * qk, c.q_lora_rank};
      case Role::kMlaKvA: return !mla ? RoleShape{} : RoleShape{c.kv_lora_rank + c.qk_rope_head_dim, H};
      case Role::kMlaO: return !mla ? RoleShape{} : RoleShape{H, heads * c.v_head_dim};
      case Role::kRouter: return !moe ? RoleShape{} : RoleShape{c.num_experts, H};
      case Role::kSharedGateUp: return !moe || shared == 0 ? RoleShape{} : RoleShape{2 * shared, H};
      case Role::kSharedDownWithSilu: return !moe || shared == 0 ? RoleShape{} : RoleShape{H, shared};
    }
    return {};
  };
  for (int r = 0; r < kRoleCount; ++r) role_shapes_[static_cast<size_t>(r)] = shape_of(static_cast<Role>(r));
}

bool CudaModelRunner::role_runs_on(Role role, int64_t layer) const {
  const model::ModelConfig& c = weights_.config();
  if (role == Role::kLmHead) return layer < 0;
  if (layer < 0 || role_shape(role).n == 0) return false;
  switch (role) {
    case Role::kGateUp:
    case Role::kDownWithSilu: return !c.is_moe_layer(layer);  // an MoE layer's MLP is the experts'
    case Role::kRouter:
    case Role::kSharedGateUp:
    case Role::kSharedDownWithSilu: return c.is_moe_layer(layer);
    default: return true;
  }
}

// One product of the forward, by role, on the workspace buffers it always uses.
void CudaModelRunner::run_role(Role role, int64_t layer, int64_t m) {
  const int64_t I = weights_.config().intermediate_size;
  const CudaLayerWeights* w = layer >= 0 ? &weights_.layers()[static_cast<size_t>(layer)] : nullptr;
  const RoleShape shape = role_shape(role);
  const bool gemv = use_gemv(role, m);
  const auto bf = kc::GemmOutputType::kBF16;
  // Row-parallel products (o_proj, down) are summed over the TP group: their bias joins once.
  const bool row_bias = !tensor_parallel() || tp_.comm->rank() == 0;
  auto linear = [&](void* out, kc::GemmOutputType type, const bf16* in, const bf16* weight, const bf16* bias) {
    if (gemv) {
      kc::gemv(out, type, in, weight, bias, m, shape.n, shape.k, stream_);
    } else {
      gemm_.linear(out, type, in, weight, bias, m, shape.n, shape.k, stream_);
    }
  };
  switch (role) {
    case Role::kQkv:
      linear(ws_->qkv, bf, ws_->normed, w->qkv, w->qkv_bias);
      break;
    case Role::kO:
      linear(ws_->proj, bf, ws_->attn, w->o_proj, row_bias ? w->o_proj_bias : nullptr);
      break;
    case Role::kGateUp:
      linear(ws_->gate_up, bf, ws_->normed, w->gate_up, w->gate_up_bias);
      break;
    case Role::kDownWithSilu:
      kc::silu_and_mul(ws_->act, ws_->gate_up, m, I, stream_);
      linear(ws_->proj, bf, ws_->act, w->down, row_bias ? w->down_bias : nullptr);
      break;
    case Role::kLmHead:
      linear(tensor_parallel() ? ws_->local_logits : ws_->logits, kc::GemmOutputType::kF32, ws_->selected,
             weights_.lm_head(), nullptr);
      break;
    case Role::kMlaQA:  // q_a_proj into the q LoRA, or (no q LoRA) q_proj straight to the heads
      if (w->q_a_proj != nullptr) {
        linear(ws_->q_lora, bf, ws_->normed, w->q_a_proj, nullptr);
      } else {
        linear(ws_->q_full, bf, ws_->normed, w->q_b_proj, nullptr);
      }
      break;
    case Role::kMlaQB:
      linear(ws_->q_full, bf, ws_->q_lora, w->q_b_proj, nullptr);
      break;
    case Role::kMlaKvA:
      linear(ws_->kv_a, bf, ws_->normed, w->kv_a_proj, nullptr);
      break;
    case Role::kMlaO:
      linear(ws_->proj, bf, ws_->attn, w->o_proj, nullptr);
      break;
    case Role::kRouter:
      linear(ws_->router_logits, kc::GemmOutputType::kF32, ws_->normed, w->router, nullptr);
      break;
    case Role::kSharedGateUp:
      linear(ws_->shared_gate_up, bf, ws_->normed, w->shared_gate_up, nullptr);
      break;
    case Role::kSharedDownWithSilu:
      kc::silu_and_mul(ws_->shared_act, ws_->shared_gate_up, m, shape.k, stream_);
      linear(ws_->shared_out, bf, ws_->shared_act, w->shared_down, nullptr);
      break;
  }
}

// Median ms of one pass of `role` over every layer (so each layer's weights come from HBM, as
// in a real step), with cuBLASLt or with our GEMV.
float CudaModelRunner::time_role(Role role, int32_t m, bool gemv) {
  gemv_choice_[{role, m}] = gemv;
  const int64_t layers = weights_.config().num_hidden_layers;
  auto pass = [&] {
    for (int64_t l = role == Role::kLmHead ? -1 : 0; l < (role == Role::kLmHead ? 0 : layers); ++l) {
      if (role_runs_on(role, l)) run_role(role, l, m);
    }
  };
  cudaEvent_t start, stop;
  TACHYON_CUDA_CHECK(cudaEventCreate(&start));
  TACHYON_CUDA_CHECK(cudaEventCreate(&stop));
  pass();
  std::vector<float> ms;
  for (int r = 0; r < 5; ++r) {
    TACHYON_CUDA_CHECK(cudaEventRecord(start, stream_));
    pass();
    TACHYON_CUDA_CHECK(cudaEventRecord(stop, stream_));
    TACHYON_CUDA_CHECK(cudaEventSynchronize(stop));
    float elapsed = 0;
    TACHYON_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    ms.push_back(elapsed);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The key the timed kernel choices (GEMM algorithms, GEMV or not) are cached under: the plan
// hash of this config with CUDA graphs on. Graphs and --enforce-eager then share one set of
// choices, so both run the same kernels (and give the same tokens), and a restart reuses them:
// choices timed anew could flip where two kernels are about as fast and change the numbers.
std::string CudaModelRunner::kernel_choice_key() const {
  core::EngineConfig keyed = config_;
  keyed.device.enforce_eager = false;
  return keyed.plan_hash();
}

void CudaModelRunner::choose_gemv() {
  const model::ModelConfig& c = weights_.config();
  const std::string key = kernel_choice_key();
  const std::filesystem::path cache = user_cache_dir() / "gemv" / (key + ".json");
  try {
    if (std::filesystem::exists(cache)) {
      const nlohmann::json saved = read_json_file(cache);
      // "roles": choices saved before a role was added lack it; time them all again.
      if (saved.value("key", "") == key && saved.value("roles", 0) == kRoleCount) {
        for (const auto& choice : saved["choices"]) {
          gemv_choice_[{static_cast<Role>(choice[0].get<int>()), choice[1].get<int64_t>()}] = choice[2].get<bool>();
        }
        return;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[tachyon] warning: ignoring the GEMV choices in %s (%s)\n", cache.string().c_str(), e.what());
    gemv_choice_.clear();
  }
  static const char* kNames[kRoleCount] = {"qkv",    "o_proj", "gate_up", "silu+down",     "lm_head",       "mla q_a",
                                           "mla q_b", "kv_a",  "mla o",   "router",        "shared gate_up",
                                           "shared silu+down"};
  // Each role's input rows (at most 8 are read while timing) get a finite, nonzero pattern
  // (bf16 0x3C3C ~ 0.0115): timing on NaN or zeros misleads.
  const int64_t shared = c.moe_intermediate_size * c.n_shared_experts;
  const size_t rows = static_cast<size_t>(std::min<int32_t>(8, std::min(limits_.max_tokens, limits_.max_seqs)));
  for (int r = 0; r < kRoleCount; ++r) {
    const Role role = static_cast<Role>(r);
    const RoleShape shape = role_shape(role);
    if (shape.n == 0) continue;
    const bf16* input = role == Role::kO || role == Role::kMlaO       ? ws_->attn
                        : role == Role::kDownWithSilu                 ? ws_->gate_up
                        : role == Role::kLmHead                       ? ws_->selected
                        : role == Role::kMlaQB                        ? ws_->q_lora
                        : role == Role::kSharedDownWithSilu           ? ws_->shared_gate_up
                                                                      : ws_->normed;
    const int64_t width = role == Role::kDownWithSilu ? 2 * c.intermediate_size
                          : role == Role::kSharedDownWithSilu ? 2 * shared
                                                             : shape.k;
    TACHYON_CUDA_CHECK(cudaMemsetAsync(const_cast<bf16*>(input), 0x3C, rows * static_cast<size_t>(width) * 2, stream_));
  }
  for (int32_t m : cuda_graph_batch_sizes(config_)) {
    if (m > 8) break;
    for (int r = 0; r < kRoleCount; ++r) {
      const Role role = static_cast<Role>(r);
      const RoleShape shape = role_shape(role);
      if (shape.n == 0 || !kc::gemv_supports(m, shape.n, shape.k)) continue;
      const float cublas_ms = time_role(role, m, false);
      const float gemv_ms = time_role(role, m, true);
      gemv_choice_[{role, m}] = gemv_ms < cublas_ms;
      std::fprintf(stderr, "[tachyon] m=%d %-16s all layers: cuBLASLt %.3f ms, GEMV %.3f ms -> %s\n", m, kNames[r],
                   cublas_ms, gemv_ms, gemv_ms < cublas_ms ? "GEMV" : "cuBLASLt");
    }
  }
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  nlohmann::json saved = {{"key", key}, {"roles", kRoleCount}, {"choices", nlohmann::json::array()}};
  for (const auto& [role_m, gemv] : gemv_choice_) {
    saved["choices"].push_back({static_cast<int>(role_m.first), role_m.second, gemv});
  }
  try {
    write_file(cache, saved.dump());
  } catch (const Error& e) {
    std::fprintf(stderr, "[tachyon] warning: GEMV choices not cached (%s)\n", e.what());
  }
}

}  // namespace tachyon::runner
