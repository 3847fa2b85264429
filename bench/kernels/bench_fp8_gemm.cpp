// bench_fp8_gemm: the FP8 products of more rows than the decode GEMV serves (kernels/cuda/gemm.h
// linear_fp8, cuBLASLt's 128-wide block scaling) on Llama-3-8B's projections, on the current GPU:
//   a) refusals: which row counts m (from --min-rows to --max-rows, every one) cuBLASLt has no
//      algorithm for, per projection, and whether the count padded to a multiple of 16 has one
//      (the runner's padded product, runner/cuda/cuda_model_runner.cpp linear_fp8). A serving
//      step's rows are any count: each refusal is a step that would run dequantized.
//   b) tuned: GemmRunner::tune on the FP8 products, block-scaled and per-row-scaled (and on the
//      bf16 products of the same shapes, the bf16 run's) at prefill and batch row counts: the
//      heuristic's first choice against the fastest of its top candidates, each as TFLOP/s against
//      the measured bf16 GEMM rate.
//   c) padded: at each refused count of a), up to --padded-cases of them (or at --padded-rows),
//      the padded product
//      (quantize the rows padded with zero rows, the product, the copy of the real rows) against
//      the dequantized fallback (the weight dequantized to bf16, a bf16 product) and against the
//      exact product of the largest count at or below it that has an algorithm.
// Method (docs/benchmarks.md): the GEMM rate measured in the same run, warm-up, median of repeats
// of one CUDA graph per timed call. Inputs and weights are random (every finite E4M3 code).
// Correctness is the tests' job (tests/gpu/test_fp8_gemm.cpp).
// Run (GPU machine): build-gpu/bin/bench_fp8_gemm [--json FILE] [--cases refusals,tuned,padded]
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "tachyon/base/check.h"
#include "tachyon/kernels/cuda/fp8.h"
#include "tachyon/kernels/cuda/gemm.h"

namespace tachyon::bench {
namespace {

namespace gpu = kernels::cuda;
using gpu::bf16;
using gpu::GemmProblem;

struct Options : BenchOptions {
  int64_t min_rows = 9, max_rows = 2304;
  int padded_cases = 3;
  std::vector<int64_t> padded_rows;  // c) at these counts instead of the first refused ones
  std::vector<int64_t> tuned_rows{64, 256, 1024, 2048};
};

struct Shape {
  const char* what;
  int64_t n, k;
};
// Llama-3-8B: fused qkv, o, fused gate_up, down.
const std::vector<Shape> kShapes = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096},
                                    {"down", 4096, 14336}};

int64_t padded(int64_t m) { return (m + 15) / 16 * 16; }

// Operands for up to `rows` rows of one shape: bf16 input, its E4M3 rows and factors, the E4M3
// weight with its factors in both layouts, outputs, and the dequantized weight's scratch.
struct Operands {
  int64_t rows, n, k;
  cuda::DeviceBuffer in, in_codes, in_factors, weight, weight_factors, out, staged, scratch;
  Operands(int64_t rows_, const Shape& s)
      : rows(padded(rows_)), n(s.n), k(s.k), in(random_bf16(size_t(rows) * k, 71, 1.0f)),
        in_codes(size_t(rows) * k), in_factors(size_t(rows) * ((k + 127) / 128) * sizeof(float)),
        weight(size_t(n) * k), weight_factors(size_t(n) * ((k + 127) / 128) * sizeof(float)),
        out(size_t(rows) * n * sizeof(bf16)), staged(size_t(rows) * n * sizeof(bf16)),
        scratch(size_t(n) * k * sizeof(bf16)) {
    fill_random_e4m3(weight.as<uint8_t>(), size_t(n) * k, 72, nullptr);
    fill_random_f32(weight_factors.as<float>(), size_t(n) * ((k + 127) / 128), 73, 0.01f, nullptr);
    fill_random_e4m3(in_codes.as<uint8_t>(), size_t(rows) * k, 74, nullptr);
    fill_random_f32(in_factors.as<float>(), size_t(rows) * ((k + 127) / 128), 75, 0.01f, nullptr);
    TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
  }
  // The product of m quantized rows into `to`; false where cuBLASLt has no algorithm.
  bool product(gpu::GemmRunner& gemm, bf16* to, int64_t m, cudaStream_t s) const {
    return gemm.linear_fp8(to, in_codes.as<uint8_t>(), in_factors.as<float>(), weight.as<uint8_t>(),
                           weight_factors.as<float>(), nullptr, m, n, k, s);
  }
};

