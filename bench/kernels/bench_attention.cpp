// bench_attention: the per-layer GPU time of the dense paged attention kernels
// (kernels/cuda/attention.h) at Llama-3-8B shapes (32 query heads, 8 KV heads of 128, block 16)
// against their floors, on the current GPU. It owns the timing that used to sit in
// tests/gpu/test_attention_kernels.cpp (tests check correctness; time is measured here):
//   a) decode, one query per sequence, at (batch, context) = (64, 1024), (1, 100), (1, 5000),
//      (16, 4096);
//   b) prefill of one 2,048-token causal prompt (no cached prefix).
//
// Method (docs/benchmarks.md: floors first, warm-up, median of repeats), as bench_mla_dsa: two
// ceilings measured in the same run (a 1 GiB device-to-device copy, bytes read + written; a
// bf16 8192^3 cuBLAS product), and per case floor = max(bytes / copy bandwidth, FLOPs / GEMM
// rate). Decode bytes are the K and V rows it must read (batch x context x 8 x 128 x 2 x 2);
// prefill bytes add q and out, and its FLOPs are QK^T and PV over the causal triangle
// (4 x 128 x 32 x n(n+1)/2).
// The one non-obvious decision: a case is timed as L consecutive "layers", each over its own
// copy of the K/V cache (identity block tables into one pool), with L chosen so the pool is
// >= 8x the L2 cache, as a model's layers are; otherwise the batch-1 caches (0.4 and 21 MB)
// would be read from L2. The L launches are captured in one CUDA graph, a spin kernel keeps the
// stream busy while the events and the replay are enqueued, and the reported time is the median
// over the repeats of one replay, divided by L.
// Inputs are random bf16 (hash fill on the device); outputs start as NaN and must all be finite
// afterwards, so a kernel that skipped work fails. Accuracy is the test's job, not this file's.
// Run (GPU machine): build-gpu/bin/bench_attention [--json FILE] [--cases decode,prefill]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "tachyon/base/check.h"
#include "tachyon/kernels/cuda/attention.h"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::bench {
namespace {

namespace gpu = kernels::cuda;
using gpu::bf16;

// Llama-3-8B's attention.
constexpr int32_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlockSize = 16;
constexpr int kMaxLayers = 1024;  // a 100-token, batch-1 cache is 0.4 MB: ~1000 copies reach 8x L2

struct Options : TimingOptions {
  std::string json_path;
  std::vector<std::string> cases{"decode", "prefill"};
  std::string command_line;
};

struct Result {
  std::string what;
  int32_t batch = 0, context = 0;
  int layers = 1;  // layers per graph replay
  double us_median = 0, bytes = 0, flops = 0;
  double floor_bytes_us = 0, floor_flops_us = 0;
  double floor_us() const { return std::max(floor_bytes_us, floor_flops_us); }
};

// L layers of one batch's K/V caches in one pool. Layer l's sequence s owns blocks
// (l * batch + s) * blocks_per_seq + b, b = 0 .. blocks_per_seq - 1: identity block tables.
struct LayerCaches {
  int32_t layers = 1, batch = 0, blocks_per_seq = 0;
  cuda::DeviceBuffer k, v;     // [layers * batch * blocks_per_seq, kBlockSize, kKvHeads, kHeadDim] bf16 each
  cuda::DeviceBuffer tables;   // [layers, batch, blocks_per_seq] int32

  LayerCaches(int32_t layers_, int32_t batch_, int32_t context)
      : layers(layers_), batch(batch_), blocks_per_seq((context + kBlockSize - 1) / kBlockSize) {
    const size_t blocks = size_t(layers) * batch * blocks_per_seq;
    k = random_bf16(blocks * kBlockSize * kKvHeads * kHeadDim, 21, 1.0f);
    v = random_bf16(blocks * kBlockSize * kKvHeads * kHeadDim, 22, 1.0f);
    std::vector<int32_t> ids(blocks);
    for (size_t i = 0; i < blocks; ++i) ids[i] = static_cast<int32_t>(i);
    tables = upload(ids);
  }
  gpu::PagedKvView view(int layer) const {
    const int32_t* table = tables.as<int32_t>() + size_t(layer) * batch * blocks_per_seq;
    return gpu::PagedKvView{k.as<bf16>(), v.as<bf16>(), table, blocks_per_seq, kBlockSize, kKvHeads, kHeadDim};
  }
};

// Layers whose caches together are >= 8x the L2 cache (at most kMaxLayers).
int layers_for(double bytes_per_layer, const Ceilings& ceilings) {
  const double target = 8.0 * static_cast<double>(ceilings.l2_bytes);
  return static_cast<int>(std::clamp(std::ceil(target / bytes_per_layer), 1.0, double(kMaxLayers)));
}

class Bench {
 public:
  Bench(const Options& options, const Ceilings& ceilings) : options_(options), ceilings_(ceilings) {}
  const std::vector<Result>& results() const { return results_; }

