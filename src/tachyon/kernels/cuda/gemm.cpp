// GemmRunner (gemm.h) over cuBLASLt: per-shape plans, heuristic or tuned algorithms, the cache.
//
// The row-major trick: cuBLAS is column-major, and a row-major [r, c] matrix is the same bytes
// as a column-major [c, r] one. So in[m, k] is column-major in^T [k, m] (ld k), weight[n, k] is
// column-major [k, n] (ld k) and out[m, n] is column-major out^T [n, m] (ld n), and we ask for
//   D[n, m] = op_T(A = weight as [k, n]) @ (B = in as [k, m])  ==  (in @ weight^T)^T,
// with D = C = out and beta = 0. The bias epilogue adds bias[i] to row i of D, i.e. to output
// feature i: exactly nn.Linear's bias. Test: tests/gpu/test_gemm.cpp (build target gpu_gemm).
#include "tachyon/kernels/cuda/gemm.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tachyon/base/file_util.h"
#include "tachyon/tensor/cuda/device_buffer.h"
#include "tachyon/tensor/dtype.h"

// Checks a cuBLASLt status; `context` (streamable) names the shape in the message.
#define TACHYON_CUBLAS_CHECK(call, context)                                                             \
  do {                                                                                                  \
    const cublasStatus_t tachyon_cublas_status = (call);                                                \
    TACHYON_CHECK(tachyon_cublas_status == CUBLAS_STATUS_SUCCESS)                                       \
        << #call << ": " << cublasLtGetStatusName(tachyon_cublas_status) << " ("                        \
        << cublasLtGetStatusString(tachyon_cublas_status) << ") for gemm " << context;                  \
  } while (0)

