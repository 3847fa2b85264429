// bench_collectives: bus bandwidth of all-reduce (bf16) and all-gather over the GPUs of this
// machine, for our peer-access communicator (dist/cuda/peer_communicator.h, no fallback: every
// size runs on the peer path, in buffer-sized chunks) beside NCCL (dist/nccl/) in the same run,
// from 8 KB to 256 MB. One thread per GPU (as the TP runner), every rank on its own device.
//
// Method (docs/benchmarks.md): per size and backend, warm-up calls, then `repeats` calls between
// two events on each rank's stream; the time of a call is the slowest rank's mean. Bandwidth as
// nccl-tests reports it, so the two columns read like its output:
//   all_reduce: algbw = bytes / t, busbw = algbw * 2 (n - 1) / n   (bytes: one rank's buffer)
//   all_gather: algbw = bytes / t, busbw = algbw * (n - 1) / n     (bytes: the gathered total)
// The floor of a collective is NVLink's bandwidth, which this cannot measure alone: the ratio to
// read is ours against NCCL's at each size.
// Run (a machine with several GPUs): build-gpu/bin/bench_collectives [--world N] [--json FILE]
#include <algorithm>
#include <cstdio>
#include <fstream>
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

struct Options {
  int world = 0;  // 0: every GPU
  int warmup = 5;
  int repeats = 20;
  size_t min_bytes = size_t{8} << 10;
  size_t max_bytes = size_t{256} << 20;
  std::string json_path;
  std::string command_line;
};

enum class Op { kAllReduce, kAllGather };

struct Row {
  std::string backend;
  Op op;
  size_t bytes;  // all_reduce: one rank's buffer; all_gather: the gathered total
  double us;
};

// Mean microseconds of one call of `op` over `bytes` on this rank (the caller takes the max over
// ranks). Every rank runs the same sequence, so the collectives match up.
double time_op(dist::Communicator& comm, RankState& s, Op op, size_t bytes, const Options& o) {
  const int n = comm.size();
  auto call = [&] {
    if (op == Op::kAllReduce) {
      comm.all_reduce(s.send.data(), s.recv.data(), bytes / 2, dist::ReduceType::kBF16, s.stream);
    } else {
      comm.all_gather(s.send.data(), s.recv.data(), bytes / static_cast<size_t>(n), s.stream);
    }
  };
  for (int i = 0; i < o.warmup; ++i) call();
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  comm.barrier();  // every rank starts its timed calls together
  TACHYON_CUDA_CHECK(cudaEventRecord(s.start, s.stream));
  for (int i = 0; i < o.repeats; ++i) call();
  TACHYON_CUDA_CHECK(cudaEventRecord(s.stop, s.stream));
  TACHYON_CUDA_CHECK(cudaEventSynchronize(s.stop));
  float ms = 0;
  TACHYON_CUDA_CHECK(cudaEventElapsedTime(&ms, s.start, s.stop));
  return 1e3 * ms / o.repeats;
}

std::vector<size_t> sizes(const Options& o) {
  std::vector<size_t> out;
  for (size_t b = o.min_bytes; b <= o.max_bytes; b *= 2) out.push_back(b);
  return out;
}

int run(const Options& o) {
  int devices = 0;
  TACHYON_CUDA_CHECK(cudaGetDeviceCount(&devices));
  const int n = o.world > 0 ? o.world : devices;
  TACHYON_CHECK(n >= 1 && n <= devices) << "--world " << n << ": this machine has " << devices << " GPUs";
  const std::vector<size_t> byte_sizes = sizes(o);
  const size_t largest = o.max_bytes;

  runner::RankWorkers workers(n);
  std::vector<RankState> states = make_rank_states(workers, n, largest, largest);
  workers.run([&](int r) {
    TACHYON_CUDA_CHECK(cudaSetDevice(r));
    // Finite bf16 (~0.0115): no NaN/inf sums. The memset runs on the legacy stream: synchronized.
    TACHYON_CUDA_CHECK(cudaMemset(states[static_cast<size_t>(r)].send.data(), 0x3C, largest));
    TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
  });

  std::vector<Row> rows;
  // Each backend: every op and size on every rank, the slowest rank's time kept.
  auto measure = [&](const std::string& backend, RankComms& comms) {
    for (Op op : {Op::kAllReduce, Op::kAllGather}) {
      for (size_t bytes : byte_sizes) {
        // all_gather splits the total over the ranks; keep each rank's share a multiple of 16.
        if (op == Op::kAllGather && (bytes % (static_cast<size_t>(n) * 16) != 0)) continue;
        std::vector<double> us(static_cast<size_t>(n));
        workers.run([&](int r) {
          TACHYON_CUDA_CHECK(cudaSetDevice(r));
          us[static_cast<size_t>(r)] =
              time_op(*comms[static_cast<size_t>(r)], states[static_cast<size_t>(r)], op, bytes, o);
        });
        rows.push_back({backend, op, bytes, *std::max_element(us.begin(), us.end())});
        const Row& row = rows.back();
        const double algbw = static_cast<double>(bytes) / (row.us * 1e-6) / 1e9;
        const double factor = op == Op::kAllReduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
        std::printf("%-6s %-10s %10zu B %10.2f us  algbw %7.1f GB/s  busbw %7.1f GB/s\n", backend.c_str(),
                    op == Op::kAllReduce ? "all_reduce" : "all_gather", bytes, row.us, algbw, algbw * factor);
        std::fflush(stdout);
      }
    }
  };
  for_each_backend(workers, states, measure);
  free_rank_states(workers, states);

  if (!o.json_path.empty()) {
    cudaDeviceProp prop{};
    TACHYON_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    nlohmann::json out = {{"gpu", prop.name}, {"world", n},  {"warmup", o.warmup},
                          {"repeats", o.repeats}, {"command", o.command_line}, {"results", nlohmann::json::array()}};
    for (const Row& row : rows) {
      const double algbw = static_cast<double>(row.bytes) / (row.us * 1e-6);
      const double factor = row.op == Op::kAllReduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
      out["results"].push_back({{"backend", row.backend},
                                {"op", row.op == Op::kAllReduce ? "all_reduce_bf16" : "all_gather"},
                                {"bytes", row.bytes},
                                {"us", row.us},
                                {"algbw_bytes_per_s", algbw},
                                {"busbw_bytes_per_s", algbw * factor}});
    }
    std::ofstream(o.json_path) << out.dump(1) << "\n";
    std::printf("wrote %s\n", o.json_path.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace tachyon::bench

int main(int argc, char** argv) {
  tachyon::bench::Options options;
  CLI::App app{"bus bandwidth of all-reduce and all-gather: the peer-access communicator beside NCCL"};
  app.add_option("--world", options.world, "GPUs in the group (default: every GPU)");
  app.add_option("--warmup", options.warmup, "untimed calls per size")->check(CLI::Range(0, 1000));
  app.add_option("--repeats", options.repeats, "timed calls per size")->check(CLI::Range(1, 10000));
  app.add_option("--min-bytes", options.min_bytes, "smallest message (doubled up to --max-bytes)");
  app.add_option("--max-bytes", options.max_bytes, "largest message");
  app.add_option("--json", options.json_path, "also write the results here");
  CLI11_PARSE(app, argc, argv);
  for (int i = 0; i < argc; ++i) options.command_line += (i ? " " : "") + std::string(argv[i]);
  try {
    return tachyon::bench::run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_collectives: %s\n", e.what());
    return 1;
  }
}
