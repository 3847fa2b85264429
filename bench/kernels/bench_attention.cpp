// bench_attention: the per-layer GPU time of the dense paged attention kernels
// (kernels/cuda/attention.h) at Llama-3-8B shapes (32 query heads, 8 KV heads of 128, block 16)
// against their floors, on the current GPU. It owns the timing that used to sit in
// tests/gpu/test_attention_kernels.cpp (tests check correctness; time is measured here):
//   a) decode, one query per sequence, at (batch, context) = (64, 1024), (1, 100), (1, 5000),
//      (16, 4096);
//   b) prefill of one 2,048-token causal prompt (no cached prefix);
//   c) a)'s decode over an FP8 cache (--kv-cache-dtype fp8: E4M3 codes, one f32 factor per
//      token and KV head: 128 + 4 bytes a row instead of 256).
//
// Method (docs/benchmarks.md: floors first, warm-up, median of repeats), as bench_mla_dsa: two
// ceilings measured in the same run (a 1 GiB device-to-device copy, bytes read + written; a
// bf16 8192^3 cuBLAS product), and per case floor = max(bytes / copy bandwidth, FLOPs / GEMM
// rate). Decode bytes are the K and V rows it must read (batch x context x 8 x 128 x 2 x 2, or
// x 2 x 132 over an FP8 cache);
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
// Run (GPU machine): build-gpu/bin/bench_attention [--json FILE] [--cases decode,prefill,decode_fp8]
//   [--decode-shapes 64x1024,256x2048] [--shuffled-blocks]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "bench_device.h"
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


using Result = LayerResult;

// L layers of one batch's K/V caches in one pool. Layer l's sequence s owns blocks
// (l * batch + s) * blocks_per_seq + b, b = 0 .. blocks_per_seq - 1: identity block tables.
// With `fp8` the FP8 cache's arrays instead: random finite codes, every factor 0x3c3c3c3c (0.0115:
// positive, as amax / 448 is; the time does not depend on the values).
struct LayerCaches {
  int32_t layers = 1, batch = 0, blocks_per_seq = 0;
  bool fp8 = false;
  cuda::DeviceBuffer k, v;     // [layers * batch * blocks_per_seq, kBlockSize, kKvHeads, kHeadDim] bf16 or E4M3 each
  cuda::DeviceBuffer k_scale, v_scale;  // FP8: [slots, kKvHeads] f32
  cuda::DeviceBuffer tables;   // [layers, batch, blocks_per_seq] int32

  // shuffled: the block ids are a fixed permutation of the pool, as a server's free list hands
  // them out after hours of traffic, instead of one contiguous run per sequence.
  LayerCaches(int32_t layers_, int32_t batch_, int32_t context, bool shuffled, bool fp8_ = false)
      : layers(layers_), batch(batch_), blocks_per_seq((context + kBlockSize - 1) / kBlockSize), fp8(fp8_) {
    const size_t blocks = size_t(layers) * batch * blocks_per_seq;
    const size_t values = blocks * kBlockSize * kKvHeads * kHeadDim, rows = blocks * kBlockSize * kKvHeads;
    if (fp8) {
      k = cuda::DeviceBuffer(values);
      v = cuda::DeviceBuffer(values);
      fill_random_e4m3(k.as<uint8_t>(), values, 21, nullptr);
      fill_random_e4m3(v.as<uint8_t>(), values, 22, nullptr);
      k_scale = cuda::DeviceBuffer(rows * sizeof(float));
      v_scale = cuda::DeviceBuffer(rows * sizeof(float));
      TACHYON_CUDA_CHECK(cudaMemset(k_scale.data(), 0x3c, rows * sizeof(float)));
      TACHYON_CUDA_CHECK(cudaMemset(v_scale.data(), 0x3c, rows * sizeof(float)));
    } else {
      k = random_bf16(values, 21, 1.0f);
      v = random_bf16(values, 22, 1.0f);
    }
    std::vector<int32_t> ids(blocks);
    for (size_t i = 0; i < blocks; ++i) ids[i] = static_cast<int32_t>(i);
    if (shuffled) std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
    tables = upload(ids);
  }
  gpu::PagedKvView view(int layer) const {
    const int32_t* table = tables.as<int32_t>() + size_t(layer) * batch * blocks_per_seq;
    gpu::PagedKvView view{nullptr, nullptr, table, blocks_per_seq, kBlockSize, kKvHeads, kHeadDim};
    if (fp8) {
      view.fp8 = {k.as<uint8_t>(), v.as<uint8_t>(), k_scale.as<float>(), v_scale.as<float>()};
    } else {
      view.k_cache = k.as<bf16>();
      view.v_cache = v.as<bf16>();
    }
    return view;
  }
};

// Layers whose caches together are >= 8x the L2 cache (at most kMaxLayers).
int layers_for(double bytes_per_layer, const Ceilings& ceilings) {
  const double target = 8.0 * static_cast<double>(ceilings.l2_bytes);
  return static_cast<int>(std::clamp(std::ceil(target / bytes_per_layer), 1.0, double(kMaxLayers)));
}

class Bench {
 public:
  Bench(const BenchOptions& options, const Ceilings& ceilings, bool shuffled)
      : options_(options), ceilings_(ceilings), shuffled_(shuffled) {}
  const std::vector<Result>& results() const { return results_; }

