// bench_topk_exchange: the sparse indexer's top-k exchange under decode context parallelism, as a
// decode step issues it. Each DCP rank keeps its local top-k of every new token and ONE all_gather
// over the group gives every rank every rank's candidates (model/gpu/sparse_selector.cpp); a
// DeepSeek-V3.2 step makes one per layer. Here: per rank [rows, 2048] int32 (a token's 2,048
// candidate indices), `--gathers` all_gathers (24 by default) captured in ONE CUDA graph, as the
// runner's decode graphs hold them, for our peer-access communicator beside NCCL in the same run.
//
// Method (docs/benchmarks.md): per backend and row count, the graph is replayed `warmup` times,
// every rank's gathered buffer (poisoned before the first replay) is checked bit for bit against
// the concatenation of every rank's input (each rank's input is distinct: rank and index mixed),
// then `repeats` replays between two events on each rank's stream; the time of one gather is the
// slowest rank's mean replay over `gathers`. The floor is NVLink's bandwidth, which this cannot
// measure alone: read ours against NCCL's per row count.
// Run (a machine with several GPUs): build-gpu/bin/bench_topk_exchange [--world N] [--json FILE];
// --world 1 runs on one GPU (a check of the harness: a gather of one rank is a copy).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_backends.h"
#include "tachyon/base/check.h"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::bench {
namespace {

constexpr size_t kTopk = 2048;  // DeepSeek-V3.2's index_topk: candidates per token

struct Options {
  int world = 0;  // 0: every GPU
  std::vector<int64_t> rows = {16, 64, 160, 256, 512};
  int gathers = 24;
  int warmup = 5;
  int repeats = 20;
  std::string json_path;
  std::string command_line;
};

struct Row {
  std::string backend;
  int64_t rows;
  double us;         // one gather, slowest rank
  int64_t mismatches;  // int32 values that differ from the expected gather, summed over ranks
};

// The value at index i of rank r's input: distinct across ranks and positions (i < 2^24).
int32_t input_value(int rank, size_t i) { return static_cast<int32_t>((static_cast<uint32_t>(rank) << 24) ^ i); }

// This rank's run of one row count: capture, replay and check, time. Returns (us per gather,
// mismatched values). Every rank runs the same sequence, so the collectives match up.
std::pair<double, int64_t> run_rows(dist::Communicator& comm, RankState& s, int64_t rows, const Options& o) {
  const int n = comm.size();
  const size_t values = static_cast<size_t>(rows) * kTopk;
  const size_t bytes = values * sizeof(int32_t);
  std::vector<int32_t> input(values);
  for (size_t i = 0; i < values; ++i) input[i] = input_value(comm.rank(), i);
  TACHYON_CUDA_CHECK(cudaMemcpyAsync(s.send.data(), input.data(), bytes, cudaMemcpyHostToDevice, s.stream));
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(s.stream));

  // One gather outside the graph first: a backend's lazy set-up (NCCL's) must not be captured.
  comm.all_gather(s.send.data(), s.recv.data(), bytes, s.stream);
  TACHYON_CUDA_CHECK(cudaMemsetAsync(s.recv.data(), 0xFF, bytes * static_cast<size_t>(n), s.stream));
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
  for (int g = 0; g < o.gathers; ++g) comm.all_gather(s.send.data(), s.recv.data(), bytes, s.stream);
  TACHYON_CUDA_CHECK(cudaStreamEndCapture(s.stream, &graph));
  TACHYON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  for (int i = 0; i < std::max(o.warmup, 1); ++i) TACHYON_CUDA_CHECK(cudaGraphLaunch(exec, s.stream));
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  std::vector<int32_t> gathered(values * static_cast<size_t>(n));
  TACHYON_CUDA_CHECK(cudaMemcpy(gathered.data(), s.recv.data(), gathered.size() * sizeof(int32_t),
                                cudaMemcpyDeviceToHost));
  int64_t mismatches = 0;
  for (int r = 0; r < n; ++r) {
    const int32_t* got = gathered.data() + static_cast<size_t>(r) * values;
    for (size_t i = 0; i < values; ++i) mismatches += got[i] != input_value(r, i) ? 1 : 0;
  }

  comm.barrier();  // every rank starts its timed replays together
  TACHYON_CUDA_CHECK(cudaEventRecord(s.start, s.stream));
  for (int i = 0; i < o.repeats; ++i) TACHYON_CUDA_CHECK(cudaGraphLaunch(exec, s.stream));
  TACHYON_CUDA_CHECK(cudaEventRecord(s.stop, s.stream));
  TACHYON_CUDA_CHECK(cudaEventSynchronize(s.stop));
  float ms = 0;
  TACHYON_CUDA_CHECK(cudaEventElapsedTime(&ms, s.start, s.stop));
  TACHYON_CUDA_CHECK(cudaGraphExecDestroy(exec));
  TACHYON_CUDA_CHECK(cudaGraphDestroy(graph));
  return {1e3 * ms / (o.repeats * o.gathers), mismatches};
}