namespace tachyon::kernels::cuda {
namespace {

// Every pointer, and so every row (k, n multiples of 8 bf16), starts on 16 bytes; the
// heuristic is told exactly this, so it never picks a kernel that needs more.
constexpr uint64_t kAlignmentBytes = 16;
// Stands in for the bias pointer whenever cuBLASLt picks or checks an algorithm: it reads the
// pointer's alignment from its value, and linear() promises 16 bytes, no more.
const void* const kBiasAlignmentProbe = reinterpret_cast<const void*>(uintptr_t{kAlignmentBytes});

constexpr const char* kCacheFormat = "tachyon-gemm-algos";
constexpr int kCacheFormatVersion = 3;  // 2: FP8 products tuned too ("fp8" per entry); 3: "fp8_per_row"
constexpr float kTuneSampleUs = 200.0f;  // a timed sample repeats the launch to last about this long
constexpr size_t kWeightPoolBytes = size_t{512} << 20;  // weights tuned from a pool ~10x the H200 L2

const char* type_name(GemmOutputType type) { return type == GemmOutputType::kF32 ? "f32" : "bf16"; }
size_t type_bytes(GemmOutputType type) { return type == GemmOutputType::kF32 ? 4 : 2; }
cudaDataType_t cuda_type(GemmOutputType type) { return type == GemmOutputType::kF32 ? CUDA_R_32F : CUDA_R_16BF; }

bool shape_supported(const GemmProblem& p) { return p.m > 0 && p.n > 0 && p.k > 0 && p.n % 8 == 0 && p.k % 8 == 0; }

void check_shape(const GemmProblem& p) {
  TACHYON_CHECK(shape_supported(p)) << "gemm " << to_string(p)
                                    << ": sizes must be positive and k and n multiples of 8 (cuBLASLt needs "
                                       "16-byte aligned rows of bf16); pad the weight to a multiple of 8";
}

void check_aligned(const void* pointer, const char* name, const GemmProblem& p) {
  TACHYON_CHECK(reinterpret_cast<uintptr_t>(pointer) % kAlignmentBytes == 0)
      << "gemm " << to_string(p) << ": " << name << " (" << pointer << ") is not 16-byte aligned";
}

// Everything cuBLASLt needs for one shape. Lives in a std::map node: never moved or copied.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr;  // weight: column-major [k, n], ld k, used transposed
  cublasLtMatrixLayout_t b = nullptr;  // in: column-major [k, m], ld k
  cublasLtMatrixLayout_t d = nullptr;  // out (and C): column-major [n, m], ld n
  cublasLtMatmulAlgo_t algo{};
  bool tuned = false;
  float tuned_us = 0.0f;      // median time of the chosen algorithm
  float heuristic_us = 0.0f;  // median time of the heuristic's first choice (NAN: it failed)

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

std::string algo_to_hex(const cublasLtMatmulAlgo_t& algo) {
  std::string hex;
  for (uint64_t word : algo.data) hex += fmt::format("{:016x}", word);
  return hex;
}

bool algo_from_hex(const std::string& hex, cublasLtMatmulAlgo_t* algo) {
  constexpr size_t kWords = sizeof(algo->data) / sizeof(algo->data[0]);
  if (hex.size() != kWords * 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
  for (size_t i = 0; i < kWords; ++i) algo->data[i] = std::stoull(hex.substr(i * 16, 16), nullptr, 16);
  return true;
}

template <typename T>
T algo_attribute(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  T value{};
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written);
  return value;
}

std::string describe(const cublasLtMatmulAlgo_t& algo) {
  return fmt::format("id={} tile={} stages={} splitk={} reduction={} swizzle={} custom={} cluster={}",
                     algo_attribute<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID),
                     algo_attribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                     algo_attribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                     algo_attribute<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                     algo_attribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                     algo_attribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                     algo_attribute<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
                     algo_attribute<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
}

// Fills `bytes` of device memory with random bf16 in [-1, 1): tuning never times zeros, which
// can run faster than real data (METHOD.md). An 8 MiB random block is repeated to fill.
void fill_random_bf16(void* device, size_t bytes, uint64_t seed) {
  std::vector<uint16_t> block(std::min<size_t>(bytes / 2, size_t{1} << 22));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint16_t& v : block) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;  // xorshift64
    v = f32_to_bf16(static_cast<float>(state >> 40) / float(1 << 23) - 1.0f);
  }
  for (size_t offset = 0; offset < bytes; offset += block.size() * 2) {
    const size_t chunk = std::min(bytes - offset, block.size() * 2);
    TACHYON_CUDA_CHECK(cudaMemcpy(static_cast<char*>(device) + offset, block.data(), chunk, cudaMemcpyHostToDevice));
  }
}

struct Event {
  cudaEvent_t event = nullptr;
  Event() { TACHYON_CUDA_CHECK(cudaEventCreate(&event)); }
  ~Event() { cudaEventDestroy(event); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

}  // namespace

std::string to_string(const GemmProblem& p) {
  return fmt::format("m={} n={} k={} out={} bias={}{}", p.m, p.n, p.k, type_name(p.out_type), p.has_bias ? "bf16" : "no",
                     p.fp8 ? (p.fp8_per_row ? " in=e4m3 scale=row" : " in=e4m3") : "");
}

struct GemmRunner::Impl {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  tachyon::cuda::DeviceBuffer workspace;
  std::map<GemmProblem, Plan> plans;  // host lookup per call; plans are never erased
  std::map<GemmProblem, std::string> unsupported;  // linear_fp8 shapes cuBLASLt has no algorithm for, and why

  ~Impl() {
    plans.clear();
    if (preference != nullptr) cublasLtMatmulPreferenceDestroy(preference);
    if (handle != nullptr) cublasLtDestroy(handle);
  }

  // The plan of a shape (already checked), made on first sight with the heuristic's first choice.
  // `prepare` runs on a new plan's descriptors before the heuristic is asked (linear_fp8 sets its
  // factor pointers there).
  Plan& plan_for(const GemmProblem& p, const std::function<void(Plan&)>& prepare = {}) {
    auto [it, inserted] = plans.try_emplace(p);
    if (!inserted) return it->second;
    try {
      make_descriptors(it->second, p);
      if (prepare) prepare(it->second);
      cublasLtMatmulHeuristicResult_t first{};
      heuristics(it->second, p, &first, 1);
      it->second.algo = first.algo;
    } catch (...) {
      plans.erase(it);
      throw;
    }
    return it->second;
  }

