// The CUDA runner's timed kernel choices, made once at start-up and cached per kernel-choice key:
// cuBLASLt algorithms for the step's GEMM shapes (tune_gemms), and for decode-sized products
// (m <= 8) our GEMV or cuBLASLt, whichever is faster on the loaded weights (choose_gemv). The
// problems and roles are the decoder's (model/gpu/); the timing runs its roles over every layer.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>

#include "tachyon/base/file_util.h"
#include "tachyon/kernels/cuda/gemv.h"
#include "tachyon/runner/cuda/cuda_model_runner.h"

namespace tachyon::runner {

namespace kc = kernels::cuda;

namespace {

// Publishes `text`, the choices timed here, at `path`; where another process (or rank) timing the
// same key landed its file first, `adopt` loads that one (true when it is usable), so every one of
// them runs the first file's choices. A stale file (another cuBLASLt, damaged) is replaced. A
// failed write only costs the next start its timing.
void publish_or_adopt(const std::filesystem::path& path, const std::string& text, const std::function<bool()>& adopt,
                      const char* what) {
  try {
    if (!write_file_if_absent(path, text) && !adopt()) write_file_atomically(path, text);
  } catch (const Error& e) {
    std::fprintf(stderr, "[tachyon] warning: %s choices not cached (%s)\n", what, e.what());
  }
}

}  // namespace

void CudaModelRunner::tune_gemms(const core::EngineConfig& config) {
  // The shapes the step loop issues most: every decode bucket and a full prefill step. Tuned
  // choices are cached on disk under the plan hash, so a restart skips the timing.
  std::vector<int64_t> rows;
  for (int32_t b : cuda_graph_batch_sizes(config)) rows.push_back(b);
  rows.push_back(limits_.max_tokens);
  std::vector<kc::GemmProblem> problems;
  auto add = [&](const kc::GemmProblem& p) {
    problems.push_back(p);
    // An FP8 run's projections of more rows than fp8_gemv serves are FP8 products (linear()):
    // tuned as those too. Which of a model's projections stayed bf16 is the checkpoint's, so
    // both forms are tuned (once per kernel-choice key: the choices are cached), the FP8 one with
    // the scaling its products of p.m rows use (per_row_product(): per row, per 128 columns, or
    // both where the model has both).
    const bool fp8_product = weights_.fp8() && p.out_type == kc::GemmOutputType::kBF16 && p.n % 16 == 0 &&
                             p.k % 16 == 0 && !kc::fp8_gemv_supports(p.m, p.n, p.k);
    if (!fp8_product) return;
    const bool per_row_form = weights_.fp8_per_row() && per_row_rows(p.m);
    const bool block_form = weights_.fp8_by_block() || (weights_.fp8_per_row() && !per_row_form);
    for (const bool per_row : {false, true}) {
      if (per_row ? per_row_form : block_form) {
        problems.push_back({.m = p.m, .n = p.n, .k = p.k, .has_bias = p.has_bias, .fp8 = true, .fp8_per_row = per_row});
      }
    }
  };
  for (int64_t m : rows) {
    for (const kc::GemmProblem& p : decoder_->gemm_problems(m)) add(p);
    if (mtp_ != nullptr) {
      for (const kc::GemmProblem& p : mtp_->gemm_problems(m)) add(p);
    }
  }
  // Tuned GEMM algorithms, one file per kernel-choice key.
  const std::string key = kernel_choice_key();
  const std::filesystem::path cache = user_cache_dir() / "gemm" / (key + ".json");
  if (gemm_.load_cache(cache.string(), key)) return;
  gemm_.tune(problems, stream_);
  publish_or_adopt(cache, gemm_.cache_text(key), [&] { return gemm_.load_cache(cache.string(), key); }, "GEMM");
}

bool CudaModelRunner::use_gemv(LinearRole role, int64_t m) const {
  auto it = gemv_choice_.find({role, m});
  return it != gemv_choice_.end() && it->second;
}

// Median ms of one pass of `role` over every layer (so each layer's weights come from HBM, as
// in a real step), with cuBLASLt or with our GEMV.
float CudaModelRunner::time_role(LinearRole role, int32_t m, bool gemv) {
  gemv_choice_[{role, m}] = gemv;
  const int64_t layers = weights_.config().num_hidden_layers;
  auto pass = [&] {
    for (int64_t l = role == LinearRole::kLmHead ? -1 : 0; l < (role == LinearRole::kLmHead ? 0 : layers); ++l) {
      if (decoder_->role_runs_on(role, l)) decoder_->run_role(role, l, m);
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

// The GEMV choices saved under `key` at `path`, or false when there are none usable (no file, another
// key, a file from before a role was added: time them all again).
bool CudaModelRunner::load_gemv_choices(const std::filesystem::path& path, const std::string& key) {
  try {
    if (!std::filesystem::exists(path)) return false;
    const nlohmann::json saved = read_json_file(path);
    if (saved.value("key", "") != key || saved.value("roles", 0) != model::gpu::kLinearRoleCount) return false;
    std::map<std::pair<LinearRole, int64_t>, bool> choices;
    for (const auto& choice : saved.at("choices")) {
      choices[{static_cast<LinearRole>(choice.at(0).get<int>()), choice.at(1).get<int64_t>()}] = choice.at(2).get<bool>();
    }
    gemv_choice_ = std::move(choices);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[tachyon] warning: ignoring the GEMV choices in %s (%s)\n", path.string().c_str(), e.what());
    return false;
  }
}

void CudaModelRunner::choose_gemv() {
  const std::string key = kernel_choice_key();
  const std::filesystem::path cache = user_cache_dir() / "gemv" / (key + ".json");
  if (load_gemv_choices(cache, key)) return;
  // Each role's input rows (at most 8 are read while timing) get a finite, nonzero pattern
  // (bf16 0x3C3C ~ 0.0115): timing on NaN or zeros misleads.
  const std::vector<model::gpu::RoleInfo> roles = decoder_->roles();
  const size_t rows = static_cast<size_t>(std::min<int32_t>(8, std::min(limits_.max_tokens, limits_.max_seqs)));
  for (const model::gpu::RoleInfo& r : roles) {
    if (r.shape.n == 0) continue;
    TACHYON_CUDA_CHECK(cudaMemsetAsync(const_cast<kc::bf16*>(r.input), 0x3C, rows * static_cast<size_t>(r.input_width) * 2,
                                       stream_));
  }
  for (int32_t m : cuda_graph_batch_sizes(config_)) {
    if (m > 8) break;
    for (const model::gpu::RoleInfo& r : roles) {
      if (r.shape.n == 0 || !kc::gemv_supports(m, r.shape.n, r.shape.k)) continue;
      const float cublas_ms = time_role(r.role, m, false);
      const float gemv_ms = time_role(r.role, m, true);
      gemv_choice_[{r.role, m}] = gemv_ms < cublas_ms;
      std::fprintf(stderr, "[tachyon] m=%d %-16s all layers: cuBLASLt %.3f ms, GEMV %.3f ms -> %s\n", m,
                   model::gpu::linear_role_name(r.role), cublas_ms, gemv_ms, gemv_ms < cublas_ms ? "GEMV" : "cuBLASLt");
    }
  }
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  nlohmann::json saved = {{"key", key}, {"roles", model::gpu::kLinearRoleCount}, {"choices", nlohmann::json::array()}};
  for (const auto& [role_m, gemv] : gemv_choice_) {
    saved["choices"].push_back({static_cast<int>(role_m.first), role_m.second, gemv});
  }
  publish_or_adopt(cache, saved.dump(), [&] { return load_gemv_choices(cache, key); }, "GEMV");
}

}  // namespace tachyon::runner
