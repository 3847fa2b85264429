// What the kernel benchmarks share (bench_attention, bench_gemv, bench_mla_dsa): the timing
// method (docs/benchmarks.md: warm-up, median of repeats, one CUDA graph per timed call, a spin
// kernel ahead of each timed call so its events bracket device work only), the ceilings the
// floors are stated against (copy bandwidth and bf16 GEMM rate measured in the same run, the L2
// size that cold-data copies must exceed), and small device-buffer helpers (random inputs,
// NaN-poisoned outputs that must come back finite), the command-line flags and JSON document
// they all write, and the per-layer result row of the attention benchmarks.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_device.h"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::bench {

// The timing options every benchmark takes (each bench's Options derives from this).
struct TimingOptions {
  int warmup = 3;
  int repeats = 20;
  bool eager = false;  // time plain launches instead of graph replays
};

// What every benchmark's command line sets: the timing, the cases to run, where to write the
// JSON, and the command line itself (recorded in the JSON). Each bench's Options derives from it.
struct BenchOptions : TimingOptions {
  std::string json_path;
  std::vector<std::string> cases;  // the bench's default: all of them
  std::string command_line;
};

// `name` is among the cases to run.
bool wanted(const BenchOptions& options, const std::string& name);

// --json, --cases (any of `case_names`), --warmup, --repeats and --eager on `app`; the caller adds
// its own flags. bench_main records the command line, parses, runs, and turns errors into an exit
// status with the message on stderr.
void add_common_options(CLI::App& app, BenchOptions& options, const std::vector<std::string>& case_names);
int bench_main(CLI::App& app, BenchOptions& options, int argc, char** argv, const std::function<void()>& run);

struct Ceilings {
  double copy_bytes_per_s = 0;  // 1 GiB device-to-device copy, bytes read + written
  double gemm_flops_per_s = 0;  // bf16 8192^3 cuBLAS product (0 when not measured)
  size_t l2_bytes = 0;          // the current device's L2
};

// A blocking stream: it waits for the fills and memsets issued on the legacy default stream.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

cuda::DeviceBuffer upload(const std::vector<int32_t>& values);
// [count] bf16 uniform in [-scale, scale) (bench_device.h's hash fill).
cuda::DeviceBuffer random_bf16(size_t count, uint64_t seed, float scale);
// Every byte 0xFF (NaN in bf16 and f32), so check_all_finite() afterwards proves the output was written.
void poison(const cuda::DeviceBuffer& out);
cuda::DeviceBuffer poisoned(size_t bytes);
// The first `count` values of `out` (f32 when `f32`, else bf16) are finite; throws naming `what`.
void check_all_finite(const cuda::DeviceBuffer& out, size_t count, bool f32, const std::string& what);
// Every bf16 value of `out` is finite.
void check_all_finite(const cuda::DeviceBuffer& out, const std::string& what);

// Median device time of one call of `launch` in microseconds. The first call runs eagerly (argument
// checks, kernel attributes, cuBLASLt's algorithm choice and lazy loading happen outside the
// capture), then `warmup` untimed and `repeats` timed calls of its graph (or, eager / graph false,
// of `launch` itself), each behind a spin kernel: 100 us before a graph replay, `eager_enqueue_us`
// before an eager call, which must cover the host's enqueueing of it.
double time_us(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream, const TimingOptions& options,
               double eager_enqueue_us, bool graph = true);

// The ceilings of this run; the GEMM rate only when `gemm`.
Ceilings measure_ceilings(const TimingOptions& options, bool gemm);
// One line: the GPU's name and the ceilings.
void print_ceilings(const Ceilings& ceilings);

// One timed case per layer against its floor (bench_attention, bench_mla_dsa).
struct LayerResult {
  std::string what;
  int32_t batch = 0, context = 0;
  int layers = 1;  // layers per graph replay
  double us_median = 0, bytes = 0, flops = 0;
  double floor_bytes_us = 0, floor_flops_us = 0;
  double floor_us() const { return std::max(floor_bytes_us, floor_flops_us); }
};
// The row of `layers` layers timed together at us_per_replay, with its floors from `ceilings`.
LayerResult layer_result(const Ceilings& ceilings, const std::string& what, int32_t batch, int32_t context, int layers,
                         double us_per_replay, double bytes, double flops);
nlohmann::json layer_result_rows(const std::vector<LayerResult>& results);

// Writes options.json_path (nothing without --json) and says so: the GPU, the ceilings (the GEMM
// rate when measured), the timing options, `results`, the command line, and the bench's own
// `extra` fields.
void write_results_json(const BenchOptions& options, const Ceilings& ceilings, const nlohmann::json& results,
                        const nlohmann::json& extra = nlohmann::json::object());

}  // namespace tachyon::bench