  void make_descriptors(Plan& plan, const GemmProblem& p) {
    const std::string shape = to_string(p);
    TACHYON_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), shape);
    const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    TACHYON_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)), shape);
    TACHYON_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)),
                         shape);
    if (p.has_bias) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      TACHYON_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)), shape);
      // The bias is bf16 for either output type (its default would be the output's type).
      const cudaDataType_t bias_type = CUDA_R_16BF;
      TACHYON_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                          sizeof(bias_type)),
                           shape);
      set_bias(plan, kBiasAlignmentProbe, p);
    }
    const cudaDataType_t in_type = p.fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    if (p.fp8) {
      // One f32 factor per 128 values of k for both operands (A = weight, B = in), or one per
      // row of each (per_row: OUTER_VEC_32F, a vector along the dimension that is not k).
      const cublasLtMatmulMatrixScale_t mode =
          p.fp8_per_row ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      for (auto attribute : {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_MODE}) {
        TACHYON_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, attribute, &mode, sizeof(mode)), shape);
      }
    }
    const auto m = static_cast<uint64_t>(p.m), n = static_cast<uint64_t>(p.n), k = static_cast<uint64_t>(p.k);
    TACHYON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, in_type, k, n, p.k), shape);
    TACHYON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, in_type, k, m, p.k), shape);
    TACHYON_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.d, cuda_type(p.out_type), n, m, p.n), shape);
  }

  void set_bias(Plan& plan, const void* bias, const GemmProblem& p) {
    TACHYON_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)), to_string(p));
  }

  // Up to `count` algorithms, best guess first; at least one or it throws.
  int heuristics(Plan& plan, const GemmProblem& p, cublasLtMatmulHeuristicResult_t* results, int count) {
    if (p.has_bias) set_bias(plan, kBiasAlignmentProbe, p);
    int returned = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                                                 preference, count, results, &returned);
    TACHYON_CHECK(status != CUBLAS_STATUS_NOT_SUPPORTED && !(status == CUBLAS_STATUS_SUCCESS && returned == 0))
        << "cuBLASLt has no algorithm for gemm " << to_string(p)
        << (p.has_bias && p.out_type == GemmOutputType::kF32 ? " (a bf16 bias with f32 output may be unsupported)" : "");
    TACHYON_CUBLAS_CHECK(status, to_string(p));
    return returned;
  }

  void set_scales(Plan& plan, const float* in_scale, const float* weight_scale, const GemmProblem& p) {
    TACHYON_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &weight_scale,
                                                        sizeof(weight_scale)),
                         to_string(p));
    TACHYON_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &in_scale, sizeof(in_scale)),
        to_string(p));
  }

  cublasStatus_t run(const Plan& plan, const cublasLtMatmulAlgo_t& algo, void* out, const void* in,
                     const void* weight, cudaStream_t stream) {
    const float alpha = 1.0f, beta = 0.0f;
    return cublasLtMatmul(handle, plan.desc, &alpha, weight, plan.a, in, plan.b, &beta, out, plan.d, out, plan.d, &algo,
                          workspace.data(), workspace.bytes(), stream);
  }

  // Median microseconds of one launch of `algo`; NAN when cuBLASLt refuses to run it.
  // Launch i reads weight copy i % copies: together the copies are several times the L2, so a
  // decode-sized product is timed reading cold weights, as the forward does.
  float time_algo(const Plan& plan, const cublasLtMatmulAlgo_t& algo, void* out, const void* in, const void* weights,
                  int64_t copies, int64_t copy_bytes, const GemmTuneOptions& options, cudaStream_t stream) {
    int64_t next = 0;
    auto weight_at = [&]() { return static_cast<const char*>(weights) + (next++ % copies) * copy_bytes; };
    const void* weight = weights;
    if (run(plan, algo, out, in, weight, stream) != CUBLAS_STATUS_SUCCESS) {
      cudaGetLastError();  // a refused launch must not be blamed on the next call
      return NAN;
    }
    for (int i = 0; i < options.warmup; ++i) TACHYON_CUBLAS_CHECK(run(plan, algo, out, in, weight_at(), stream), "tuning");
    Event start, stop;
    auto sample_us = [&](int launches) {
      TACHYON_CUDA_CHECK(cudaEventRecord(start.event, stream));
      for (int i = 0; i < launches; ++i) TACHYON_CUBLAS_CHECK(run(plan, algo, out, in, weight_at(), stream), "tuning");
      TACHYON_CUDA_CHECK(cudaEventRecord(stop.event, stream));
      TACHYON_CUDA_CHECK(cudaEventSynchronize(stop.event));
      float ms = 0.0f;
      TACHYON_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event, stop.event));
      return ms * 1000.0f / launches;
    };
    // Small products take microseconds: repeat them within a sample so launch gaps and the
    // event resolution do not dominate.
    const float single_us = std::max(sample_us(1), 0.5f);
    const int launches = std::clamp(static_cast<int>(std::ceil(kTuneSampleUs / single_us)), 1, 100);
    std::vector<float> samples;
    for (int r = 0; r < options.repeats; ++r) samples.push_back(sample_us(launches));
    std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
    return samples[samples.size() / 2];
  }

  // `scales` (FP8 problems): the input's and the weight's factors, any finite values.
  void tune_one(const GemmProblem& p, void* out, const void* in, const void* weight, size_t weight_pool_bytes,
                const bf16* bias, std::pair<const float*, const float*> scales, const GemmTuneOptions& options,
                cudaStream_t stream) {
    const int64_t copy_bytes = p.n * p.k * (p.fp8 ? 1 : 2);
    const int64_t copies = std::max<int64_t>(1, static_cast<int64_t>(weight_pool_bytes) / copy_bytes);
    Plan& plan = plan_for(p, [&](Plan& fresh) {
      if (p.fp8) set_scales(fresh, scales.first, scales.second, p);
    });
    if (p.fp8) set_scales(plan, scales.first, scales.second, p);  // a plan linear_fp8 made points at its own
    std::vector<cublasLtMatmulHeuristicResult_t> results(options.candidates);
    const int returned = heuristics(plan, p, results.data(), options.candidates);
    if (p.has_bias) set_bias(plan, bias, p);
    int best = -1;
    float best_us = INFINITY, first_us = NAN;
    for (int i = 0; i < returned; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize > workspace.bytes()) continue;
      const float us = time_algo(plan, results[i].algo, out, in, weight, copies, copy_bytes, options, stream);
      if (i == 0) first_us = us;
      if (us < best_us) best_us = us, best = i;  // false for NAN
    }
    TACHYON_CHECK(best >= 0) << "gemm " << to_string(p) << ": none of " << returned << " cuBLASLt candidates ran";
    plan.algo = results[best].algo;
    plan.tuned = true;
    plan.tuned_us = best_us;
    plan.heuristic_us = first_us;
  }
};

