// bench_gemv: the small-batch dense layers of decode (kernels/cuda/gemv.h) against their floor
// and against the path they replace, on the current GPU. It owns the timing that used to sit in
// tests/gpu/test_gemv.cpp (tests check correctness; time is measured here):
//   a) gemv against GemmRunner::linear (cuBLASLt) at m = 1 and 4 on Llama-3-8B's decode shapes
//      (qkv, o_proj, gate_up, down, lm_head with f32 logits), then Llama-3.2-1B's;
//   b) the decode MLP's down projection as the runner runs it, silu_and_mul then gemv, against
//      silu_and_mul then cuBLASLt (a fused gemv_silu was measured here and removed: gemv.h says why);
//   c) fp8_gemv (E4M3 weights, one f32 factor per row and 128 columns: --quantization fp8 and the
//      FP8 checkpoints) against bf16 gemv on the same shapes; each against its own floor (the FP8
//      one counts the codes and factors).
//
// Method (docs/benchmarks.md: floors first, warm-up, median of repeats), as bench_mla_dsa: the
// copy bandwidth is measured in the same run (a 1 GiB device-to-device copy, bytes read +
// written) and each row's floor is the bytes the product must move (weight n x k x 2, input,
// output) over it. At m <= 8 a product does m FLOPs per weight byte, far below any GPU's ratio
// of matrix rate to bandwidth, so no FLOP floor is reported. Each row gives the candidate's and
// the baseline's time, both ratios to the floor and the baseline's time over the candidate's.
// The one non-obvious decision: a weight is timed as L consecutive launches, each reading its
// own copy of the weight, with L chosen so the copies are >= 8x the L2 cache (as a model's
// layers are); otherwise a 8 MB weight would be read from L2. The L launches are captured in one
// CUDA graph, a spin kernel keeps the stream busy while the events and the replay are enqueued,
// and the reported time is the median over the repeats of one replay, divided by L.
// Inputs and weights are random bf16 (hash fill on the device); outputs start as NaN and must
// all be finite afterwards. Accuracy is the test's job (tests/gpu/test_gemv.cpp).
// Run (GPU machine): build-gpu/bin/bench_gemv [--json FILE] [--cases cublaslt,silu,fp8] [--m 1,4]
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "tachyon/base/check.h"
#include "tachyon/kernels/cuda/activation.h"
#include "tachyon/kernels/cuda/gemm.h"
#include "tachyon/kernels/cuda/gemv.h"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::bench {
namespace {

namespace gpu = kernels::cuda;
using gpu::bf16;
using gpu::GemmOutputType;

constexpr int64_t kMaxRows = 8;    // gemv's limit; inputs are allocated for 8 rows
constexpr int kMaxCopies = 1024;   // a 8 MB weight needs ~50 copies to reach 8x a 50 MB L2

struct Options : BenchOptions {
  std::vector<int64_t> rows{1, 4};
};

// One comparison: a candidate and a baseline doing the same product.
struct Result {
  std::string what, candidate, baseline;
  int64_t m = 0, n = 0, k = 0;
  GemmOutputType out_type = GemmOutputType::kBF16;
  int copies = 1;  // weight copies, one launch each per graph replay
  double candidate_us = 0, baseline_us = 0, bytes = 0, floor_us = 0;
  double baseline_bytes = 0, baseline_floor_us = 0;  // the baseline's own floor (0: the candidate's bytes)
};

size_t out_size(GemmOutputType type) { return type == GemmOutputType::kF32 ? sizeof(float) : sizeof(bf16); }

// How many copies of a weight of `bytes` total >= 8x the L2 cache (at least one): read in turn, one
// launch each, every launch reads its weight from HBM.
int copies_past_l2(double bytes, const Ceilings& ceilings) {
  const double target = 8.0 * static_cast<double>(ceilings.l2_bytes);
  return static_cast<int>(std::clamp(std::ceil(target / bytes), 1.0, double(kMaxCopies)));
}

// Copies of one [n, k] bf16 weight (copies_past_l2), read in turn.
struct ColdWeights {
  int copies = 1;
  size_t elements = 0;
  cuda::DeviceBuffer buffer;  // [copies, n, k] bf16