  void add(const std::string& what, int32_t batch, int32_t context, int layers, double us_per_replay, double bytes,
           double flops) {
    Result r{what, batch, context, layers, us_per_replay / layers, bytes, flops};
    r.floor_bytes_us = bytes / ceilings_.copy_bytes_per_s * 1e6;
    r.floor_flops_us = flops / ceilings_.gemm_flops_per_s * 1e6;
    std::printf("%-16s %6d %8d %12.2f %10.2f %7.2f  %-5s %9.2f %9.1f %6d\n", what.c_str(), batch, context,
                r.us_median, r.floor_us(), r.us_median / r.floor_us(),
                r.floor_bytes_us >= r.floor_flops_us ? "bytes" : "flops", bytes / r.us_median / 1e6,
                flops / r.us_median / 1e6, layers);
    std::fflush(stdout);
    results_.push_back(r);
  }

  // Decode: one query per sequence, every sequence at `context` tokens.
  void decode(int32_t batch, int32_t context) {
    const double layer_bytes = 2.0 * batch * context * kKvHeads * kHeadDim * sizeof(bf16);  // K and V
    const int layers = layers_for(layer_bytes, ceilings_);
    const LayerCaches caches(layers, batch, context);
    const cuda::DeviceBuffer q = random_bf16(size_t(batch) * kHeads * kHeadDim, 31, 1.0f);
    const cuda::DeviceBuffer context_lens = upload(std::vector<int32_t>(batch, context));
    const cuda::DeviceBuffer out = poisoned(size_t(batch) * kHeads * kHeadDim * sizeof(bf16));
    const size_t workspace_bytes = gpu::paged_decode_workspace_bytes(batch, kHeads, kHeadDim, context);
    const cuda::DeviceBuffer workspace(std::max<size_t>(workspace_bytes, 1));
    const gpu::AttentionParams params = params_of();
    Stream stream;
    const double us = time_us(
        [&](cudaStream_t s) {
          for (int l = 0; l < layers; ++l) {
            gpu::paged_decode_attention(out.as<bf16>(), q.as<bf16>(), caches.view(l), context_lens.as<int32_t>(), batch,
                                        context, params, workspace.data(), workspace_bytes, s);
          }
        },
        stream.get(), options_, /*eager_enqueue_us=*/500.0 + 10.0 * layers);
    check_all_finite(out, "decode");
    add("decode", batch, context, layers, us, layer_bytes, 4.0 * batch * kHeads * double(context) * kHeadDim);
  }

  // Causal prefill of one `tokens`-long prompt (no cached prefix).
  void prefill(int32_t tokens) {
    const double kv_bytes = 2.0 * tokens * kKvHeads * kHeadDim * sizeof(bf16);
    const double io_bytes = 2.0 * tokens * kHeads * kHeadDim * sizeof(bf16);  // q in, out
    const int layers = layers_for(kv_bytes, ceilings_);
    const LayerCaches caches(layers, 1, tokens);
    const cuda::DeviceBuffer q = random_bf16(size_t(tokens) * kHeads * kHeadDim, 41, 1.0f);
    const cuda::DeviceBuffer query_starts = upload({0, tokens}), context_lens = upload({tokens});
    const cuda::DeviceBuffer out = poisoned(size_t(tokens) * kHeads * kHeadDim * sizeof(bf16));
    const gpu::AttentionParams params = params_of();
    Stream stream;
    const double us = time_us(
        [&](cudaStream_t s) {
          for (int l = 0; l < layers; ++l) {
            gpu::paged_prefill_attention(out.as<bf16>(), q.as<bf16>(), caches.view(l), query_starts.as<int32_t>(),
                                         context_lens.as<int32_t>(), 1, tokens, tokens, params, s);
          }
        },
        stream.get(), options_, /*eager_enqueue_us=*/500.0 + 10.0 * layers);
    check_all_finite(out, "prefill");
    const double flops = 4.0 * kHeadDim * kHeads * (double(tokens) * (tokens + 1) / 2);
    add("prefill", 1, tokens, layers, us, kv_bytes + io_bytes, flops);
  }