GemmRunner::GemmRunner(size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  TACHYON_CUBLAS_CHECK(cublasLtCreate(&impl_->handle), "runner creation");
  TACHYON_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&impl_->preference), "runner creation");
  const uint64_t max_workspace = workspace_bytes;
  TACHYON_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(impl_->preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                            &max_workspace, sizeof(max_workspace)),
                       "runner creation");
  const uint32_t alignment = kAlignmentBytes;
  for (auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                         CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    TACHYON_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(impl_->preference, attribute, &alignment, sizeof(alignment)),
        "runner creation");
  }
  impl_->workspace = tachyon::cuda::DeviceBuffer(workspace_bytes);
}

GemmRunner::~GemmRunner() = default;

size_t GemmRunner::workspace_bytes() const { return impl_->workspace.bytes(); }

void GemmRunner::linear(void* out, GemmOutputType out_type, const bf16* in, const bf16* weight, const bf16* bias,
                        int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  const GemmProblem p{.m = m, .n = n, .k = k, .out_type = out_type, .has_bias = bias != nullptr};
  TACHYON_CHECK(m >= 0) << "gemm " << to_string(p) << ": negative m";
  if (m == 0) return;
  TACHYON_CHECK(bias == nullptr || out_type == GemmOutputType::kBF16)
      << "gemm " << to_string(p) << ": a bias needs bf16 output (cuBLASLt takes the bias in the output type)";
  check_shape(p);
  check_aligned(out, "out", p);
  check_aligned(in, "in", p);
  check_aligned(weight, "weight", p);
  if (bias != nullptr) check_aligned(bias, "bias", p);
  Plan& plan = impl_->plan_for(p);
  if (bias != nullptr) impl_->set_bias(plan, bias, p);
  TACHYON_CUBLAS_CHECK(impl_->run(plan, plan.algo, out, in, weight, stream), to_string(p));
}