  ColdWeights(int64_t n, int64_t k, const Ceilings& ceilings) : elements(size_t(n) * k) {
    copies = copies_past_l2(double(elements * sizeof(bf16)), ceilings);
    buffer = random_bf16(copies * elements, 61, 0.05f);
  }
  const bf16* operator()(int i) const { return buffer.as<bf16>() + size_t(i) * elements; }
};

// The same for the FP8 form: [copies, n, k] E4M3 codes (every finite code) and [copies, n, k / 128]
// f32 factors in [-0.01, 0.01).
struct ColdFp8Weights {
  int copies = 1;
  size_t codes = 0, factors = 0;
  cuda::DeviceBuffer code_buffer, factor_buffer;

  ColdFp8Weights(int64_t n, int64_t k, const Ceilings& ceilings)
      : codes(size_t(n) * k), factors(size_t(n) * ((k + 127) / 128)) {
    copies = copies_past_l2(double(codes), ceilings);
    code_buffer = cuda::DeviceBuffer(copies * codes);
    fill_random_e4m3(code_buffer.as<uint8_t>(), copies * codes, 64, nullptr);
    factor_buffer = cuda::DeviceBuffer(copies * factors * sizeof(float));
    fill_random_f32(factor_buffer.as<float>(), copies * factors, 65, 0.01f, nullptr);  // before Stream's work
  }
  const uint8_t* codes_of(int i) const { return code_buffer.as<uint8_t>() + size_t(i) * codes; }
  const float* factors_of(int i) const { return factor_buffer.as<float>() + size_t(i) * factors; }
  double bytes() const { return double(codes) + double(factors) * sizeof(float); }
};

class Bench {
 public:
  Bench(const Options& options, const Ceilings& ceilings) : options_(options), ceilings_(ceilings) {}
  const std::vector<Result>& results() const { return results_; }

  void add(Result r) {
    r.floor_us = r.bytes / ceilings_.copy_bytes_per_s * 1e6;
    if (r.baseline_bytes == 0) r.baseline_bytes = r.bytes;
    r.baseline_floor_us = r.baseline_bytes / ceilings_.copy_bytes_per_s * 1e6;
    std::printf("%-9s %2lld %6lld %5lld %6d  %-9s %9.2f %6.2f  %-18s %9.2f %6.2f  %9.2f %7.2f\n", r.what.c_str(),
                static_cast<long long>(r.m), static_cast<long long>(r.n), static_cast<long long>(r.k), r.copies,
                r.candidate.c_str(), r.candidate_us, r.candidate_us / r.floor_us, r.baseline.c_str(), r.baseline_us,
                r.baseline_us / r.baseline_floor_us, r.floor_us, r.baseline_us / r.candidate_us);
    std::fflush(stdout);
    results_.push_back(r);
  }

  // gemv against GemmRunner::linear on one weight shape, at every m of the options.
  void against_cublaslt(const std::string& what, int64_t n, int64_t k, GemmOutputType out_type) {
    const ColdWeights weights(n, k, ceilings_);
    const cuda::DeviceBuffer in = random_bf16(kMaxRows * k, 62, 1.0f);
    const cuda::DeviceBuffer out(kMaxRows * n * sizeof(float));
    Stream stream;
    const auto every_copy = [&](auto product) {  // one launch per weight copy
      return [&, product](cudaStream_t s) {
        for (int i = 0; i < weights.copies; ++i) product(weights(i), s);
      };
    };
    for (int64_t m : options_.rows) {
      Result r{what, "gemv", "cublasLt", m, n, k, out_type, weights.copies};
      poison(out);
      r.candidate_us = time_us(every_copy([&](const bf16* w, cudaStream_t s) {
                                 gpu::gemv(out.data(), out_type, in.as<bf16>(), w, nullptr, m, n, k, s);
                               }),
                               stream.get(), options_, 500.0 + 10.0 * weights.copies) /
                       weights.copies;
      check_all_finite(out, m * n, out_type == GemmOutputType::kF32, what + " gemv");
      poison(out);
      r.baseline_us = time_us(every_copy([&](const bf16* w, cudaStream_t s) {
                                runner_.linear(out.data(), out_type, in.as<bf16>(), w, nullptr, m, n, k, s);
                              }),
                              stream.get(), options_, 500.0 + 10.0 * weights.copies) /
                      weights.copies;
      check_all_finite(out, m * n, out_type == GemmOutputType::kF32, what + " cublasLt");
      r.bytes = double(n) * k * sizeof(bf16) + double(m) * k * sizeof(bf16) + double(m) * n * out_size(out_type);
      add(r);
    }
  }