  void add(const std::string& what, int32_t batch, int32_t context, int layers, double us_per_replay, double bytes,
           double flops) {
    const Result r = layer_result(ceilings_, what, batch, context, layers, us_per_replay, bytes, flops);
    std::printf("%-16s %6d %8d %12.2f %10.2f %7.2f  %-5s %9.2f %9.1f %6d\n", what.c_str(), batch, context,
                r.us_median, r.floor_us(), r.us_median / r.floor_us(),
                r.floor_bytes_us >= r.floor_flops_us ? "bytes" : "flops", bytes / r.us_median / 1e6,
                flops / r.us_median / 1e6, layers);
    std::fflush(stdout);
    results_.push_back(r);
  }

  // Decode: one query per sequence, every sequence at `context` tokens (over an FP8 cache with `fp8`).
  void decode(int32_t batch, int32_t context, bool fp8 = false) {
    const double row_bytes = fp8 ? kHeadDim + sizeof(float) : kHeadDim * sizeof(bf16);  // one K or V row
    const double layer_bytes = 2.0 * batch * context * kKvHeads * row_bytes;
    const int layers = layers_for(layer_bytes, ceilings_);
    const LayerCaches caches(layers, batch, context, shuffled_, fp8);
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
    const std::string what = fp8 ? "decode_fp8" : "decode";
    check_all_finite(out, what.c_str());
    add(what, batch, context, layers, us, layer_bytes, 4.0 * batch * kHeads * double(context) * kHeadDim);
  }

  // Causal prefill of one `tokens`-long prompt (no cached prefix).
  void prefill(int32_t tokens) {
    const double kv_bytes = 2.0 * tokens * kKvHeads * kHeadDim * sizeof(bf16);
    const double io_bytes = 2.0 * tokens * kHeads * kHeadDim * sizeof(bf16);  // q in, out
    const int layers = layers_for(kv_bytes, ceilings_);
    const LayerCaches caches(layers, 1, tokens, shuffled_);
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

  const BenchOptions& options_;
  const Ceilings& ceilings_;
  const bool shuffled_;
  std::vector<Result> results_;
};

// What the command line adds to the common options.
struct AttentionOptions {
  std::vector<std::string> decode_shapes = {"1x100", "1x5000", "16x4096", "64x1024"};  // batch x context
  bool shuffled_blocks = false;
};

std::pair<int32_t, int32_t> parse_shape(const std::string& text) {
  const size_t x = text.find('x');
  TACHYON_CHECK(x != std::string::npos) << "a decode shape is BATCHxCONTEXT, not '" << text << "'";
  const int32_t batch = std::stoi(text.substr(0, x)), context = std::stoi(text.substr(x + 1));
  TACHYON_CHECK(batch > 0 && context > 0) << "a decode shape needs a positive batch and context: " << text;
  return {batch, context};
}

void run(const BenchOptions& options, const AttentionOptions& extra) {
  TACHYON_CHECK(cuda::cuda_device_available()) << "bench_attention needs a CUDA device";
  const Ceilings ceilings = measure_ceilings(options, /*gemm=*/true);
  print_ceilings(ceilings);
  std::printf("Llama-3-8B attention (%d heads, %d KV heads of %d, block %d); per layer: median of %d %s after %d "
              "warm-up; floor = max(bytes / copy, FLOPs / GEMM)\n",
              kHeads, kKvHeads, kHeadDim, kBlockSize, options.repeats, options.eager ? "eager runs" : "graph replays",
              options.warmup);
  std::printf("%-16s %6s %8s %12s %10s %7s  %-5s %9s %9s %6s\n", "what", "batch", "context", "us median", "floor us",
              "ratio", "bound", "TB/s", "TFLOP/s", "layers");
  Bench bench(options, ceilings, extra.shuffled_blocks);
  for (const bool fp8 : {false, true}) {  // the bf16 cache's decode cases, then the FP8 cache's
    if (!wanted(options, fp8 ? "decode_fp8" : "decode")) continue;
    for (const std::string& shape : extra.decode_shapes) {
      const auto [batch, context] = parse_shape(shape);
      bench.decode(batch, context, fp8);
    }
  }
  if (wanted(options, "prefill")) bench.prefill(2048);
  const nlohmann::json shape = {{"heads", kHeads}, {"kv_heads", kKvHeads}, {"head_dim", kHeadDim},
                                {"block_size", kBlockSize}, {"shuffled_blocks", extra.shuffled_blocks}};
  write_results_json(options, ceilings, layer_result_rows(bench.results()), {{"shape", shape}});
}

}  // namespace
}  // namespace tachyon::bench

int main(int argc, char** argv) {
  tachyon::bench::BenchOptions options;
  CLI::App app{"bench_attention: per-layer time of the paged decode and prefill attention kernels at Llama-3-8B "
               "shapes against their floors"};
  tachyon::bench::AttentionOptions extra;
  tachyon::bench::add_common_options(app, options, {"decode", "prefill", "decode_fp8"});
  app.add_option("--decode-shapes", extra.decode_shapes,
                 "decode cases as BATCHxCONTEXT (default 1x100,1x5000,16x4096,64x1024)")
      ->delimiter(',');
  app.add_flag("--shuffled-blocks", extra.shuffled_blocks,
               "block tables as a permutation of the pool, not contiguous runs");
  return tachyon::bench::bench_main(app, options, argc, argv, [&] { tachyon::bench::run(options, extra); });
}