bool GemmRunner::linear_fp8(bf16* out, const uint8_t* in, const float* in_scale, const uint8_t* weight,
                            const float* weight_scale, const bf16* bias, int64_t m, int64_t n, int64_t k,
                            cudaStream_t stream) {
  return run_fp8(out, in, in_scale, weight, weight_scale, bias, m, n, k, stream, /*per_row=*/false);
}

bool GemmRunner::linear_fp8_per_row(bf16* out, const uint8_t* in, const float* in_scale, const uint8_t* weight,
                                    const float* weight_scale, const bf16* bias, int64_t m, int64_t n, int64_t k,
                                    cudaStream_t stream) {
  return run_fp8(out, in, in_scale, weight, weight_scale, bias, m, n, k, stream, /*per_row=*/true);
}

bool GemmRunner::run_fp8(bf16* out, const uint8_t* in, const float* in_scale, const uint8_t* weight,
                         const float* weight_scale, const bf16* bias, int64_t m, int64_t n, int64_t k,
                         cudaStream_t stream, bool per_row) {
  const GemmProblem p{.m = m, .n = n, .k = k, .has_bias = bias != nullptr, .fp8 = true, .fp8_per_row = per_row};
  TACHYON_CHECK(m >= 0) << "gemm " << to_string(p) << ": negative m";
  if (m == 0) return true;
  TACHYON_CHECK(n > 0 && k > 0 && n % 16 == 0 && k % 16 == 0)
      << "gemm " << to_string(p) << ": n and k must be positive multiples of 16 (16-byte aligned rows of FP8)";
  check_aligned(out, "out", p);
  check_aligned(in, "in", p);
  check_aligned(weight, "weight", p);
  if (bias != nullptr) check_aligned(bias, "bias", p);
  if (!fp8_serves(m, n, k, bias != nullptr, in_scale, weight_scale, stream, per_row)) return false;
  Plan& plan = impl_->plan_for(p);
  impl_->set_scales(plan, in_scale, weight_scale, p);
  if (bias != nullptr) impl_->set_bias(plan, bias, p);
  TACHYON_CUBLAS_CHECK(impl_->run(plan, plan.algo, out, in, weight, stream), to_string(p));
  return true;
}

bool GemmRunner::fp8_serves(int64_t m, int64_t n, int64_t k, bool has_bias, const float* in_scale,
                            const float* weight_scale, cudaStream_t stream, bool per_row) {
  const GemmProblem p{.m = m, .n = n, .k = k, .has_bias = has_bias, .fp8 = true, .fp8_per_row = per_row};
  if (m == 0) return true;
  if (impl_->unsupported.contains(p)) return false;
  if (impl_->plans.contains(p)) return true;
  try {
    // A new shape: the heuristic is asked with the operands' factor pointers in place and the
    // stream drained (outside capture), since cuBLASLt answered INVALID_VALUE on the GPU
    // machine for a shape it served in the same process when asked right after a launch.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    TACHYON_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture == cudaStreamCaptureStatusNone) TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream));
    impl_->plan_for(p, [&](Plan& fresh) { impl_->set_scales(fresh, in_scale, weight_scale, p); });
  } catch (const std::exception& error) {  // no algorithm with this scaling for this shape on this GPU
    impl_->unsupported.emplace(p, error.what());
    return false;
  }
  return true;
}

