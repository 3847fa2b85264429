// NcclCommunicator::all_to_all_v against CpuCommunicator::all_to_all_v, bit for bit: several
// items in one call (f32 rows, int32 ids, odd byte counts at unaligned offsets, an item whose
// counts are all zero), uneven counts with zeros between some pairs, a call where every count is
// zero, a 1 MB exchange, and ten calls in a row with counts that change every call. Each rank's
// receive buffer must also equal the peers' runs concatenated in rank order (built on the host).
// Group sizes 1, 2, 3 and 4. NCCL refuses two ranks of one communicator on one GPU ("Duplicate
// GPU detected", ncclInvalidUsage since NCCL 2.5), so a size runs with one GPU per rank and is
// skipped, by name, on a machine with fewer GPUs: size 1 (self send/recv inside a group) runs
// everywhere.
// Run: ctest -R 'gpu\.nccl_all_to_all_v\.' --output-on-failure (tests/gpu_nccl_all_to_all_v).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tachyon/base/check.h"
#include "tachyon/dist/cpu_communicator.h"
#ifdef TACHYON_HAVE_NCCL
#include <cuda_runtime_api.h>

#include "tachyon/dist/nccl/nccl_communicator.h"
#include "tachyon/tensor/cuda/cuda_check.h"
#endif

