// bench_moe: the grouped expert products of an MoE layer (kernels/cuda/moe.h), E4M3 experts
// against bf16 ones, each against its floor, at DeepSeek-V3's widths (the 64 experts of the
// deepseek-v3-reduced preset, top 8, hidden 7168, expert width 2048) and DeepSeek-V2-Lite's (64,
// top 6, 2048, 1408), at the token counts of decode and of small prefill steps.
//   gate_up: at T <= 8 tokens moe_grouped_gemv_silu (the SwiGLU in its epilogue, as the model
//            runs it), above moe_grouped_gemm ([pairs, 2I]; the model's silu_and_mul after it is
//            not timed); down: moe_grouped_gemv at T <= 8, above moe_grouped_gemm.
//   Above 8 tokens each format is also timed on wgmma (kernels/cuda/moe_gemm_wgmma.cu): bf16 as
//   moe_grouped_gemm_wgmma, E4M3 experts with E4M3 inputs (format e4m3xe4m3: each launch quantizes
//   the input rows with fp8_quantize_rows and runs moe_grouped_gemm_fp8).
// Routing: each token picks top_k distinct experts uniformly at random (seeded), grouped once by
// moe_align outside the timing; only the experts the step routes to are read, so the floor counts
// their weight bytes (E4M3: codes and f32 factors), the input rows and the output rows over the
// copy bandwidth, and 2 x pairs x n x k FLOPs over the bf16 GEMM rate measured in the same run;
// the floor is the larger. At a few pairs per expert the bytes dominate.
// Method (docs/benchmarks.md), as bench_gemv: a product is timed as L consecutive launches, each
// over its own copy of the layer's experts, with L chosen so that the routed bytes of the copies
// are >= 8x the L2 cache (bounded by the memory a copy set may take), captured in one CUDA graph
// behind a spin kernel; the median over the repeats of one replay, divided by L. Outputs start as
// NaN and must all be finite afterwards. Accuracy is the test's job (tests/gpu/test_moe_kernels.cpp).
// Run (GPU machine): build-gpu/bin/bench_moe [--json FILE] [--cases v3,v2lite] [--tokens 1,8,32,128]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "tachyon/base/check.h"
#include "tachyon/kernels/cuda/fp8.h"
#include "tachyon/kernels/cuda/moe.h"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::bench {
namespace {

namespace gpu = kernels::cuda;
using gpu::bf16;

constexpr int64_t kMaxGemvTokens = 8;             // moe_grouped_gemv's limit (max_pairs_per_expert)
constexpr double kCopySetBytes = 24.0 * (1 << 30);  // at most this much memory for one product's copies

struct Options : BenchOptions {
  std::vector<int64_t> tokens{1, 8, 32, 128};
};

// One MoE layer's widths.
struct Layer {
  const char* name;
  int32_t experts, top_k;
  int64_t hidden, inter;
};
const std::vector<Layer> kLayers = {{"v3", 64, 8, 7168, 2048}, {"v2lite", 64, 6, 2048, 1408}};

// One product of the layer: weight [experts, n, k]; `gate_up` reads the tokens' rows (a_row_divisor
// top_k) and at decode writes the SwiGLU activations [pairs, n / 2]; down reads the pairs' rows.
struct Product {
  const char* name;
  int64_t n, k;
  bool gate_up;
};

struct Result {
  std::string layer, product, format, kernel;
  int64_t tokens = 0, pairs = 0, active_experts = 0, n = 0, k = 0;
  int copies = 1;
  double us = 0, bytes = 0, flops = 0, floor_bytes_us = 0, floor_flops_us = 0;
  double floor_us() const { return std::max(floor_bytes_us, floor_flops_us); }
};

// A step's routing, grouped by moe_align on the device.
struct Routing {
  int64_t tokens = 0, pairs = 0, capacity = 0, active_experts = 0;
  cuda::DeviceBuffer sorted_rows, block_expert;
};

Routing route(const Layer& layer, int64_t tokens, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<int32_t> ids;
  std::set<int32_t> active;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> all(static_cast<size_t>(layer.experts));
    for (int32_t e = 0; e < layer.experts; ++e) all[static_cast<size_t>(e)] = e;
    std::shuffle(all.begin(), all.end(), gen);
    for (int32_t j = 0; j < layer.top_k; ++j) {
      ids.push_back(all[static_cast<size_t>(j)]);
      active.insert(all[static_cast<size_t>(j)]);
    }
  }
  Routing r;
  r.tokens = tokens;
  r.pairs = static_cast<int64_t>(ids.size());
  r.capacity = gpu::moe_sorted_capacity(r.pairs, layer.experts);
  r.active_experts = static_cast<int64_t>(active.size());
  const cuda::DeviceBuffer ids_d = upload(ids);
  r.sorted_rows = cuda::DeviceBuffer(static_cast<size_t>(r.capacity) * sizeof(int32_t));
  r.block_expert = cuda::DeviceBuffer(static_cast<size_t>(r.capacity / gpu::kMoeBlockM) * sizeof(int32_t));
  gpu::moe_align(r.sorted_rows.as<int32_t>(), r.block_expert.as<int32_t>(), ids_d.as<int32_t>(), r.pairs,
                 layer.experts, r.capacity, nullptr);
  TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
  return r;
}

