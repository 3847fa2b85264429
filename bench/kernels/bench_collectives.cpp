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

#include "tachyon/base/check.h"
#include "tachyon/dist/cuda/peer_communicator.h"
#include "tachyon/tensor/cuda/cuda_check.h"
#include "tachyon/runner/rank_workers.h"
#include "tachyon/tensor/cuda/device_buffer.h"
#ifdef TACHYON_HAVE_NCCL
#include "tachyon/dist/nccl/nccl_communicator.h"
#endif

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

// One rank's buffers and stream, on its device.
struct RankState {
  cudaStream_t stream = nullptr;
  cuda::DeviceBuffer send;
  cuda::DeviceBuffer recv;
  cudaEvent_t start = nullptr, stop = nullptr;
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
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) ranks[static_cast<size_t>(r)] = r;
  const std::vector<size_t> byte_sizes = sizes(o);
  const size_t largest = o.max_bytes;

  runner::RankWorkers workers(n);
  std::vector<RankState> states(static_cast<size_t>(n));
  workers.run([&](int r) {
    TACHYON_CUDA_CHECK(cudaSetDevice(r));
    RankState& s = states[static_cast<size_t>(r)];
    TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    s.send = cuda::DeviceBuffer(largest);
    s.recv = cuda::DeviceBuffer(largest);
    TACHYON_CUDA_CHECK(cudaMemset(s.send.data(), 0x3C, largest));  // finite bf16 (~0.0115): no NaN/inf sums
    TACHYON_CUDA_CHECK(cudaDeviceSynchronize());  // the memset ran on the legacy stream
    TACHYON_CUDA_CHECK(cudaEventCreate(&s.start));
    TACHYON_CUDA_CHECK(cudaEventCreate(&s.stop));
  });

  std::vector<Row> rows;
  // Each backend: build one communicator per rank (concurrently: construction is collective), time
  // every op and size on every rank, keep the slowest rank's time.
  auto measure = [&](const std::string& backend, const std::function<std::unique_ptr<dist::Communicator>(int)>& make) {
    std::vector<std::unique_ptr<dist::Communicator>> comms(static_cast<size_t>(n));
    workers.run([&](int r) {
      TACHYON_CUDA_CHECK(cudaSetDevice(r));
      comms[static_cast<size_t>(r)] = make(r);
    });
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
    workers.run([&](int r) {  // destroy on the rank's thread, its streams idle
      TACHYON_CUDA_CHECK(cudaSetDevice(r));
      TACHYON_CUDA_CHECK(cudaStreamSynchronize(states[static_cast<size_t>(r)].stream));
      comms[static_cast<size_t>(r)].reset();
    });
  };

  if (dist::PeerWorld::supported(ranks)) {
    dist::PeerWorld world(ranks);
    measure("peer", [&](int r) { return std::make_unique<dist::PeerCommunicator>(world, r); });
  } else {
    std::printf("peer: not measured (the GPUs have no peer access to each other)\n");
  }
#ifdef TACHYON_HAVE_NCCL
  const ncclUniqueId id = dist::nccl_unique_id();
  measure("nccl", [&](int r) { return std::make_unique<dist::NcclCommunicator>(id, n, r); });
#else
  std::printf("nccl: not measured (built without NCCL)\n");
#endif

  workers.run([&](int r) {
    TACHYON_CUDA_CHECK(cudaSetDevice(r));
    RankState& s = states[static_cast<size_t>(r)];
    cudaEventDestroy(s.start);
    cudaEventDestroy(s.stop);
    cudaStreamDestroy(s.stream);
    s.send = cuda::DeviceBuffer();
    s.recv = cuda::DeviceBuffer();
  });

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
