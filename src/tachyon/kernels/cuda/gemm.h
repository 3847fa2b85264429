// The dense layers on the GPU: out = in @ weight^T (+ bias), HF nn.Linear layout, through
// cuBLASLt. CPU twin: kernels/linear.h `linear`. Test: tests/gpu/test_gemm.cpp (gpu_gemm).
//
// The non-obvious part is when work happens. Everything cuBLASLt needs for a shape (matmul
// descriptor, three matrix layouts, the chosen algorithm) is built the first time the shape is
// seen and kept in a map, so a steady-state linear() is a host map lookup and one
// cublasLtMatmul: no allocation, no synchronization, safe inside CUDA graph capture. The
// algorithm is cuBLASLt's first heuristic guess unless tune() timed the top candidates on this
// GPU; tuned choices persist in a small JSON file keyed by the caller's plan hash.
//
// Requirements (checked, with the shape in the message): k and n multiples of 8, and every
// pointer 16-byte aligned, so that each row of in, weight and out starts on a 16-byte boundary
// (the Hopper kernels load tiles with TMA, which needs it; the heuristic is told to assume 16).
//
// One runner per device and per thread: it is not thread-safe, and its one cuBLASLt workspace
// must not be used by two streams at once (issue all calls of a runner on one stream, or order
// the streams). Run each shape once outside graph capture before capturing it, so that
// cuBLASLt's lazily loaded kernels are loaded by then.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

enum class GemmOutputType { kBF16, kF32 };  // bf16 for hidden states, f32 for the LM head's logits

// One matrix product as the model issues it: [m, k] @ [n, k]^T -> [m, n].
struct GemmProblem {
  int64_t m = 0;  // rows of in and out (tokens)
  int64_t n = 0;  // output features (rows of weight)
  int64_t k = 0;  // input features
  GemmOutputType out_type = GemmOutputType::kBF16;
  bool has_bias = false;
  bool fp8 = false;  // linear_fp8: E4M3 in and weight with 128-wide block factors
  bool fp8_per_row = false;  // with fp8: one factor per row of in and per row of weight (linear_fp8_per_row)

  auto operator<=>(const GemmProblem&) const = default;
};

// "m=17 n=4096 k=4096 out=bf16 bias=no" (" in=e4m3" for linear_fp8, " in=e4m3 scale=row" for
// linear_fp8_per_row): the shape as every message and report names it.
std::string to_string(const GemmProblem& problem);

struct GemmTuneOptions {
  int candidates = 8;  // heuristic results timed per problem
  int warmup = 3;      // untimed runs per candidate
  int repeats = 9;     // timed samples per candidate; the median decides
};

class GemmRunner {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  // Creates the cuBLASLt handle on the current device and allocates the workspace once.
  explicit GemmRunner(size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // out[m, n] = in[m, k] @ weight[n, k]^T (+ bias[n]), all row-major; f32 accumulation.
  // out: [m, n] bf16 or f32 (out_type); in: [m, k] bf16; weight: [n, k] bf16;
  // bias: [n] bf16 or nullptr. out must not alias in, weight or bias. m == 0 does nothing.
  void linear(void* out, GemmOutputType out_type, const bf16* in, const bf16* weight, const bf16* bias, int64_t m,
              int64_t n, int64_t k, cudaStream_t stream);

  // out[m, n] bf16 = dequant(in)[m, k] @ dequant(weight)[n, k]^T (+ bias[n]) on the FP8 tensor
  // cores, f32 accumulation. in: [m, k] E4M3 with in_scale [ceil(k / 128), m]; weight: [n, k]
  // E4M3 with weight_scale [ceil(k / 128), n]: one f32 factor per row and 128 values of k, the
  // row index fastest (cuBLASLt's VEC128_32F block scaling; Hopper, CUDA 12.9 or later;
  // fp8.h fp8_quantize_rows writes it). k and n multiples of 16, pointers 16-byte aligned
  // (checked). Returns false, doing nothing, when cuBLASLt has no algorithm for the shape (every
  // m % 4 != 0 on the H100: the runner pads those rows, CudaModelRunner::linear_fp8); the answer is kept per shape, and a shape is first
  // asked outside graph capture as for linear().
  bool linear_fp8(bf16* out, const uint8_t* in, const float* in_scale, const uint8_t* weight, const float* weight_scale,
                  const bf16* bias, int64_t m, int64_t n, int64_t k, cudaStream_t stream);
  // linear_fp8 with one factor per row of each operand instead of per 128 values of k (cuBLASLt's
  // OUTER_VEC_32F scaling: in_scale [m], weight_scale [n]), the form of per-channel FP8
  // checkpoints with per-token activations (fp8.h fp8_quantize_rows_per_token writes in_scale):
  // 1.27-1.39x faster than the block-scaled product at 1,024-2,048 rows on the H100's 8B shapes
  // (bench/results/2026-12-06-fp8-skinny-rounding-profiles-h100.json). Otherwise as linear_fp8.
  bool linear_fp8_per_row(bf16* out, const uint8_t* in, const float* in_scale, const uint8_t* weight,
                          const float* weight_scale, const bf16* bias, int64_t m, int64_t n, int64_t k,
                          cudaStream_t stream);
  // Whether linear_fp8 (per_row: linear_fp8_per_row) runs this shape (it would answer true),
  // without running it: a new shape is asked of cuBLASLt here as linear_fp8 asks it (the same
  // factor pointers), and the answer kept.
  bool fp8_serves(int64_t m, int64_t n, int64_t k, bool has_bias, const float* in_scale, const float* weight_scale,
                  cudaStream_t stream, bool per_row = false);
  // Why linear_fp8 answered false for a shape (cuBLASLt's words); "" when it did not.
  std::string fp8_refusal(int64_t m, int64_t n, int64_t k, bool has_bias, bool per_row = false) const;

  // Times the top heuristic candidates of each problem (bf16, or FP8 as linear_fp8 runs it: bf16
  // output, n and k multiples of 16) on `stream` with CUDA events (on random data in temporary
  // device buffers sized for the largest problem: call it before the KV cache takes the free
  // memory) and keeps the fastest. An FP8 problem cuBLASLt has no algorithm for is remembered
  // as linear_fp8 would (it then answers false), not an error. Synchronizes; not during capture.
  void tune(std::span<const GemmProblem> problems, cudaStream_t stream, const GemmTuneOptions& options = {});

  // The tuned choices as the JSON text of a cache file. `key` is the caller's hash of everything
  // that changes a choice (GPU, model shapes, ...); the text also records the cuBLASLt version
  // and the workspace size.
  std::string cache_text(const std::string& key) const;
  // cache_text(key) at `path`, written whole (base/file_util.h write_file_atomically).
  void save_cache(const std::string& path, const std::string& key) const;
  // Adopts a file written by save_cache when its key and cuBLASLt version match and cuBLASLt
  // accepts every stored algorithm for this runner's workspace. Otherwise (also: no file, bad
  // JSON) returns false and changes nothing: the caller tunes again.
  bool load_cache(const std::string& path, const std::string& key);

  // One line per known shape: the algorithm's configuration (id, tile, stages, split-k, ...)
  // and, when tuned, its time and the heuristic's first choice's time. For reports.
  std::string algo_summary() const;

  size_t workspace_bytes() const;

 private:
  bool run_fp8(bf16* out, const uint8_t* in, const float* in_scale, const uint8_t* weight, const float* weight_scale,
               const bf16* bias, int64_t m, int64_t n, int64_t k, cudaStream_t stream, bool per_row);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tachyon::kernels::cuda