// Copies of one product's experts in one format: bf16 [copies, E, n, k], or E4M3 codes with
// [copies, E, n, ceil(k / 128)] f32 factors.
struct ExpertCopies {
  bool fp8 = false;
  int copies = 1;
  size_t values = 0, factors = 0;
  cuda::DeviceBuffer weights, scales;

  ExpertCopies(bool fp8_format, int32_t experts, int64_t n, int64_t k, int copy_count)
      : fp8(fp8_format),
        copies(copy_count),
        values(size_t(experts) * n * k),
        factors(size_t(experts) * n * ((k + 127) / 128)) {
    if (fp8) {
      weights = cuda::DeviceBuffer(copies * values);
      fill_random_e4m3(weights.as<uint8_t>(), copies * values, 71, nullptr);
      scales = cuda::DeviceBuffer(copies * factors * sizeof(float));
      fill_random_f32(scales.as<float>(), copies * factors, 72, 0.01f, nullptr);
    } else {
      weights = random_bf16(copies * values, 73, 0.05f);
    }
    TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
  }
  const void* weight(int i) const {
    return static_cast<const uint8_t*>(weights.data()) + size_t(i) * values * (fp8 ? 1 : sizeof(bf16));
  }
  const float* scale(int i) const { return fp8 ? scales.as<float>() + size_t(i) * factors : nullptr; }
};

class Bench {
 public:
  Bench(const Options& options, const Ceilings& ceilings) : options_(options), ceilings_(ceilings) {}
  const std::vector<Result>& results() const { return results_; }

  void layer(const Layer& layer) {
    const std::vector<Product> products = {{"gate_up", 2 * layer.inter, layer.hidden, true},
                                           {"down", layer.hidden, layer.inter, false}};
    std::vector<Routing> routings;
    for (int64_t tokens : options_.tokens) routings.push_back(route(layer, tokens, 1000 + uint64_t(tokens)));
    for (const Product& p : products) {
      // Enough copies for the step that routes to the fewest experts, within the memory bound.
      int64_t fewest = layer.experts;
      for (const Routing& r : routings) fewest = std::min(fewest, r.active_experts);
      const double routed_bf16 = double(fewest) * p.n * p.k * sizeof(bf16);
      const double set_bf16 = double(layer.experts) * p.n * p.k * sizeof(bf16);
      const int copies = static_cast<int>(std::clamp(std::ceil(8.0 * double(ceilings_.l2_bytes) / routed_bf16), 1.0,
                                                     std::max(1.0, std::floor(kCopySetBytes / set_bf16))));
      for (bool fp8 : {false, true}) {
        const ExpertCopies w(fp8, layer.experts, p.n, p.k, copies);
        for (const Routing& r : routings) {
          time_product(layer, p, r, w, /*wgmma=*/false);
          if (r.tokens > kMaxGemvTokens) time_product(layer, p, r, w, /*wgmma=*/true);
        }
      }
    }
  }