std::string GemmRunner::fp8_refusal(int64_t m, int64_t n, int64_t k, bool has_bias, bool per_row) const {
  const auto it =
      impl_->unsupported.find({.m = m, .n = n, .k = k, .has_bias = has_bias, .fp8 = true, .fp8_per_row = per_row});
  return it == impl_->unsupported.end() ? std::string() : it->second;
}

void GemmRunner::tune(std::span<const GemmProblem> problems, cudaStream_t stream, const GemmTuneOptions& options) {
  TACHYON_CHECK(options.candidates >= 1 && options.warmup >= 0 && options.repeats >= 1)
      << "gemm tuning needs candidates >= 1, warmup >= 0 and repeats >= 1";
  if (problems.empty()) return;
  size_t in_bytes = 0, weight_bytes = 0, bias_bytes = 0, out_bytes = 0, scale_bytes = 16;
  for (const GemmProblem& p : problems) {
    check_shape(p);
    TACHYON_CHECK(!p.fp8 || (p.out_type == GemmOutputType::kBF16 && p.n % 16 == 0 && p.k % 16 == 0))
        << "gemm " << to_string(p) << ": an FP8 product has bf16 output and n and k multiples of 16";
    const size_t value_bytes = p.fp8 ? 1 : 2;
    in_bytes = std::max<size_t>(in_bytes, p.m * p.k * value_bytes);
    weight_bytes = std::max<size_t>(weight_bytes, p.n * p.k * value_bytes);
    bias_bytes = std::max<size_t>(bias_bytes, p.n * 2);
    out_bytes = std::max<size_t>(out_bytes, p.m * p.n * type_bytes(p.out_type));
    if (p.fp8) scale_bytes = std::max<size_t>(scale_bytes, std::max(p.m, p.n) * ((p.k + 127) / 128) * sizeof(float));
  }
  weight_bytes = std::max(weight_bytes, kWeightPoolBytes);  // several L2s: see time_algo
  tachyon::cuda::DeviceBuffer in(in_bytes), weight(weight_bytes), bias(bias_bytes), out(out_bytes);
  tachyon::cuda::DeviceBuffer in_scale(scale_bytes), weight_scale(scale_bytes);
  // Random bf16 bits serve FP8 codes too (a code's value does not change a product's time) and,
  // read as f32, finite factors (each f32's upper half is a finite bf16).
  fill_random_bf16(in.data(), in_bytes, 1);
  fill_random_bf16(weight.data(), weight_bytes, 2);
  fill_random_bf16(bias.data(), bias_bytes, 3);
  fill_random_bf16(in_scale.data(), scale_bytes, 4);
  fill_random_bf16(weight_scale.data(), scale_bytes, 5);
  TACHYON_CUDA_CHECK(cudaDeviceSynchronize());  // pageable copies may still be in flight; `stream` may not wait
  for (const GemmProblem& p : problems) {
    if (p.fp8 && impl_->unsupported.contains(p)) continue;
    try {
      impl_->tune_one(p, out.data(), in.data(), weight.data(), weight_bytes, bias.as<bf16>(),
                      {in_scale.as<float>(), weight_scale.as<float>()}, options, stream);
    } catch (const std::exception& error) {
      if (!p.fp8) throw;
      impl_->unsupported.emplace(p, error.what());  // linear_fp8 answers false for it, as untuned
    }
  }
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream));  // the buffers die here
}