namespace tachyon::dist {
namespace {

#ifndef TACHYON_HAVE_NCCL

TEST(NcclAllToAllV, NotBuilt) { GTEST_SKIP() << "tachyon was built without NCCL (dist/nccl/ left out)"; }

#else

// Before main(), so before any NCCL call of this process: multicast off (docs/parallelism.md).
[[maybe_unused]] const bool kMulticastOff = [] {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  return true;
}();

// One call's shape: counts[item][src * n + dst] bytes that rank src sends rank dst.
struct Exchange {
  int n = 1;
  std::vector<std::vector<size_t>> counts;  // [items][n * n]
};

// The byte at position i of the run src sends dst in `item`, call `call`: distinct per run.
uint8_t payload_byte(int call, size_t item, int src, int dst, size_t i) {
  return static_cast<uint8_t>((call * 131 + item * 71 + src * 29 + dst * 13 + i * 7 + (i >> 8)) & 0xFF);
}

// Uneven counts with zeros: f32 rows of 5 values, int32 ids of 3 per row (the same rows), odd
// byte runs, and an item whose counts are all zero. `scale` multiplies the rows (large case).
Exchange uneven_exchange(int n, int call, size_t scale = 1) {
  Exchange e{n, std::vector<std::vector<size_t>>(4, std::vector<size_t>(static_cast<size_t>(n * n), 0))};
  for (int src = 0; src < n; ++src) {
    for (int dst = 0; dst < n; ++dst) {
      const size_t pair = static_cast<size_t>(src * n + dst);
      const size_t rows = static_cast<size_t>((src * 3 + dst * 5 + call) % 4) * scale;  // 0..3 rows
      e.counts[0][pair] = rows * 5 * sizeof(float);
      e.counts[1][pair] = rows * 3 * sizeof(int32_t);
      e.counts[2][pair] = static_cast<size_t>((src + 2 * dst + call) % 3) * 7;  // 0, 7 or 14 bytes
    }
  }
  return e;
}

struct RankBuffers {
  std::vector<std::vector<size_t>> send_counts, recv_counts;  // [items][n]
  std::vector<std::vector<uint8_t>> send;                     // [items][sum send_counts]
  std::vector<size_t> recv_bytes;                             // [items]
};

RankBuffers rank_buffers(const Exchange& e, int rank, int call) {
  RankBuffers b;
  for (size_t item = 0; item < e.counts.size(); ++item) {
    std::vector<size_t> send_counts, recv_counts;
    std::vector<uint8_t> send;
    size_t received = 0;
    for (int peer = 0; peer < e.n; ++peer) {
      const size_t out = e.counts[item][static_cast<size_t>(rank * e.n + peer)];
      const size_t in = e.counts[item][static_cast<size_t>(peer * e.n + rank)];
      send_counts.push_back(out);
      recv_counts.push_back(in);
      for (size_t i = 0; i < out; ++i) send.push_back(payload_byte(call, item, rank, peer, i));
      received += in;
    }
    b.send_counts.push_back(send_counts);
    b.recv_counts.push_back(recv_counts);
    b.send.push_back(send);
    b.recv_bytes.push_back(received);
  }
  return b;
}

// What rank `rank` must receive: the peers' runs for it, in rank order.
std::vector<std::vector<uint8_t>> expected_recv(const Exchange& e, int rank, int call) {
  std::vector<std::vector<uint8_t>> out(e.counts.size());
  for (size_t item = 0; item < e.counts.size(); ++item) {
    for (int src = 0; src < e.n; ++src) {
      const size_t bytes = e.counts[item][static_cast<size_t>(src * e.n + rank)];
      for (size_t i = 0; i < bytes; ++i) out[item].push_back(payload_byte(call, item, src, rank, i));
    }
  }
  return out;
}

// [calls][rank][items] what each rank received, on CPU thread ranks.
using Received = std::vector<std::vector<std::vector<std::vector<uint8_t>>>>;

Received run_cpu(const std::vector<Exchange>& calls) {
  const int n = calls.front().n;
  Received got(calls.size(), std::vector<std::vector<std::vector<uint8_t>>>(static_cast<size_t>(n)));
  std::vector<std::string> errors(static_cast<size_t>(n));
  CpuWorld world(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        CpuCommunicator comm(world, r);
        for (size_t c = 0; c < calls.size(); ++c) {
          const RankBuffers b = rank_buffers(calls[c], r, static_cast<int>(c));
          std::vector<std::vector<uint8_t>> recv;
          for (size_t bytes : b.recv_bytes) recv.emplace_back(bytes, 0xEE);
          std::vector<AllToAllItem> items;
          for (size_t i = 0; i < recv.size(); ++i) {
            items.push_back({b.send[i].data(), b.send_counts[i], recv[i].data(), b.recv_counts[i]});
          }
          comm.all_to_all_v(items, nullptr);
          got[c][static_cast<size_t>(r)] = std::move(recv);
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "cpu rank " << r;
  return got;
}

// A device allocation of `bytes` (at least 1 so the pointer is real), freed on scope exit.
struct DeviceBytes {
  void* ptr = nullptr;
  explicit DeviceBytes(size_t bytes) { TACHYON_CUDA_CHECK(cudaMalloc(&ptr, bytes > 0 ? bytes : 1)); }
  ~DeviceBytes() { cudaFree(ptr); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
};

// Rank r on GPU r, one thread each; the receive buffers are poisoned (0xEE) before each call.
Received run_nccl(const std::vector<Exchange>& calls) {
  const int n = calls.front().n;
  Received got(calls.size(), std::vector<std::vector<std::vector<uint8_t>>>(static_cast<size_t>(n)));
  std::vector<std::string> errors(static_cast<size_t>(n));
  const ncclUniqueId id = nccl_unique_id();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        TACHYON_CUDA_CHECK(cudaSetDevice(r));
        NcclCommunicator comm(id, n, r);
        cudaStream_t stream = nullptr;
        TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        for (size_t c = 0; c < calls.size(); ++c) {
          const RankBuffers b = rank_buffers(calls[c], r, static_cast<int>(c));
          std::vector<std::unique_ptr<DeviceBytes>> send, recv;
          std::vector<AllToAllItem> items;
          for (size_t i = 0; i < b.send.size(); ++i) {
            send.push_back(std::make_unique<DeviceBytes>(b.send[i].size()));
            recv.push_back(std::make_unique<DeviceBytes>(b.recv_bytes[i]));
            if (!b.send[i].empty()) {
              TACHYON_CUDA_CHECK(cudaMemcpy(send.back()->ptr, b.send[i].data(), b.send[i].size(), cudaMemcpyHostToDevice));
            }
            TACHYON_CUDA_CHECK(cudaMemset(recv.back()->ptr, 0xEE, b.recv_bytes[i] > 0 ? b.recv_bytes[i] : 1));
            items.push_back({send.back()->ptr, b.send_counts[i], recv.back()->ptr, b.recv_counts[i]});
          }
          comm.all_to_all_v(items, stream);
          TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream));
          for (size_t i = 0; i < items.size(); ++i) {
            std::vector<uint8_t> host(b.recv_bytes[i]);
            if (!host.empty()) {
              TACHYON_CUDA_CHECK(cudaMemcpy(host.data(), recv[i]->ptr, host.size(), cudaMemcpyDeviceToHost));
            }
            got[c][static_cast<size_t>(r)].push_back(std::move(host));
          }
        }
        cudaStreamDestroy(stream);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "nccl rank " << r;
  return got;
}

int device_count() {
  int count = 0;
  TACHYON_CUDA_CHECK(cudaGetDeviceCount(&count));
  return count;
}

// Both backends over `calls`, each rank's bytes compared with the other backend's and with the
// runs concatenated on the host.
void expect_backends_agree(const std::vector<Exchange>& calls) {
  const int n = calls.front().n;
  const Received cpu = run_cpu(calls);
  const Received nccl = run_nccl(calls);
  for (size_t c = 0; c < calls.size(); ++c) {
    for (int r = 0; r < n; ++r) {
      const auto& want = expected_recv(calls[c], r, static_cast<int>(c));
      EXPECT_EQ(cpu[c][static_cast<size_t>(r)], want) << "cpu, call " << c << " rank " << r << " of " << n;
      EXPECT_EQ(nccl[c][static_cast<size_t>(r)], cpu[c][static_cast<size_t>(r)])
          << "nccl against cpu, call " << c << " rank " << r << " of " << n;
    }
  }
}

void check_group_size(int n) {
  if (device_count() < n) {
    GTEST_SKIP() << "group size " << n << " needs " << n << " GPUs (this machine has " << device_count()
                 << "): NCCL refuses two ranks of one communicator on one GPU";
  }
  std::vector<Exchange> calls;
  for (int call = 0; call < 10; ++call) calls.push_back(uneven_exchange(n, call));  // counts change per call
  Exchange zero = uneven_exchange(n, 0);
  for (auto& item : zero.counts) std::fill(item.begin(), item.end(), 0);
  calls.push_back(zero);                             // every count zero: nothing is enqueued
  calls.push_back(uneven_exchange(n, 3, 1 << 14));  // up to 3 * 16384 rows of 32 bytes per pair: ~1.5 MB
  expect_backends_agree(calls);
}

TEST(NcclAllToAllV, GroupOfOneSendsToItself) { check_group_size(1); }
TEST(NcclAllToAllV, GroupOfTwoMatchesTheCpuBackend) { check_group_size(2); }
TEST(NcclAllToAllV, GroupOfThreeMatchesTheCpuBackend) { check_group_size(3); }
TEST(NcclAllToAllV, GroupOfFourMatchesTheCpuBackend) { check_group_size(4); }

// Bad local arguments throw on the rank that sees them, before anything is enqueued.
TEST(NcclAllToAllV, LocalArgumentErrorsThrowBeforeEnqueueing) {
  TACHYON_CUDA_CHECK(cudaSetDevice(0));
  NcclCommunicator comm(nccl_unique_id(), 1, 0);
  DeviceBytes buffer(64);
  const std::vector<size_t> two = {4, 4}, four = {4}, eight = {8};
  const AllToAllItem wrong_length[] = {{buffer.ptr, two, buffer.ptr, two}};
  EXPECT_THROW(comm.all_to_all_v(wrong_length, nullptr), Error);
  const AllToAllItem self_mismatch[] = {{buffer.ptr, four, buffer.ptr, eight}};
  EXPECT_THROW(comm.all_to_all_v(self_mismatch, nullptr), Error);
  const AllToAllItem null_recv[] = {{buffer.ptr, four, nullptr, four}};
  EXPECT_THROW(comm.all_to_all_v(null_recv, nullptr), Error);
}

#endif  // TACHYON_HAVE_NCCL

}  // namespace
}  // namespace tachyon::dist
