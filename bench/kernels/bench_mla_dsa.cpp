// bench_mla_dsa: the per-layer GPU time of DeepSeek's attention kernels against their floors,
// on the current GPU. It owns the timing that used to sit in tests/gpu/test_mla_kernels.cpp
// (tests check correctness; time is measured here, never inside a test).
//   a) dense MLA decode at DeepSeek-V3.2 shapes (128 heads, rank 512 + rope 64, block 64),
//      batch 1 and 32, contexts 8K, 32K, 128K;
//   b) DSA decode at the same points: the indexer's scores (64 heads x 128), the top-2048
//      selection and sparse MLA over the kept rows, each part and the three in sequence;
//   c) DeepSeek-V2-Lite shapes (16 heads): decode at batch 1 / 32 / 64, and a 2,048-token prefill;
//   d) a), b) and c)'s decode over the FP8 cache (--kv-cache-dtype fp8: c_kv codes + 4 factors + bf16 k_pe, 656
//      bytes a row; index keys as codes + one factor, 132 bytes).
//
// Method (docs/benchmarks.md: floors first, warm-up, median of repeats): two ceilings measured
// in the same run (a 1 GiB device-to-device copy, bytes read + written; a bf16 8192^3 cuBLAS
// product), and per case
// floor = max(bytes it must read / copy bandwidth, FLOPs / GEMM rate). The byte counts: latent
// rows x 576 x 2 for dense MLA; index keys x 128 x 2 + kept rows x 576 x 2 for DSA (the f32
// scores row each query writes and re-reads, 8 bytes a key against 256, is left out); the FP8
// cache's rows x 656 and keys x 132.
// The one non-obvious decision: a case is timed as L consecutive "layers", each over its own copy
// of the caches (identity block tables into one pool), with L chosen so the pool is >= 8x the L2
// cache, as a model's layers are; otherwise a batch-1, 8K-context cache (9 MB) would be timed
// out of L2. The L launches are captured in one CUDA graph (no launch gaps from the host), a spin
// kernel keeps the stream busy while the events and the replay are enqueued, and the reported
// time is the median over the repeats of one replay, divided by L.
// Inputs are random bf16 (hash fill on the device: finite, never zeros, scattered top-k picks);
// outputs start as NaN and must all be finite afterwards, so a kernel that skipped work fails.
// Run (GPU machine): build-gpu/bin/bench_mla_dsa [--json FILE] [--cases v32_dense,v32_dsa,...]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "tachyon/base/check.h"
#include "tachyon/kernels/cuda/dsa_indexer.h"
#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::bench {
namespace {

namespace gpu = kernels::cuda;
using gpu::bf16;

constexpr int32_t kRank = 512, kRope = 64, kWidth = kRank + kRope;  // latent row [c_kv | k_pe]
// Bytes of a latent row and an index key in each cache.
double latent_row_bytes(bool fp8) { return fp8 ? double(kernels::fp8_latent_row_bytes(kRank, kRope)) : 2.0 * kWidth; }
constexpr int32_t kBlockSize = 64;
constexpr int32_t kIndexHeads = 64, kIndexDim = 128, kTopk = 2048;  // DeepSeek-V3.2's indexer
double index_key_bytes(bool fp8) { return fp8 ? double(kernels::fp8_index_key_bytes(kIndexDim)) : 2.0 * kIndexDim; }
constexpr int kMaxLayers = 64;
constexpr double kEagerEnqueueUs = 2000.0;  // eager launches of 64 layers take ~1 ms to enqueue
const float kScale = 1.0f / std::sqrt(192.0f);  // qk_head_dim^-0.5 (no YaRN mscale: timing only)


using Result = LayerResult;

// L layers of one batch's caches in one pool: latent rows and (for DSA) index keys. Layer l's
// sequence s owns blocks (l * batch + s) * blocks_per_seq + b, b = 0 .. blocks_per_seq - 1: the
// block tables are identity permutations, one table per layer.
// With `fp8` the FP8 cache's planes instead: every code 0x38 (1.0; the time does not depend on
// the values), random factors and k_pe.
struct LayerCaches {
  int32_t layers = 1, batch = 0, blocks_per_seq = 0;
  bool fp8 = false;
  cuda::DeviceBuffer latents;     // [layers * batch * blocks_per_seq, kBlockSize, kWidth] bf16
  cuda::DeviceBuffer index_keys;  // [same blocks, kBlockSize, kIndexDim] bf16; empty without DSA
  cuda::DeviceBuffer tables;      // [layers, batch, blocks_per_seq] int32
  // FP8: [slots, kRank] codes, [slots, 4] factors, [slots, kRope] bf16; [slots, kIndexDim] codes, [slots] factors.
  cuda::DeviceBuffer codes, scales, rope, key_codes, key_scales;