 private:
  // wgmma: the GEMM of moe_gemm_wgmma.cu: bf16 (moe_grouped_gemm_wgmma), or for E4M3 experts on the
  // FP8 tensor cores with the inputs quantized in each launch as the model would (fp8_quantize_rows,
  // then moe_grouped_gemm_fp8), timed together.
  void time_product(const Layer& layer, const Product& p, const Routing& r, const ExpertCopies& w, bool wgmma) {
    const bool fp8_inputs = wgmma && w.fp8;
    const bool gemv = r.tokens <= kMaxGemvTokens;
    const int64_t a_rows = p.gate_up ? r.tokens : r.pairs;
    const int64_t out_cols = p.gate_up && gemv ? p.n / 2 : p.n;
    const cuda::DeviceBuffer a = random_bf16(size_t(a_rows) * p.k, 74, 1.0f);
    const cuda::DeviceBuffer out = poisoned(size_t(r.pairs) * out_cols * sizeof(bf16));
    const int64_t divisor = p.gate_up ? layer.top_k : 1;
    const auto* rows = r.sorted_rows.as<int32_t>();
    const auto* blocks = r.block_expert.as<int32_t>();
    const auto max_pairs = static_cast<int32_t>(std::min(r.tokens, kMaxGemvTokens));
    const cuda::DeviceBuffer a8(fp8_inputs ? size_t(a_rows) * p.k : 0);
    const cuda::DeviceBuffer a_scale(fp8_inputs ? size_t(a_rows) * ((p.k + 127) / 128) * sizeof(float) : 0);
    auto launch = [&](int i, cudaStream_t s) {
      bf16* o = out.as<bf16>();
      const bf16* in = a.as<bf16>();
      if (wgmma && !w.fp8) {
        gpu::moe_grouped_gemm_wgmma(o, in, a_rows, static_cast<const bf16*>(w.weight(i)), rows, blocks, r.capacity,
                                    divisor, p.n, p.k, s);
      } else if (fp8_inputs) {
        gpu::fp8_quantize_rows(a8.as<uint8_t>(), a_scale.as<float>(), in, a_rows, a_rows, p.k, s);
        gpu::moe_grouped_gemm_fp8(o, a8.as<uint8_t>(), a_scale.as<float>(), a_rows,
                                  static_cast<const uint8_t*>(w.weight(i)), w.scale(i), rows, blocks, r.capacity,
                                  divisor, p.n, p.k, s);
      } else if (w.fp8) {
        const auto* codes = static_cast<const uint8_t*>(w.weight(i));
        if (!gemv) {
          gpu::moe_grouped_gemm(o, in, codes, w.scale(i), rows, blocks, r.capacity, divisor, p.n, p.k, s);
        } else if (p.gate_up) {
          gpu::moe_grouped_gemv_silu(o, in, codes, w.scale(i), rows, blocks, r.capacity, divisor, p.n / 2, p.k,
                                     max_pairs, s);
        } else {
          gpu::moe_grouped_gemv(o, in, codes, w.scale(i), rows, blocks, r.capacity, divisor, p.n, p.k, max_pairs, s);
        }
      } else {
        const auto* values = static_cast<const bf16*>(w.weight(i));
        if (!gemv) {
          gpu::moe_grouped_gemm(o, in, values, rows, blocks, r.capacity, divisor, p.n, p.k, s);
        } else if (p.gate_up) {
          gpu::moe_grouped_gemv_silu(o, in, values, rows, blocks, r.capacity, divisor, p.n / 2, p.k, max_pairs, s);
        } else {
          gpu::moe_grouped_gemv(o, in, values, rows, blocks, r.capacity, divisor, p.n, p.k, max_pairs, s);
        }
      }
    };
    Stream stream;
    Result res{layer.name, p.name, fp8_inputs ? "e4m3xe4m3" : w.fp8 ? "e4m3" : "bf16",
               fp8_inputs ? "moe_grouped_gemm_fp8"
               : wgmma    ? "moe_grouped_gemm_wgmma"
               : gemv     ? (p.gate_up ? "moe_grouped_gemv_silu" : "moe_grouped_gemv")
                          : "moe_grouped_gemm"};
    res.tokens = r.tokens;
    res.pairs = r.pairs;
    res.active_experts = r.active_experts;
    res.n = p.n;
    res.k = p.k;
    res.copies = w.copies;
    res.us = time_us(
                 [&](cudaStream_t s) {
                   for (int i = 0; i < w.copies; ++i) launch(i, s);
                 },
                 stream.get(), options_, 500.0 + 10.0 * w.copies) /
             w.copies;
    check_all_finite(out, size_t(r.pairs) * out_cols, /*f32=*/false, std::string(layer.name) + " " + p.name);
    const double weight_bytes = double(r.active_experts) * p.n * p.k * (w.fp8 ? 1.0 : 2.0) +
                                (w.fp8 ? double(r.active_experts) * p.n * ((p.k + 127) / 128) * sizeof(float) : 0.0);
    res.bytes = weight_bytes + double(a_rows) * p.k * sizeof(bf16) + double(r.pairs) * out_cols * sizeof(bf16);
    res.flops = 2.0 * double(r.pairs) * p.n * p.k;
    res.floor_bytes_us = res.bytes / ceilings_.copy_bytes_per_s * 1e6;
    res.floor_flops_us = ceilings_.gemm_flops_per_s > 0 ? res.flops / ceilings_.gemm_flops_per_s * 1e6 : 0.0;
    std::printf("%-7s %-8s %4lld %5lld %3lld  %-9s %-22s %6d %10.2f %9.2f %6.2f %7.0f\n", res.layer.c_str(),
                res.product.c_str(), static_cast<long long>(res.tokens), static_cast<long long>(res.pairs),
                static_cast<long long>(res.active_experts), res.format.c_str(), res.kernel.c_str(), res.copies, res.us,
                res.floor_us(), res.us / res.floor_us(), res.bytes / res.us * 1e-3);
    std::fflush(stdout);
    results_.push_back(res);
  }