std::string GemmRunner::cache_text(const std::string& key) const {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& [p, plan] : impl_->plans) {
    if (!plan.tuned) continue;
    entries.push_back({{"m", p.m}, {"n", p.n}, {"k", p.k}, {"out", type_name(p.out_type)}, {"bias", p.has_bias},
                       {"fp8", p.fp8}, {"fp8_per_row", p.fp8_per_row},
                       {"algo", algo_to_hex(plan.algo)}, {"describe", describe(plan.algo)},
                       {"tuned_us", plan.tuned_us}, {"heuristic_us", std::isnan(plan.heuristic_us) ? -1.0f : plan.heuristic_us}});
  }
  const nlohmann::json file = {{"format", kCacheFormat},       {"format_version", kCacheFormatVersion},
                               {"key", key},                   {"cublaslt_version", cublasLtGetVersion()},
                               {"workspace_bytes", impl_->workspace.bytes()}, {"entries", entries}};
  return file.dump(1) + "\n";
}

void GemmRunner::save_cache(const std::string& path, const std::string& key) const {
  write_file_atomically(path, cache_text(key));
}

bool GemmRunner::load_cache(const std::string& path, const std::string& key) {
  std::ifstream stream(path);
  if (!stream) return false;
  std::vector<std::pair<Plan*, cublasLtMatmulAlgo_t>> adopted;
  std::vector<std::pair<float, float>> times;
  try {
    const nlohmann::json file = nlohmann::json::parse(stream);
    if (file.at("format") != kCacheFormat || file.at("format_version") != kCacheFormatVersion ||
        file.at("key") != key || file.at("cublaslt_version").get<size_t>() != cublasLtGetVersion()) {
      return false;
    }
    for (const nlohmann::json& entry : file.at("entries")) {
      const std::string out = entry.at("out").get<std::string>();
      if (out != "bf16" && out != "f32") return false;
      const GemmProblem p{.m = entry.at("m").get<int64_t>(), .n = entry.at("n").get<int64_t>(),
                          .k = entry.at("k").get<int64_t>(),
                          .out_type = out == "f32" ? GemmOutputType::kF32 : GemmOutputType::kBF16,
                          .has_bias = entry.at("bias").get<bool>(), .fp8 = entry.at("fp8").get<bool>(),
                          .fp8_per_row = entry.at("fp8_per_row").get<bool>()};
      cublasLtMatmulAlgo_t algo{};
      if (!shape_supported(p) || !algo_from_hex(entry.at("algo").get<std::string>(), &algo)) return false;
      Plan& plan = impl_->plan_for(p, [&](Plan& fresh) {  // factor pointers: probes, as the bias's
        const auto* probe = static_cast<const float*>(kBiasAlignmentProbe);
        if (p.fp8) impl_->set_scales(fresh, probe, probe, p);
      });
      if (p.has_bias) impl_->set_bias(plan, kBiasAlignmentProbe, p);
      cublasLtMatmulHeuristicResult_t check{};
      if (cublasLtMatmulAlgoCheck(impl_->handle, plan.desc, plan.a, plan.b, plan.d, plan.d, &algo, &check) !=
              CUBLAS_STATUS_SUCCESS ||
          check.workspaceSize > impl_->workspace.bytes()) {
        return false;
      }
      adopted.emplace_back(&plan, algo);
      const float heuristic_us = entry.at("heuristic_us").get<float>();
      times.emplace_back(entry.at("tuned_us").get<float>(), heuristic_us < 0 ? NAN : heuristic_us);
    }
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  for (size_t i = 0; i < adopted.size(); ++i) {
    Plan& plan = *adopted[i].first;
    plan.algo = adopted[i].second;
    plan.tuned = true;
    plan.tuned_us = times[i].first;
    plan.heuristic_us = times[i].second;
  }
  return true;
}

std::string GemmRunner::algo_summary() const {
  std::string summary;
  for (const auto& [p, plan] : impl_->plans) {
    summary += fmt::format("{:<44} {}", to_string(p), describe(plan.algo));
    if (plan.tuned) {
      summary += fmt::format("  tuned {:.1f} us (heuristic's first {:.1f} us)", plan.tuned_us, plan.heuristic_us);
    } else {
      summary += "  heuristic";
    }
    summary += "\n";
  }
  return summary;
}

}  // namespace tachyon::kernels::cuda