 private:
  static gpu::AttentionParams params_of() {
    return gpu::AttentionParams{kHeads, 1.0f / std::sqrt(static_cast<float>(kHeadDim)), 0};
  }

  const Options& options_;
  const Ceilings& ceilings_;
  std::vector<Result> results_;
};

bool wanted(const Options& options, const std::string& name) {
  return std::find(options.cases.begin(), options.cases.end(), name) != options.cases.end();
}

void write_json(const Options& options, const Ceilings& ceilings, const std::vector<Result>& results) {
  nlohmann::json rows = nlohmann::json::array();
  for (const Result& r : results) {
    rows.push_back({{"what", r.what},
                    {"batch", r.batch},
                    {"context", r.context},
                    {"us_median", r.us_median},
                    {"floor_us", r.floor_us()},
                    {"ratio_to_floor", r.us_median / r.floor_us()},
                    {"bytes", r.bytes},
                    {"flops", r.flops},
                    {"floor_bytes_us", r.floor_bytes_us},
                    {"floor_flops_us", r.floor_flops_us},
                    {"layers_per_replay", r.layers}});
  }
  const nlohmann::json doc = {{"gpu", cuda::current_device_name()},
                              {"shape", {{"heads", kHeads}, {"kv_heads", kKvHeads}, {"head_dim", kHeadDim},
                                         {"block_size", kBlockSize}}},
                              {"copy_bandwidth_bytes_per_s", ceilings.copy_bytes_per_s},
                              {"gemm_flops_per_s", ceilings.gemm_flops_per_s},
                              {"l2_bytes", ceilings.l2_bytes},
                              {"warmup", options.warmup},
                              {"repeats", options.repeats},
                              {"cuda_graphs", !options.eager},
                              {"results", rows},
                              {"command", options.command_line}};
  std::ofstream file(options.json_path);
  TACHYON_CHECK(file.good()) << "cannot write " << options.json_path;
  file << doc.dump(2) << "\n";
}

void run(const Options& options) {
  TACHYON_CHECK(cuda::cuda_device_available()) << "bench_attention needs a CUDA device";
  const Ceilings ceilings = measure_ceilings(options, /*gemm=*/true);
  print_ceilings(ceilings);
  std::printf("Llama-3-8B attention (%d heads, %d KV heads of %d, block %d); per layer: median of %d %s after %d "
              "warm-up; floor = max(bytes / copy, FLOPs / GEMM)\n",
              kHeads, kKvHeads, kHeadDim, kBlockSize, options.repeats, options.eager ? "eager runs" : "graph replays",
              options.warmup);
  std::printf("%-16s %6s %8s %12s %10s %7s  %-5s %9s %9s %6s\n", "what", "batch", "context", "us median", "floor us",
              "ratio", "bound", "TB/s", "TFLOP/s", "layers");
  Bench bench(options, ceilings);
  if (wanted(options, "decode")) {
    for (auto [batch, context] : {std::pair{1, 100}, std::pair{1, 5000}, std::pair{16, 4096}, std::pair{64, 1024}}) {
      bench.decode(batch, context);
    }
  }
  if (wanted(options, "prefill")) bench.prefill(2048);
  if (!options.json_path.empty()) {
    write_json(options, ceilings, bench.results());
    std::printf("wrote %s\n", options.json_path.c_str());
  }
}

}  // namespace
}  // namespace tachyon::bench

int main(int argc, char** argv) {
  tachyon::bench::Options options;
  for (int i = 0; i < argc; ++i) options.command_line += (i ? " " : "") + std::string(argv[i]);
  CLI::App app{"bench_attention: per-layer time of the paged decode and prefill attention kernels at Llama-3-8B "
               "shapes against their floors"};
  app.add_option("--json", options.json_path, "also write the results as JSON here");
  app.add_option("--cases", options.cases, "any of decode, prefill (default: both)")
      ->delimiter(',')
      ->check(CLI::IsMember({"decode", "prefill"}));
  app.add_option("--warmup", options.warmup, "untimed runs first")->default_val(3)->check(CLI::Range(0, 1000));
  app.add_option("--repeats", options.repeats, "timed runs; the median is reported")->default_val(20)->check(CLI::Range(1, 10000));
  app.add_flag("--eager", options.eager, "time plain launches instead of CUDA graph replays");
  try {
    app.parse(argc, argv);
    tachyon::bench::run(options);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