  LayerCaches(int32_t layers_, int32_t batch_, int32_t context, bool with_index_keys, bool fp8_ = false)
      : layers(layers_), batch(batch_), blocks_per_seq((context + kBlockSize - 1) / kBlockSize), fp8(fp8_) {
    const size_t blocks = size_t(layers) * batch * blocks_per_seq, slots = blocks * kBlockSize;
    if (fp8) {
      codes = cuda::DeviceBuffer(slots * kRank);
      TACHYON_CUDA_CHECK(cudaMemset(codes.data(), 0x38, slots * kRank));
      const size_t factors = slots * gpu::fp8_latent_scale_stride(kRank);
      scales = cuda::DeviceBuffer(factors * sizeof(float));
      fill_random_f32(scales.as<float>(), factors, 23, 1.0f, nullptr);
      rope = random_bf16(slots * kRope, 24, 1.0f);
      if (with_index_keys) {
        key_codes = cuda::DeviceBuffer(slots * kIndexDim);
        TACHYON_CUDA_CHECK(cudaMemset(key_codes.data(), 0x38, slots * kIndexDim));
        key_scales = cuda::DeviceBuffer(slots * sizeof(float));
        fill_random_f32(key_scales.as<float>(), slots, 25, 1.0f, nullptr);
      }
    } else {
      latents = random_bf16(slots * kWidth, 21, 1.0f);
      if (with_index_keys) index_keys = random_bf16(slots * kIndexDim, 22, 1.0f);
    }
    std::vector<int32_t> ids(blocks);
    for (size_t i = 0; i < blocks; ++i) ids[i] = static_cast<int32_t>(i);
    tables = upload(ids);
  }
  const int32_t* table(int layer) const { return tables.as<int32_t>() + size_t(layer) * batch * blocks_per_seq; }
  gpu::PagedLatentView latent_view(int layer) const {
    gpu::PagedLatentView view{fp8 ? nullptr : latents.as<bf16>(), table(layer), blocks_per_seq, kBlockSize, kRank, kRope};
    if (fp8) {
      view.codes = codes.as<uint8_t>();
      view.scales = scales.as<float>();
      view.rope = rope.as<bf16>();
    }
    return view;
  }
  gpu::PagedIndexKeyView key_view(int layer) const {
    gpu::PagedIndexKeyView view{fp8 ? nullptr : index_keys.as<bf16>(), table(layer), blocks_per_seq, kBlockSize,
                                kIndexDim};
    if (fp8) {
      view.codes = key_codes.as<uint8_t>();
      view.scales = key_scales.as<float>();
    }
    return view;
  }
};

// Layers whose caches together are >= 8x the L2 cache (at most kMaxLayers).
int layers_for(double bytes_per_layer, const Ceilings& ceilings) {
  const double target = 8.0 * static_cast<double>(ceilings.l2_bytes);
  return static_cast<int>(std::clamp(std::ceil(target / bytes_per_layer), 1.0, double(kMaxLayers)));
}

// Whether `bytes` fit in the device's free memory with a margin; prints the skip otherwise.
bool fits(double bytes, const std::string& what, int32_t batch, int32_t context) {
  const double free = static_cast<double>(cuda::device_memory_info().free);
  if (bytes < 0.9 * free) return true;
  std::printf("%-22s %6d %8d  skipped: needs %.2f GB, %.2f GB free\n", what.c_str(), batch, context, bytes / 1e9,
              free / 1e9);
  return false;
}

class Bench {
 public:
  Bench(const BenchOptions& options, const Ceilings& ceilings) : options_(options), ceilings_(ceilings) {}
  const std::vector<Result>& results() const { return results_; }