// Runs of consecutive counts as "a-b" (or "a"), comma-separated.
std::string ranges(const std::vector<int64_t>& counts) {
  std::string text;
  for (size_t i = 0; i < counts.size();) {
    size_t j = i;
    while (j + 1 < counts.size() && counts[j + 1] == counts[j] + 1) ++j;
    text += (text.empty() ? "" : ",") + std::to_string(counts[i]) +
            (j > i ? "-" + std::to_string(counts[j]) : std::string());
    i = j + 1;
  }
  return text;
}

nlohmann::json refusals(const Options& options, std::vector<std::pair<Shape, std::vector<int64_t>>>& refused) {
  nlohmann::json rows = nlohmann::json::array();
  Stream stream;
  for (const Shape& s : kShapes) {
    const Operands ops(options.max_rows, s);
    gpu::GemmRunner gemm;
    std::vector<int64_t> counts, padded_refused;
    std::string reason;
    for (int64_t m = options.min_rows; m <= options.max_rows; ++m) {
      if (ops.product(gemm, ops.out.as<bf16>(), m, stream.get())) continue;
      counts.push_back(m);
      if (reason.empty()) reason = gemm.fp8_refusal(m, s.n, s.k, false);
      if (!ops.product(gemm, ops.staged.as<bf16>(), padded(m), stream.get())) padded_refused.push_back(m);
    }
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    std::printf("%-8s n=%-6lld k=%-6lld refused %zu of %lld counts: %s; padded to 16 still refused: %s\n", s.what,
                static_cast<long long>(s.n), static_cast<long long>(s.k), counts.size(),
                static_cast<long long>(options.max_rows - options.min_rows + 1),
                counts.empty() ? "none" : ranges(counts).c_str(),
                padded_refused.empty() ? "none" : ranges(padded_refused).c_str());
    if (!reason.empty()) std::printf("         first refusal: %s\n", reason.c_str());
    std::fflush(stdout);
    rows.push_back({{"what", s.what}, {"n", s.n}, {"k", s.k}, {"refused", ranges(counts)},
                    {"refused_count", counts.size()}, {"padded_refused", ranges(padded_refused)},
                    {"first_reason", reason}});
    refused.emplace_back(s, counts);
  }
  return rows;
}

nlohmann::json tuned(const Options& options, const Ceilings& ceilings) {
  nlohmann::json rows = nlohmann::json::array();
  Stream stream;
  for (const Shape& s : kShapes) {
    // bf16, FP8 block-scaled (linear_fp8), FP8 per-row-scaled (linear_fp8_per_row).
    for (const char* form : {"bf16", "fp8", "fp8-row"}) {
      const bool fp8 = std::string_view(form) != "bf16", per_row = std::string_view(form) == "fp8-row";
      std::vector<GemmProblem> problems;
      for (int64_t m : options.tuned_rows) {
        problems.push_back({.m = m, .n = s.n, .k = s.k, .fp8 = fp8, .fp8_per_row = per_row});
      }
      gpu::GemmRunner gemm;
      gemm.tune(problems, stream.get(), {.candidates = 8, .warmup = options.warmup, .repeats = options.repeats});
      // algo_summary: one line per shape, "... tuned X us (heuristic's first Y us)".
      const std::string summary = gemm.algo_summary();
      size_t line_start = 0;
      for (const GemmProblem& p : problems) {
        const size_t line_end = summary.find('\n', line_start);
        const std::string line = summary.substr(line_start, line_end - line_start);
        line_start = line_end + 1;
        float tuned_us = NAN, heuristic_us = NAN;
        const size_t at = line.find("tuned ");
        if (at != std::string::npos) {
          std::sscanf(line.c_str() + at, "tuned %f us (heuristic's first %f us)", &tuned_us, &heuristic_us);
        }
        const double flops = 2.0 * double(p.m) * double(p.n) * double(p.k);
        const double rate = ceilings.gemm_flops_per_s;
        std::printf("%-8s %-7s m=%-5lld heuristic %9.1f us %6.0f TFLOP/s  tuned %9.1f us %6.0f TFLOP/s  "
                    "(%.2fx the bf16 GEMM rate)\n",
                    s.what, form, static_cast<long long>(p.m), heuristic_us,
                    flops / heuristic_us * 1e-6, tuned_us, flops / tuned_us * 1e-6, flops / (tuned_us * 1e-6) / rate);
        std::fflush(stdout);
        rows.push_back({{"what", s.what}, {"dtype", form}, {"m", p.m}, {"n", p.n}, {"k", p.k},
                        {"heuristic_us", heuristic_us}, {"tuned_us", tuned_us},
                        {"tuned_over_bf16_gemm_rate", flops / (tuned_us * 1e-6) / rate}, {"line", line}});
      }
    }
  }
  return rows;
}

