// HostStagedCommunicator (dist/cuda/host_staged_communicator.h): groups of 2, 3 and 4 rank
// threads on GPU 0, each with its own non-blocking stream, against the CPU backend on the same
// bytes. Every collective's output on the device must equal, byte for byte, what CpuCommunicator
// gives for the same inputs on the host (its order and rounding are the contract), at awkward
// sizes, in place and out of place; every buffer starts as random bytes, outputs included. A call on a stream being
// captured is refused with a message, and a rank failing outside a collective (the group's
// abort) wakes the rank waiting in one.
// Seed: printed as [gpu_test] TACHYON_TEST_SEED=...; set it to replay a failure.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/base/check.h"
#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/dist/cuda/host_staged_communicator.h"
#include "tachyon/tensor/cuda/cuda_check.h"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::dist {
namespace {

using Bytes = std::vector<std::byte>;

// Runs fn(rank) on n threads at once; rethrows the first failure.
void on_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// A collective over `buffers` (device or host pointers, each as big as the rank's input bytes)
// issued on `comm`.
using Collective = std::function<void(Communicator& comm, const std::vector<void*>& buffers, void* stream)>;

// Every rank's buffers: random bytes (the same on both backends), then the collective; returns
// [rank][buffer] bytes after it, on the host backend or on the device through the host-staged one.
std::vector<std::vector<Bytes>> run_collective(int n, const std::vector<std::vector<Bytes>>& inputs,
                                               const Collective& collective, bool device) {
  std::vector<std::vector<Bytes>> outputs = inputs;
  CpuWorld world(n);
  HostStagedGroup group(n);
  on_ranks(n, [&](int r) {
    std::vector<Bytes>& mine = outputs[static_cast<size_t>(r)];
    if (!device) {
      CpuCommunicator comm(world, r);
      std::vector<void*> buffers;
      for (Bytes& b : mine) buffers.push_back(b.data());
      collective(comm, buffers, nullptr);
      return;
    }
    TACHYON_CUDA_CHECK(cudaSetDevice(0));
    cudaStream_t stream = nullptr;
    TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::vector<cuda::DeviceBuffer> device_buffers;
    std::vector<void*> buffers;
    for (const Bytes& b : mine) {
      device_buffers.emplace_back(b.size() + 16);
      buffers.push_back(device_buffers.back().data());
      TACHYON_CUDA_CHECK(cudaMemcpyAsync(buffers.back(), b.data(), b.size(), cudaMemcpyHostToDevice, stream));
    }
    std::unique_ptr<Communicator> comm = group.join(r);
    collective(*comm, buffers, stream);  // the uploads above are still in flight on `stream`
    for (size_t i = 0; i < mine.size(); ++i) {
      TACHYON_CUDA_CHECK(cudaMemcpyAsync(mine[i].data(), buffers[i], mine[i].size(), cudaMemcpyDeviceToHost, stream));
    }
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream));
    TACHYON_CUDA_CHECK(cudaStreamDestroy(stream));
  });
  return outputs;
}

// Random bytes in every buffer, outputs too (the same on both backends, so a byte the device
// path fails to write shows), then the device result must equal the host backend's byte for byte.
void expect_same_as_cpu(int n, const std::vector<size_t>& buffer_bytes, const Collective& collective,
                        const std::string& what) {
  SCOPED_TRACE(what + ", " + std::to_string(n) + " ranks");
  auto gen = gpu_test::rng(static_cast<uint64_t>(n) * 131 + buffer_bytes.size());
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::vector<Bytes>> inputs(static_cast<size_t>(n));
  for (auto& rank : inputs) {
    for (size_t bytes : buffer_bytes) {
      Bytes b(bytes);
      // Finite floats of every width: random low bytes, a small exponent in every high byte.
      for (size_t i = 0; i < bytes; ++i) b[i] = std::byte(static_cast<uint8_t>(i % 2 == 1 ? 0x3c : byte(gen)));
      rank.push_back(std::move(b));
    }
  }
  const auto host = run_collective(n, inputs, collective, /*device=*/false);
  const auto device = run_collective(n, inputs, collective, /*device=*/true);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < buffer_bytes.size(); ++i) {
      EXPECT_TRUE(host[static_cast<size_t>(r)][i] == device[static_cast<size_t>(r)][i])
          << "rank " << r << ", buffer " << i << ": the device bytes differ from the CPU backend's";
    }
  }
  // The collective changed something, so equal outputs are not equal inputs left alone.
  bool changed = false;
  for (int r = 0; r < n; ++r) changed = changed || host[static_cast<size_t>(r)] != inputs[static_cast<size_t>(r)];
  EXPECT_TRUE(changed) << "the reference collective wrote nothing";
}

class HostStagedCommunicator : public ::testing::TestWithParam<int> {};

TEST_P(HostStagedCommunicator, ReductionsEqualTheCpuBackendBitForBit) {
  const int n = GetParam();
  for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{65537}}) {
    expect_same_as_cpu(n, {count * 4, count * 4},
                       [count](Communicator& c, const std::vector<void*>& b, void* s) {
                         c.all_reduce(b[0], b[1], count, ReduceType::kF32, s);
                       },
                       "all_reduce f32 of " + std::to_string(count));
    expect_same_as_cpu(n, {count * 2},
                       [count](Communicator& c, const std::vector<void*>& b, void* s) {
                         c.all_reduce(b[0], b[0], count, ReduceType::kBF16, s);  // in place, as the decoder's
                       },
                       "all_reduce bf16 in place of " + std::to_string(count));
  }
  const size_t count = 333;
  expect_same_as_cpu(n, {count * 2 * static_cast<size_t>(n), count * 2},
                     [count](Communicator& c, const std::vector<void*>& b, void* s) {
                       c.reduce_scatter(b[0], b[1], count, ReduceType::kBF16, s);
                     },
                     "reduce_scatter bf16");
}