  void add(const std::string& what, int32_t batch, int32_t context, int layers, double us_per_replay, double bytes,
           double flops) {
    const Result r = layer_result(ceilings_, what, batch, context, layers, us_per_replay, bytes, flops);
    std::printf("%-22s %6d %8d %12.2f %10.2f %7.2f  %-5s %6d\n", what.c_str(), batch, context, r.us_median,
                r.floor_us(), r.us_median / r.floor_us(), r.floor_bytes_us >= r.floor_flops_us ? "bytes" : "flops",
                layers);
    std::fflush(stdout);
    results_.push_back(r);
  }

  // Dense MLA decode, one query per sequence, every sequence at `context` tokens.
  void mla_decode(const std::string& what, int32_t heads, int32_t batch, int32_t context, bool fp8 = false) {
    const double layer_bytes = double(batch) * context * latent_row_bytes(fp8);
    const int layers = layers_for(layer_bytes, ceilings_);
    if (!fits(layers * layer_bytes, what, batch, context)) return;
    const LayerCaches caches(layers, batch, context, false, fp8);
    const cuda::DeviceBuffer q = random_bf16(size_t(batch) * heads * kWidth, 31, 1.0f);
    const cuda::DeviceBuffer context_lens = upload(std::vector<int32_t>(batch, context));
    const cuda::DeviceBuffer out = poisoned(size_t(batch) * heads * kRank * sizeof(bf16));
    const size_t workspace_bytes = gpu::mla_decode_workspace_bytes(batch, heads, kRank, context);
    const cuda::DeviceBuffer workspace(std::max<size_t>(workspace_bytes, 1));
    const gpu::MlaAttentionParams params{heads, kScale};
    Stream stream;
    const double us = time_us(
        [&](cudaStream_t s) {
          for (int l = 0; l < layers; ++l) {
            gpu::mla_decode_attention(out.as<bf16>(), q.as<bf16>(), caches.latent_view(l), context_lens.as<int32_t>(),
                                      batch, context, params, workspace.data(), workspace_bytes, s);
          }
        },
        stream.get(), options_, kEagerEnqueueUs);
    check_all_finite(out, what);
    add(what, batch, context, layers, us, layer_bytes, 2.0 * batch * heads * double(context) * (kWidth + kRank));
  }