int run(const Options& o) {
  int devices = 0;
  TACHYON_CUDA_CHECK(cudaGetDeviceCount(&devices));
  const int n = o.world > 0 ? o.world : devices;
  TACHYON_CHECK(n >= 1 && n <= devices) << "--world " << n << ": this machine has " << devices << " GPUs";
  TACHYON_CHECK(!o.rows.empty() && *std::min_element(o.rows.begin(), o.rows.end()) >= 1 &&
                static_cast<size_t>(*std::max_element(o.rows.begin(), o.rows.end())) * kTopk < (size_t{1} << 24))
      << "--rows: each between 1 and " << ((size_t{1} << 24) / kTopk - 1);
  const size_t largest = static_cast<size_t>(*std::max_element(o.rows.begin(), o.rows.end())) * kTopk * sizeof(int32_t);

  runner::RankWorkers workers(n);
  std::vector<RankState> states = make_rank_states(workers, n, largest, largest * static_cast<size_t>(n));

  std::vector<Row> results;
  auto measure = [&](const std::string& backend, RankComms& comms) {
    for (int64_t rows : o.rows) {
      std::vector<std::pair<double, int64_t>> per_rank(static_cast<size_t>(n));
      workers.run([&](int r) {
        TACHYON_CUDA_CHECK(cudaSetDevice(r));
        per_rank[static_cast<size_t>(r)] =
            run_rows(*comms[static_cast<size_t>(r)], states[static_cast<size_t>(r)], rows, o);
      });
      Row row{backend, rows, 0.0, 0};
      for (const auto& [us, mismatches] : per_rank) {
        row.us = std::max(row.us, us);
        row.mismatches += mismatches;
      }
      results.push_back(row);
      std::printf("%-6s dcp %d  rows %4lld  [%lld, %zu] int32 per rank  %8.2f us per gather  %s\n", backend.c_str(),
                  n, static_cast<long long>(rows), static_cast<long long>(rows), kTopk, row.us,
                  row.mismatches == 0 ? "bit-identical on every rank" : "MISMATCH");
      std::fflush(stdout);
    }
  };
  for_each_backend(workers, states, measure);
  free_rank_states(workers, states);

  int64_t mismatches = 0;
  for (const Row& row : results) mismatches += row.mismatches;
  if (!o.json_path.empty()) {
    cudaDeviceProp prop{};
    TACHYON_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    nlohmann::json out = {{"gpu", prop.name},        {"dcp", n},           {"topk", kTopk},
                          {"gathers_per_graph", o.gathers}, {"warmup", o.warmup}, {"repeats", o.repeats},
                          {"command", o.command_line},       {"results", nlohmann::json::array()}};
    for (const Row& row : results) {
      out["results"].push_back({{"backend", row.backend},
                                {"rows", row.rows},
                                {"bytes_per_rank", static_cast<size_t>(row.rows) * kTopk * sizeof(int32_t)},
                                {"us_per_gather", row.us},
                                {"bit_identical", row.mismatches == 0}});
    }
    std::ofstream(o.json_path) << out.dump(1) << "\n";
    std::printf("wrote %s\n", o.json_path.c_str());
  }
  if (mismatches != 0) {
    std::fprintf(stderr, "bench_topk_exchange: %lld gathered values differ from the ranks' inputs\n",
                 static_cast<long long>(mismatches));
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace tachyon::bench

int main(int argc, char** argv) {
  tachyon::bench::Options options;
  CLI::App app{"the DCP top-k exchange: gathers of [rows, 2048] int32 in one CUDA graph, peer path beside NCCL"};
  app.add_option("--world", options.world, "GPUs in the DCP group (default: every GPU)");
  app.add_option("--rows", options.rows, "new tokens per step (each a row of 2048 candidates)")->delimiter(',');
  app.add_option("--gathers", options.gathers, "gathers per graph (one per indexer layer)")->check(CLI::Range(1, 1000));
  app.add_option("--warmup", options.warmup, "untimed replays per row count")->check(CLI::Range(0, 1000));
  app.add_option("--repeats", options.repeats, "timed replays per row count")->check(CLI::Range(1, 10000));
  app.add_option("--json", options.json_path, "also write the results here");
  CLI11_PARSE(app, argc, argv);
  for (int i = 0; i < argc; ++i) options.command_line += (i ? " " : "") + std::string(argv[i]);
  try {
    return tachyon::bench::run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_topk_exchange: %s\n", e.what());
    return 1;
  }
}