nlohmann::json padded_costs(const Options& options,
                            const std::vector<std::pair<Shape, std::vector<int64_t>>>& refused) {
  nlohmann::json rows = nlohmann::json::array();
  Stream stream;
  for (const auto& [s, refused_counts] : refused) {
    const std::vector<int64_t>& counts = options.padded_rows.empty() ? refused_counts : options.padded_rows;
    const Operands ops(options.max_rows, s);
    gpu::GemmRunner gemm;
    for (size_t i = 0; i < counts.size() && (!options.padded_rows.empty() || i < size_t(options.padded_cases)); ++i) {
      const int64_t m = counts[i];
      TACHYON_CHECK(m <= options.max_rows) << "--padded-rows past --max-rows";
      int64_t below = m;
      while (below > 0 && !ops.product(gemm, ops.out.as<bf16>(), below, stream.get())) --below;
      const double padded_us = time_us(
          [&](cudaStream_t st) {
            gpu::fp8_quantize_rows(ops.in_codes.as<uint8_t>(), ops.in_factors.as<float>(), ops.in.as<bf16>(), m,
                                   padded(m), s.k, st);
            TACHYON_CHECK(ops.product(gemm, ops.staged.as<bf16>(), padded(m), st)) << "padded product refused";
            TACHYON_CUDA_CHECK(cudaMemcpyAsync(ops.out.data(), ops.staged.data(), size_t(m) * s.n * sizeof(bf16),
                                               cudaMemcpyDeviceToDevice, st));
          },
          stream.get(), options, 200.0);
      const double dequantized_us = time_us(
          [&](cudaStream_t st) {
            gpu::fp8_dequantize(ops.scratch.as<bf16>(), ops.weight.as<uint8_t>(), ops.weight_factors.as<float>(),
                                s.n, s.k, st);
            gemm.linear(ops.out.data(), gpu::GemmOutputType::kBF16, ops.in.as<bf16>(), ops.scratch.as<bf16>(),
                        nullptr, m, s.n, s.k, st);
          },
          stream.get(), options, 200.0);
      const double exact_us = time_us(
          [&](cudaStream_t st) {
            gpu::fp8_quantize_rows(ops.in_codes.as<uint8_t>(), ops.in_factors.as<float>(), ops.in.as<bf16>(), below,
                                   below, s.k, st);
            TACHYON_CHECK(ops.product(gemm, ops.out.as<bf16>(), below, st)) << "exact product refused";
          },
          stream.get(), options, 200.0);
      std::printf("%-8s m=%-5lld padded %9.1f us  dequantized %9.1f us (%.2fx)  exact m=%lld %9.1f us\n", s.what,
                  static_cast<long long>(m), padded_us, dequantized_us, dequantized_us / padded_us,
                  static_cast<long long>(below), exact_us);
      std::fflush(stdout);
      rows.push_back({{"what", s.what}, {"m", m}, {"padded_us", padded_us}, {"dequantized_us", dequantized_us},
                      {"exact_below_m", below}, {"exact_below_us", exact_us}});
    }
  }
  return rows;
}

void run(const Options& options) {
  TACHYON_CHECK(cuda::cuda_device_available()) << "bench_fp8_gemm needs a CUDA device";
  const Ceilings ceilings = measure_ceilings(options, /*gemm=*/wanted(options, "tuned"));
  print_ceilings(ceilings);
  nlohmann::json results = nlohmann::json::object();
  std::vector<std::pair<Shape, std::vector<int64_t>>> refused;
  if (wanted(options, "refusals") || (wanted(options, "padded") && options.padded_rows.empty())) {
    results["refusals"] = refusals(options, refused);
  } else {
    for (const Shape& s : kShapes) refused.emplace_back(s, std::vector<int64_t>{});
  }
  if (wanted(options, "tuned")) results["tuned"] = tuned(options, ceilings);
  if (wanted(options, "padded")) results["padded"] = padded_costs(options, refused);
  write_results_json(options, ceilings, results);
}

}  // namespace
}  // namespace tachyon::bench

int main(int argc, char** argv) {
  CLI::App app{"FP8 products of cuBLASLt: refused row counts, tuned algorithms, the padded product"};
  tachyon::bench::Options options;
  tachyon::bench::add_common_options(app, options, {"refusals", "tuned", "padded"});
  app.add_option("--min-rows", options.min_rows, "first row count of the refusal sweep (default 9)");
  app.add_option("--max-rows", options.max_rows, "last row count of the refusal sweep (default 2304)");
  app.add_option("--padded-cases", options.padded_cases, "refused counts timed per projection (default 3)");
  app.add_option("--padded-rows", options.padded_rows, "row counts the padded case times (default: refused ones)")
      ->delimiter(',');
  app.add_option("--tuned-rows", options.tuned_rows, "row counts tuned (default 64,256,1024,2048)")->delimiter(',');
  return tachyon::bench::bench_main(app, options, argc, argv, [&] { tachyon::bench::run(options); });
}