  // DSA decode: index scores of every cached key, top-k selection, sparse MLA over the kept rows.
  void dsa_decode(const std::string& prefix, int32_t heads, int32_t batch, int32_t context, bool fp8 = false) {
    const double keys = double(batch) * context;
    const double kept_rows = double(batch) * std::min(kTopk, context);
    const double key_bytes = keys * index_key_bytes(fp8), score_bytes = keys * sizeof(float);
    const double kept_bytes = kept_rows * latent_row_bytes(fp8);
    const double layer_bytes = keys * (latent_row_bytes(fp8) + index_key_bytes(fp8));
    const int layers = layers_for(layer_bytes, ceilings_);
    if (!fits(layers * layer_bytes + score_bytes, prefix + "_decode", batch, context)) return;
    const LayerCaches caches(layers, batch, context, true, fp8);
    const cuda::DeviceBuffer q = random_bf16(size_t(batch) * heads * kWidth, 41, 1.0f);
    const cuda::DeviceBuffer index_q = random_bf16(size_t(batch) * kIndexHeads * kIndexDim, 42, 1.0f);
    cuda::DeviceBuffer index_weights(size_t(batch) * kIndexHeads * sizeof(float));
    fill_random_f32(index_weights.as<float>(), size_t(batch) * kIndexHeads, 43, 1.0f, nullptr);
    std::vector<int32_t> starts(batch + 1);
    for (int32_t s = 0; s <= batch; ++s) starts[s] = s;
    const cuda::DeviceBuffer query_starts = upload(starts);
    const cuda::DeviceBuffer context_lens = upload(std::vector<int32_t>(batch, context));
    const cuda::DeviceBuffer scores = poisoned(size_t(batch) * context * sizeof(float));  // one per step, reused by layers
    const cuda::DeviceBuffer kept = poisoned(size_t(layers) * batch * kTopk * sizeof(int32_t));  // one per layer
    const cuda::DeviceBuffer out = poisoned(size_t(batch) * heads * kRank * sizeof(bf16));
    const size_t sparse_workspace_bytes = gpu::sparse_mla_workspace_bytes(batch, heads, kRank, kTopk);
    const cuda::DeviceBuffer sparse_workspace(std::max<size_t>(sparse_workspace_bytes, 1));
    const size_t topk_workspace_bytes = gpu::dsa_topk_workspace_bytes(batch, context, kTopk);
    const cuda::DeviceBuffer topk_workspace(std::max<size_t>(topk_workspace_bytes, 1));
    const gpu::MlaAttentionParams params{heads, kScale};
    const gpu::DsaIndexerParams index_params{kIndexHeads, kIndexDim, kTopk, 1.0f / std::sqrt(float(kIndexDim)),
                                             1.0f / std::sqrt(float(kIndexHeads))};
    const auto kept_of = [&](int l) { return kept.as<int32_t>() + size_t(l) * batch * kTopk; };
    const auto index_scores = [&](int l, cudaStream_t s) {
      gpu::dsa_index_scores(scores.as<float>(), context, index_q.as<bf16>(), index_weights.as<float>(), caches.key_view(l),
                            query_starts.as<int32_t>(), context_lens.as<int32_t>(), batch, batch, context, index_params, s);
    };
    const auto select_topk = [&](int l, cudaStream_t s) {
      gpu::dsa_select_topk(kept_of(l), scores.as<float>(), context, query_starts.as<int32_t>(),
                           context_lens.as<int32_t>(), batch, batch, context, kTopk, topk_workspace.data(),
                           topk_workspace_bytes, s);
    };
    const auto sparse_mla = [&](int l, cudaStream_t s) {
      gpu::sparse_mla_attention(out.as<bf16>(), q.as<bf16>(), caches.latent_view(l), kept_of(l), kTopk,
                                query_starts.as<int32_t>(), batch, batch, params, sparse_workspace.data(),
                                sparse_workspace_bytes, s);
    };
    const auto every_layer = [&](auto... parts) {
      return [=](cudaStream_t s) {
        for (int l = 0; l < layers; ++l) (parts(l, s), ...);
      };
    };
    Stream stream;
    // The whole chain first: its eager run leaves every layer's kept list for the sparse part alone.
    const double total = time_us(every_layer(index_scores, select_topk, sparse_mla), stream.get(), options_, kEagerEnqueueUs);
    check_all_finite(out, prefix + "_decode");
    const double scores_us = time_us(every_layer(index_scores), stream.get(), options_, kEagerEnqueueUs);
    const double topk_us = time_us(every_layer(select_topk), stream.get(), options_, kEagerEnqueueUs);
    const double sparse_us = time_us(every_layer(sparse_mla), stream.get(), options_, kEagerEnqueueUs);
    const double index_flops = 2.0 * keys * kIndexHeads * kIndexDim;
    const double sparse_flops = 2.0 * kept_rows * heads * (kWidth + kRank);
    add(prefix + "_index_scores", batch, context, layers, scores_us, key_bytes, index_flops);
    add(prefix + "_select_topk", batch, context, layers, topk_us, score_bytes, 0.0);
    add(prefix + "_sparse_mla", batch, context, layers, sparse_us, kept_bytes, sparse_flops);
    add(prefix + "_decode", batch, context, layers, total, key_bytes + kept_bytes, index_flops + sparse_flops);
  }