  const Options& options_;
  const Ceilings& ceilings_;
  std::vector<Result> results_;
};

nlohmann::json result_rows(const std::vector<Result>& results) {
  nlohmann::json rows = nlohmann::json::array();
  for (const Result& r : results) {
    // The same product in bf16 on the default kernel, for the other rows' speed-up.
    double bf16_us = 0;
    for (const Result& o : results) {
      if (o.format == "bf16" && o.kernel != "moe_grouped_gemm_wgmma" && o.layer == r.layer && o.product == r.product &&
          o.tokens == r.tokens) {
        bf16_us = o.us;
      }
    }
    rows.push_back({{"layer", r.layer},
                    {"product", r.product},
                    {"format", r.format},
                    {"kernel", r.kernel},
                    {"tokens", r.tokens},
                    {"pairs", r.pairs},
                    {"active_experts", r.active_experts},
                    {"n", r.n},
                    {"k", r.k},
                    {"expert_copies", r.copies},
                    {"us_median", r.us},
                    {"bytes", r.bytes},
                    {"flops", r.flops},
                    {"floor_bytes_us", r.floor_bytes_us},
                    {"floor_flops_us", r.floor_flops_us},
                    {"ratio_to_floor", r.us / r.floor_us()},
                    {"bf16_us_over_this", bf16_us > 0 ? bf16_us / r.us : 0.0}});
  }
  return rows;
}

void run(const Options& options) {
  TACHYON_CHECK(cuda::cuda_device_available()) << "bench_moe needs a CUDA device";
  const Ceilings ceilings = measure_ceilings(options, /*gemm=*/true);
  print_ceilings(ceilings);
  std::printf("per launch: median of %d %s after %d warm-up, over expert copies whose routed bytes are >= 8x L2; "
              "floor = max(bytes / copy, FLOPs / GEMM rate)\n",
              options.repeats, options.eager ? "eager runs" : "graph replays", options.warmup);
  std::printf("%-7s %-8s %4s %5s %3s  %-9s %-22s %6s %10s %9s %6s %7s\n", "layer", "product", "T", "pairs", "E",
              "fmt", "kernel", "copies", "us median", "floor us", "ratio", "GB/s");
  Bench bench(options, ceilings);
  for (const Layer& layer : kLayers) {
    if (wanted(options, layer.name)) bench.layer(layer);
  }
  write_results_json(options, ceilings, result_rows(bench.results()));
}

}  // namespace
}  // namespace tachyon::bench

int main(int argc, char** argv) {
  tachyon::bench::Options options;
  CLI::App app{"bench_moe: per-launch time of the grouped expert products, E4M3 and bf16, against their floors"};
  tachyon::bench::add_common_options(app, options, {"v3", "v2lite"});
  app.add_option("--tokens", options.tokens, "tokens per step (default: 1,8,32,128)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  return tachyon::bench::bench_main(app, options, argc, argv, [&] { tachyon::bench::run(options); });
}