  // fp8_gemv against bf16 gemv on one weight shape, at every m of the options.
  void fp8_against_bf16(const std::string& what, int64_t n, int64_t k, GemmOutputType out_type) {
    const ColdFp8Weights fp8(n, k, ceilings_);
    const ColdWeights bf16_weights(n, k, ceilings_);
    const cuda::DeviceBuffer in = random_bf16(kMaxRows * k, 62, 1.0f);
    const cuda::DeviceBuffer out(kMaxRows * n * sizeof(float));
    Stream stream;
    for (int64_t m : options_.rows) {
      Result r{what, "fp8_gemv", "gemv (bf16)", m, n, k, out_type, fp8.copies};
      poison(out);
      r.candidate_us = time_us(
                           [&](cudaStream_t s) {
                             for (int i = 0; i < fp8.copies; ++i) {
                               gpu::fp8_gemv(out.data(), out_type, in.as<bf16>(), fp8.codes_of(i), fp8.factors_of(i),
                                             nullptr, m, n, k, s);
                             }
                           },
                           stream.get(), options_, 500.0 + 10.0 * fp8.copies) /
                       fp8.copies;
      check_all_finite(out, m * n, out_type == GemmOutputType::kF32, what + " fp8_gemv");
      poison(out);
      r.baseline_us = time_us(
                          [&](cudaStream_t s) {
                            for (int i = 0; i < bf16_weights.copies; ++i) {
                              gpu::gemv(out.data(), out_type, in.as<bf16>(), bf16_weights(i), nullptr, m, n, k, s);
                            }
                          },
                          stream.get(), options_, 500.0 + 10.0 * bf16_weights.copies) /
                      bf16_weights.copies;
      check_all_finite(out, m * n, out_type == GemmOutputType::kF32, what + " gemv");
      const double io = double(m) * k * sizeof(bf16) + double(m) * n * out_size(out_type);
      r.bytes = fp8.bytes() + io;
      r.baseline_bytes = double(n) * k * sizeof(bf16) + io;
      add(r);
    }
  }

  // The down projection (n x k) after its gate, silu_and_mul then gemv, against silu_and_mul then cuBLASLt.
  void after_silu(int64_t n, int64_t k) {
    const ColdWeights weights(n, k, ceilings_);
    const cuda::DeviceBuffer gate_up = random_bf16(kMaxRows * 2 * k, 63, 1.0f);  // [8, 2k] rows [gate | up]
    const cuda::DeviceBuffer act(kMaxRows * k * sizeof(bf16));
    const cuda::DeviceBuffer out(kMaxRows * n * sizeof(bf16));
    Stream stream;
    for (int64_t m : options_.rows) {
      Result r{"down+silu", "silu+gemv", "silu+cublasLt", m, n, k, GemmOutputType::kBF16, weights.copies};
      poison(out);
      r.candidate_us = time_us(
                           [&](cudaStream_t s) {
                             for (int i = 0; i < weights.copies; ++i) {
                               gpu::silu_and_mul(act.as<bf16>(), gate_up.as<bf16>(), m, k, s);
                               gpu::gemv(out.data(), GemmOutputType::kBF16, act.as<bf16>(), weights(i), nullptr, m,
                                         n, k, s);
                             }
                           },
                           stream.get(), options_, 500.0 + 20.0 * weights.copies) /
                       weights.copies;
      check_all_finite(out, m * n, /*f32=*/false, "silu_and_mul + gemv");
      poison(out);
      r.baseline_us = time_us(
                          [&](cudaStream_t s) {
                            for (int i = 0; i < weights.copies; ++i) {
                              gpu::silu_and_mul(act.as<bf16>(), gate_up.as<bf16>(), m, k, s);
                              runner_.linear(out.data(), GemmOutputType::kBF16, act.as<bf16>(), weights(i), nullptr,
                                             m, n, k, s);
                            }
                          },
                          stream.get(), options_, 500.0 + 20.0 * weights.copies) /
                      weights.copies;
      check_all_finite(out, m * n, /*f32=*/false, "silu_and_mul + cublasLt");
      r.bytes = double(n) * k * sizeof(bf16) + double(m) * 2 * k * sizeof(bf16) + double(m) * n * sizeof(bf16);
      add(r);
    }
  }