TEST_P(HostStagedCommunicator, GathersBroadcastsAndExchangesEqualTheCpuBackend) {
  const int n = GetParam();
  const size_t bytes = 1001;  // odd: no element type
  expect_same_as_cpu(n, {bytes, bytes * static_cast<size_t>(n)},
                     [](Communicator& c, const std::vector<void*>& b, void* s) { c.all_gather(b[0], b[1], 1001, s); },
                     "all_gather");
  expect_same_as_cpu(n, {bytes},
                     [](Communicator& c, const std::vector<void*>& b, void* s) { c.broadcast(b[0], 1001, 1, s); },
                     "broadcast from rank 1");
  // Two items of a grouped gather, rank r contributing r * 3 + 1 bytes and (r % 2) * 5 (zero on
  // even ranks); the first gathered in place.
  std::vector<size_t> first(static_cast<size_t>(n)), second(static_cast<size_t>(n));
  size_t first_total = 0, second_total = 0;
  for (int r = 0; r < n; ++r) {
    first[static_cast<size_t>(r)] = static_cast<size_t>(r) * 3 + 1;
    second[static_cast<size_t>(r)] = static_cast<size_t>(r % 2) * 5;
    first_total += first[static_cast<size_t>(r)];
    second_total += second[static_cast<size_t>(r)];
  }
  expect_same_as_cpu(n, {first_total, 5, second_total},
                     [&](Communicator& c, const std::vector<void*>& b, void* s) {
                       const int r = c.rank();
                       auto* in_place = static_cast<std::byte*>(b[0]) + run_offset(first, r);
                       const GatherItem items[] = {{in_place, first[static_cast<size_t>(r)], b[0], first},
                                                   {b[1], second[static_cast<size_t>(r)], b[2], second}};
                       c.all_gatherv(items, s);
                     },
                     "all_gatherv of two items");
  // all_to_all_v: rank q sends (q + r) % 3 + 1 bytes to rank r.
  expect_same_as_cpu(n, {64, 64},
                     [n](Communicator& c, const std::vector<void*>& b, void* s) {
                       std::vector<size_t> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
                       for (int r = 0; r < n; ++r) {
                         send[static_cast<size_t>(r)] = static_cast<size_t>((c.rank() + r) % 3 + 1);
                         recv[static_cast<size_t>(r)] = static_cast<size_t>((r + c.rank()) % 3 + 1);
                       }
                       const AllToAllItem item{b[0], send, b[1], recv};
                       c.all_to_all_v({&item, 1}, s);
                     },
                     "all_to_all_v");
  expect_same_as_cpu(n, {300, 300},
                     [n](Communicator& c, const std::vector<void*>& b, void* s) {
                       c.send_recv(b[0], 300, (c.rank() + 1) % n, b[1], 300, (c.rank() + n - 1) % n, s);
                     },
                     "send_recv around the ring");
}

INSTANTIATE_TEST_SUITE_P(Ranks, HostStagedCommunicator, ::testing::Values(2, 3, 4));

TEST(HostStagedCommunicatorRefusals, AStreamBeingCapturedIsRefusedByName) {
  TACHYON_CUDA_CHECK(cudaSetDevice(0));
  HostStagedGroup group(1);
  std::unique_ptr<Communicator> comm = group.join(0);
  cuda::DeviceBuffer data(64);
  cudaStream_t stream = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  TACHYON_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  std::string message;
  try {
    comm->all_reduce(data.data(), data.data(), 16, ReduceType::kF32, stream);
  } catch (const Error& e) {
    message = e.what();
  }
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream, &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
  TACHYON_CUDA_CHECK(cudaStreamDestroy(stream));
  EXPECT_NE(message.find("being captured into a CUDA graph"), std::string::npos) << message;
  EXPECT_NE(message.find("enforce_eager"), std::string::npos) << message;
}

TEST(HostStagedCommunicatorRefusals, AnAbortWakesTheRankWaitingInACollective) {
  HostStagedGroup group(2);
  std::string rank0_error;
  on_ranks(2, [&](int r) {
    TACHYON_CUDA_CHECK(cudaSetDevice(0));
    if (r == 1) {  // fails outside the collective, as RankWorkers' on_failure reports it
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      group.abort("rank 1 of 2 failed: a test fault");
      return;
    }
    std::unique_ptr<Communicator> comm = group.join(0);
    cuda::DeviceBuffer data(64);
    cudaStream_t stream = nullptr;
    TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    try {
      comm->all_reduce(data.data(), data.data(), 16, ReduceType::kF32, stream);
    } catch (const GroupAborted& e) {
      rank0_error = e.what();
    }
    TACHYON_CUDA_CHECK(cudaStreamDestroy(stream));
  });
  EXPECT_NE(rank0_error.find("rank 1 of 2 failed: a test fault"), std::string::npos) << rank0_error;
}

}  // namespace
}  // namespace tachyon::dist
