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

void CudaModelRunner::tune_gemms(const engine::EngineConfig& config) {
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

// One dense product of the forward, by role, on the workspace buffers it always uses.
void CudaModelRunner::run_role(Role role, int64_t layer, int64_t m) {
  const model::ModelConfig& c = weights_.config();
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const CudaLayerWeights* w = layer >= 0 ? &weights_.layers()[static_cast<size_t>(layer)] : nullptr;
  const bool gemv = use_gemv(role, m);
  const auto bf = kc::GemmOutputType::kBF16;
  // Row-parallel products (o_proj, down) are summed over the TP group: their bias joins once.
  const bool row_bias = !tensor_parallel() || tp_.comm->rank() == 0;
  auto linear = [&](void* out, kc::GemmOutputType type, const bf16* in, const bf16* weight, const bf16* bias,
                    int64_t n, int64_t k) {
    if (gemv) {
      kc::gemv(out, type, in, weight, bias, m, n, k, stream_);
    } else {
      gemm_.linear(out, type, in, weight, bias, m, n, k, stream_);
    }
  };
  switch (role) {
    case Role::kQkv:
      linear(ws_->qkv, bf, ws_->normed, w->qkv, w->qkv_bias, c.q_size() + 2 * c.kv_size(), H);
      break;
    case Role::kO:
      linear(ws_->proj, bf, ws_->attn, w->o_proj, row_bias ? w->o_proj_bias : nullptr, H, c.q_size());
      break;
    case Role::kGateUp:
      linear(ws_->gate_up, bf, ws_->normed, w->gate_up, w->gate_up_bias, 2 * I, H);
      break;
    case Role::kDownWithSilu:
      kc::silu_and_mul(ws_->act, ws_->gate_up, m, I, stream_);
      linear(ws_->proj, bf, ws_->act, w->down, row_bias ? w->down_bias : nullptr, H, I);
      break;
    case Role::kLmHead:
      linear(tensor_parallel() ? ws_->local_logits : ws_->logits, kc::GemmOutputType::kF32, ws_->selected,
             weights_.lm_head(), nullptr, vocab_rows_, H);
      break;
  }
}

// Median ms of one pass of `role` over every layer (so each layer's weights come from HBM, as
// in a real step), with cuBLASLt or with our GEMV.
float CudaModelRunner::time_role(Role role, int32_t m, bool gemv) {
  gemv_choice_[{role, m}] = gemv;
  const model::ModelConfig& c = weights_.config();
  const int64_t layers = role == Role::kLmHead ? 1 : c.num_hidden_layers;
  const bool mlp_role = role == Role::kGateUp || role == Role::kDownWithSilu;
  auto pass = [&] {
    for (int64_t l = 0; l < layers; ++l) {
      if (mlp_role && c.is_moe_layer(l)) continue;  // its MLP is the experts'
      run_role(role, role == Role::kLmHead ? -1 : l, m);
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
  engine::EngineConfig keyed = config_;
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
      if (saved.value("key", "") == key) {
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
  // Inputs with a finite, nonzero pattern (bf16 0x3C3C ~ 0.0115): timing on NaN or zeros misleads.
  const size_t T = static_cast<size_t>(limits_.max_tokens);
  for (auto [buffer, width] : {std::pair<bf16*, int64_t>{ws_->normed, c.hidden_size}, {ws_->attn, c.q_size()},
                               {ws_->gate_up, 2 * c.intermediate_size}, {ws_->selected, c.hidden_size}}) {
    const size_t rows = buffer == ws_->selected ? static_cast<size_t>(limits_.max_seqs) : T;
    TACHYON_CUDA_CHECK(cudaMemsetAsync(buffer, 0x3C, rows * static_cast<size_t>(width) * 2, stream_));
  }
  const int64_t n_of[] = {c.q_size() + 2 * c.kv_size(), c.hidden_size, 2 * c.intermediate_size, c.hidden_size,
                          vocab_rows_};
  const int64_t k_of[] = {c.hidden_size, c.q_size(), c.hidden_size, c.intermediate_size, c.hidden_size};
  for (int32_t m : cuda_graph_batch_sizes(config_)) {
    if (m > 8) break;
    for (Role role : {Role::kQkv, Role::kO, Role::kGateUp, Role::kDownWithSilu, Role::kLmHead}) {
      const int r = static_cast<int>(role);
      if ((role == Role::kQkv || role == Role::kO) && c.is_mla()) continue;  // MLA's own products
      if ((role == Role::kGateUp || role == Role::kDownWithSilu) && !has_dense_mlp()) continue;
      if (!kc::gemv_supports(m, n_of[r], k_of[r])) continue;
      const float cublas_ms = time_role(role, m, false);
      const float gemv_ms = time_role(role, m, true);
      gemv_choice_[{role, m}] = gemv_ms < cublas_ms;
      static const char* kNames[] = {"qkv", "o_proj", "gate_up", "silu+down", "lm_head"};
      std::fprintf(stderr, "[tachyon] m=%d %-9s all layers: cuBLASLt %.3f ms, GEMV %.3f ms -> %s\n", m, kNames[r],
                   cublas_ms, gemv_ms, gemv_ms < cublas_ms ? "GEMV" : "cuBLASLt");
    }
  }
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  nlohmann::json saved = {{"key", key}, {"choices", nlohmann::json::array()}};
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