 private:
  const Options& options_;
  const Ceilings& ceilings_;
  gpu::GemmRunner runner_;  // one runner, used on one stream at a time
  std::vector<Result> results_;
};

nlohmann::json result_rows(const std::vector<Result>& results) {
  nlohmann::json rows = nlohmann::json::array();
  for (const Result& r : results) {
    rows.push_back({{"what", r.what},
                    {"m", r.m},
                    {"n", r.n},
                    {"k", r.k},
                    {"out", r.out_type == GemmOutputType::kF32 ? "f32" : "bf16"},
                    {"weight_copies", r.copies},
                    {"candidate", r.candidate},
                    {"candidate_us_median", r.candidate_us},
                    {"candidate_ratio_to_floor", r.candidate_us / r.floor_us},
                    {"baseline", r.baseline},
                    {"baseline_us_median", r.baseline_us},
                    {"baseline_ratio_to_floor", r.baseline_us / r.baseline_floor_us},
                    {"bytes", r.bytes},
                    {"floor_us", r.floor_us},
                    {"baseline_bytes", r.baseline_bytes},
                    {"baseline_floor_us", r.baseline_floor_us},
                    {"baseline_over_candidate", r.baseline_us / r.candidate_us}});
  }
  return rows;
}

struct Shape {
  const char* what;
  int64_t n, k;
  GemmOutputType out_type;
};

// Llama-3-8B's decode shapes, then Llama-3.2-1B's (gate_up is the fused [gate; up] weight).
const std::vector<Shape> kShapes = {{"qkv", 6144, 4096, GemmOutputType::kBF16},
                                    {"o_proj", 4096, 4096, GemmOutputType::kBF16},
                                    {"gate_up", 28672, 4096, GemmOutputType::kBF16},
                                    {"down", 4096, 14336, GemmOutputType::kBF16},
                                    {"lm_head", 128256, 4096, GemmOutputType::kF32},
                                    {"1b_qkv", 3072, 2048, GemmOutputType::kBF16},
                                    {"1b_o", 2048, 2048, GemmOutputType::kBF16},
                                    {"1b_gu", 16384, 2048, GemmOutputType::kBF16},
                                    {"1b_down", 2048, 8192, GemmOutputType::kBF16},
                                    {"1b_head", 128256, 2048, GemmOutputType::kF32}};

void run(const Options& options) {
  TACHYON_CHECK(cuda::cuda_device_available()) << "bench_gemv needs a CUDA device";
  const Ceilings ceilings = measure_ceilings(options, /*gemm=*/false);
  print_ceilings(ceilings);
  std::printf("per launch: median of %d %s after %d warm-up, over weight copies >= 8x L2; floor = bytes / copy; "
              "speedup = baseline us / candidate us\n",
              options.repeats, options.eager ? "eager runs" : "graph replays", options.warmup);
  std::printf("%-9s %2s %6s %5s %6s  %-9s %9s %6s  %-18s %9s %6s  %9s %7s\n", "what", "m", "n", "k", "copies",
              "candidate", "us median", "ratio", "baseline", "us median", "ratio", "floor us", "speedup");
  std::printf("(each ratio is to its own floor: the fp8 rows' bf16 baseline reads twice the weight bytes)\n");
  Bench bench(options, ceilings);
  if (wanted(options, "cublaslt")) {
    for (const Shape& s : kShapes) bench.against_cublaslt(s.what, s.n, s.k, s.out_type);
  }
  if (wanted(options, "silu")) bench.after_silu(4096, 14336);  // Llama-3-8B's down projection
  if (wanted(options, "fp8")) {
    for (const Shape& s : kShapes) bench.fp8_against_bf16(s.what, s.n, s.k, s.out_type);
  }
  write_results_json(options, ceilings, result_rows(bench.results()));
}

}  // namespace
}  // namespace tachyon::bench

int main(int argc, char** argv) {
  tachyon::bench::Options options;
  CLI::App app{"bench_gemv: per-launch time of gemv against its floor and cuBLASLt"};
  tachyon::bench::add_common_options(app, options, {"cublaslt", "silu", "fp8"});
  app.add_option("--m", options.rows, "rows (tokens) per product, each 1 to 8 (default: 1,4)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, tachyon::bench::kMaxRows));
  return tachyon::bench::bench_main(app, options, argc, argv, [&] { tachyon::bench::run(options); });
}