  // Causal prefill of one `tokens`-long prompt (no cached prefix).
  void mla_prefill(const std::string& what, int32_t heads, int32_t tokens) {
    const double latent_bytes = double(tokens) * kWidth * sizeof(bf16);
    const double io_bytes = double(tokens) * heads * (kWidth + kRank) * sizeof(bf16);  // q in, out
    const int layers = layers_for(latent_bytes, ceilings_);
    if (!fits(layers * latent_bytes + io_bytes, what, 1, tokens)) return;
    const LayerCaches caches(layers, 1, tokens, false);
    const cuda::DeviceBuffer q = random_bf16(size_t(tokens) * heads * kWidth, 51, 1.0f);
    const cuda::DeviceBuffer query_starts = upload({0, tokens}), context_lens = upload({tokens});
    const cuda::DeviceBuffer out = poisoned(size_t(tokens) * heads * kRank * sizeof(bf16));
    const gpu::MlaAttentionParams params{heads, kScale};
    Stream stream;
    const double us = time_us(
        [&](cudaStream_t s) {
          for (int l = 0; l < layers; ++l) {
            gpu::mla_prefill_attention(out.as<bf16>(), q.as<bf16>(), caches.latent_view(l), query_starts.as<int32_t>(),
                                       context_lens.as<int32_t>(), 1, tokens, tokens, params, s);
          }
        },
        stream.get(), options_, kEagerEnqueueUs);
    check_all_finite(out, what);
    const double flops = 2.0 * heads * (kWidth + kRank) * (double(tokens) * (tokens + 1) / 2);
    add(what, 1, tokens, layers, us, latent_bytes + io_bytes, flops);
  }

 private:
  const BenchOptions& options_;
  const Ceilings& ceilings_;
  std::vector<Result> results_;
};

void run(const BenchOptions& options) {
  TACHYON_CHECK(cuda::cuda_device_available()) << "bench_mla_dsa needs a CUDA device";
  const Ceilings ceilings = measure_ceilings(options, /*gemm=*/true);
  print_ceilings(ceilings);
  std::printf("per layer: median of %d %s after %d warm-up; floor = max(bytes / copy, FLOPs / GEMM)\n",
              options.repeats, options.eager ? "eager runs" : "graph replays", options.warmup);
  std::printf("%-22s %6s %8s %12s %10s %7s  %-5s %6s\n", "what", "batch", "context", "us median", "floor us", "ratio",
              "bound", "layers");
  Bench bench(options, ceilings);
  for (int32_t batch : {1, 32}) {
    for (int32_t context : {8192, 32768, 131072}) {
      if (wanted(options, "v32_dense")) bench.mla_decode("v32_mla_decode", 128, batch, context);
      if (wanted(options, "v32_dsa")) bench.dsa_decode("v32_dsa", 128, batch, context);
      if (wanted(options, "v32_dense_fp8")) bench.mla_decode("v32_mla_decode_fp8", 128, batch, context, true);
      if (wanted(options, "v32_dsa_fp8")) bench.dsa_decode("v32_dsa_fp8", 128, batch, context, true);
    }
  }
  if (wanted(options, "v2lite_decode")) {
    for (auto [batch, context] : {std::pair{1, 4096}, std::pair{32, 4096}, std::pair{64, 2048}}) {
      bench.mla_decode("v2lite_mla_decode", 16, batch, context);
    }
  }
  if (wanted(options, "v2lite_decode_fp8")) {
    for (auto [batch, context] : {std::pair{1, 4096}, std::pair{32, 4096}, std::pair{64, 2048}}) {
      bench.mla_decode("v2lite_mla_decode_fp8", 16, batch, context, true);
    }
  }
  if (wanted(options, "v2lite_prefill")) bench.mla_prefill("v2lite_mla_prefill", 16, 2048);
  write_results_json(options, ceilings, layer_result_rows(bench.results()));
}

}  // namespace
}  // namespace tachyon::bench

int main(int argc, char** argv) {
  tachyon::bench::BenchOptions options;
  CLI::App app{"bench_mla_dsa: per-layer time of DeepSeek's MLA and DSA attention kernels against their floors"};
  tachyon::bench::add_common_options(app, options, {"v32_dense", "v32_dsa", "v2lite_decode", "v2lite_prefill", "v32_dense_fp8", "v32_dsa_fp8", "v2lite_decode_fp8"});
  return tachyon::bench::bench_main(app, options, argc, argv, [&] { tachyon::bench::run(options); });
}
