// NcclCommunicator against the CPU backend: every collective of tests/unit/test_cpu_communicator.cpp
// written once against a small buffer abstraction (Mem) and run twice, on CpuCommunicator thread
// ranks with host buffers and on NcclCommunicator GPU ranks (one thread per GPU) with device
// buffers; byte-moving ops (all_gather, all_gatherv, broadcast, send/recv) must match
// bit-exactly, sums within the rounding NCCL's other summation order allows.
// World sizes: 1 (always: every op must run and be right on one GPU, all_gatherv with three
// mixed-dtype items and uneven and zero counts included) and cudaGetDeviceCount() when that is
// larger (and 2 when there are more than 2 GPUs).
// Multicast: NCCL_NVLS_ENABLE is forced to "0" before any NCCL call (a static initializer below,
// and nccl_unique_id() again): NVLink multicast can take the shared machine's GPUs out of
// service, so an outer setting must not turn it back on.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/base/check.h"
#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/tensor/dtype.h"
#ifdef TACHYON_HAVE_NCCL
#include "tachyon/dist/nccl/nccl_communicator.h"
#include "tachyon/dist/nccl/nccl_process_groups.h"
#endif

namespace tachyon::dist {
namespace {

#ifndef TACHYON_HAVE_NCCL

TEST(NcclCommunicator, NotBuilt) { GTEST_SKIP() << "tachyon was built without NCCL (dist/nccl/ left out)"; }

#else

// Before main(), so before any NCCL call of this process: multicast off, whatever was inherited.
[[maybe_unused]] const bool kMulticastOff = [] {
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  return true;
}();

int device_count() {
  int count = 0;
  TACHYON_CUDA_CHECK(cudaGetDeviceCount(&count));
  return count;
}

// 1, 2 (when more than 2 GPUs) and every GPU.
std::vector<int> world_sizes() {
  int count = device_count();
  std::vector<int> sizes = {1};
  if (count > 2) sizes.push_back(2);
  if (count > 1) sizes.push_back(count);
  return sizes;
}

// The buffers of one rank: host memory for the CPU backend, memory of this thread's GPU for
// NCCL. Every buffer starts as 0xFF bytes (poison), so an unwritten byte shows.
class Mem {
 public:
  Mem(bool device, cudaStream_t stream) : device_(device), stream_(stream) {}

  void* stream() const { return stream_; }

  void* alloc(size_t bytes) {
    size_t n = std::max<size_t>(bytes, 1);
    if (!device_) {
      host_.push_back(std::make_unique<std::vector<uint8_t>>(n, uint8_t(0xFF)));
      return host_.back()->data();
    }
    device_buffers_.push_back(std::make_unique<cuda::DeviceBuffer>(n));
    void* p = device_buffers_.back()->data();
    TACHYON_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, n, stream_));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return p;
  }
  void write(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    if (!device_) {
      std::memcpy(dst, src, bytes);
      return;
    }
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void* put(const void* src, size_t bytes) {
    void* p = alloc(bytes);
    write(p, src, bytes);
    return p;
  }
  template <typename T>
  void* put(const std::vector<T>& values) {
    return put(values.data(), values.size() * sizeof(T));
  }
  // Waits for the stream, then reads `bytes` at p.
  std::vector<uint8_t> get(const void* p, size_t bytes) {
    std::vector<uint8_t> out(bytes);
    if (bytes == 0) return out;
    if (!device_) {
      std::memcpy(out.data(), p, bytes);
      return out;
    }
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(out.data(), p, bytes, cudaMemcpyDeviceToHost, stream_));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return out;
  }
  template <typename T>
  std::vector<T> get_as(const void* p, size_t count) {
    std::vector<uint8_t> bytes = get(p, count * sizeof(T));
    std::vector<T> out(count);
    if (count > 0) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }

 private:
  bool device_;
  cudaStream_t stream_;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> host_;
  std::vector<std::unique_ptr<cuda::DeviceBuffer>> device_buffers_;
};

// What a body hands back: the bytes of every output it wants compared, in order.
using Outputs = std::vector<std::vector<uint8_t>>;
using Body = std::function<Outputs(Communicator&, Mem&)>;

void expect_no_errors(const std::vector<std::string>& errors, const char* backend) {
  for (size_t r = 0; r < errors.size(); ++r)
    EXPECT_EQ(errors[r], "") << backend << " rank " << r << " of " << errors.size();
}

std::vector<Outputs> run_cpu(int n, const Body& body) {
  CpuWorld world(n);
  std::vector<Outputs> outputs(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        CpuCommunicator comm(world, r);
        Mem mem(false, nullptr);
        outputs[r] = body(comm, mem);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  expect_no_errors(errors, "cpu");
  return outputs;
}

// A stream of the current device, destroyed on scope exit.
struct Stream {
  cudaStream_t stream = nullptr;
  Stream() { TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream); }
};

// Rank r on GPU r, one thread each. `make` builds a rank's communicator on its thread (after
// cudaSetDevice); by default it joins a fresh ncclUniqueId.
std::vector<Outputs> run_nccl(int n, const Body& body,
                              std::function<std::unique_ptr<Communicator>(int rank)> make = nullptr) {
  if (!make) {
    ncclUniqueId id = nccl_unique_id();
    make = [id, n](int rank) { return std::make_unique<NcclCommunicator>(id, n, rank); };
  }
  std::vector<Outputs> outputs(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        TACHYON_CUDA_CHECK(cudaSetDevice(r));
        std::unique_ptr<Communicator> comm = make(r);
        Stream stream;
        {
          Mem mem(true, stream.stream);
          outputs[r] = body(*comm, mem);
          TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream.stream));
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  expect_no_errors(errors, "nccl");
  return outputs;
}

// Byte-moving ops: identical bytes on every rank.
void expect_same_bytes(const std::vector<Outputs>& cpu, const std::vector<Outputs>& nccl, const std::string& what) {
  ASSERT_EQ(cpu.size(), nccl.size()) << what;
  for (size_t r = 0; r < cpu.size(); ++r) {
    ASSERT_EQ(cpu[r].size(), nccl[r].size()) << what << " rank " << r;
    for (size_t i = 0; i < cpu[r].size(); ++i)
      EXPECT_EQ(cpu[r][i], nccl[r][i]) << what << " rank " << r << " output " << i;
  }
}

std::vector<double> as_doubles(const std::vector<uint8_t>& bytes, ReduceType type) {
  size_t count = bytes.size() / reduce_type_size(type);
  std::vector<double> out(count);
  std::vector<float> f(count);
  switch (type) {
    case ReduceType::kF32:
      std::memcpy(f.data(), bytes.data(), bytes.size());
      break;
    case ReduceType::kBF16:
      convert_to_f32(bytes.data(), DType::kBF16, count, f.data());
      break;
    case ReduceType::kF16:
      convert_to_f32(bytes.data(), DType::kF16, count, f.data());
      break;
    case ReduceType::kI32:
    case ReduceType::kI64:
      break;
  }
  for (size_t i = 0; i < count; ++i) out[i] = f[i];
  return out;
}

// Sums of n inputs in [-3, 3]: partial sums stay within 3n, each of the n roundings errs by at
// most eps * 3n, so the two backends' results differ by at most eps * 3 * n * n. Ints: exact.
// `identical_ranks`: every rank holds the same result (all_reduce; not reduce_scatter).
void expect_close_sums(const std::vector<Outputs>& cpu, const std::vector<Outputs>& nccl, ReduceType type,
                       const std::string& what, bool identical_ranks = true) {
  if (type == ReduceType::kI32 || type == ReduceType::kI64) return expect_same_bytes(cpu, nccl, what);
  int n = static_cast<int>(cpu.size());
  double eps = type == ReduceType::kF32 ? 0x1p-23 : type == ReduceType::kBF16 ? 0x1p-7 : 0x1p-10;
  double tolerance = eps * 3.0 * n * n;
  ASSERT_EQ(cpu.size(), nccl.size()) << what;
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(cpu[r].size(), nccl[r].size()) << what << " rank " << r;
    for (size_t i = 0; i < cpu[r].size(); ++i) {
      ASSERT_EQ(cpu[r][i].size(), nccl[r][i].size()) << what;
      std::vector<double> a = as_doubles(cpu[r][i], type), b = as_doubles(nccl[r][i], type);
      for (size_t k = 0; k < a.size(); ++k)
        ASSERT_LE(std::abs(a[k] - b[k]), tolerance)
            << what << " " << reduce_type_name(type) << " rank " << r << " output " << i << " element " << k
            << ": cpu " << a[k] << " nccl " << b[k];
    }
  }
  // Every NCCL rank holds the same bits.
  if (identical_ranks) {
    for (int r = 1; r < n; ++r) EXPECT_EQ(nccl[r], nccl[0]) << what << " rank " << r;
  }
}

// inputs[r] = `count` random floats in [-3, 3] for rank r (same seeding as the CPU test).
std::vector<std::vector<float>> random_inputs(int n, size_t count, uint32_t seed) {
  std::vector<std::vector<float>> inputs(n);
  for (int r = 0; r < n; ++r) {
    std::mt19937 rng(seed * 1000 + r);
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    for (size_t i = 0; i < count; ++i) inputs[r].push_back(dist(rng));
  }
  return inputs;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

TEST(NcclCommunicator, RankAndSize) {
  for (int n : world_sizes()) {
    std::vector<Outputs> out = run_nccl(n, [](Communicator& comm, Mem&) -> Outputs {
      return {bytes_of(std::vector<int>{comm.rank(), comm.size()})};
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(out[r][0], bytes_of(std::vector<int>{r, n}));
  }
}

TEST(NcclCommunicator, AllReduceF32MatchesTheCpuSum) {
  const size_t count = 37;
  for (int n : world_sizes()) {
    auto inputs = random_inputs(n, count, 1);
    Body body = [&](Communicator& comm, Mem& mem) -> Outputs {
      void* send = mem.put(inputs[comm.rank()]);
      void* out = mem.alloc(count * 4);
      comm.all_reduce(send, out, count, ReduceType::kF32, mem.stream());
      void* in_place = mem.put(inputs[comm.rank()]);
      comm.all_reduce(in_place, in_place, count, ReduceType::kF32, mem.stream());
      return {mem.get(out, count * 4), mem.get(in_place, count * 4)};
    };
    expect_close_sums(run_cpu(n, body), run_nccl(n, body), ReduceType::kF32, "all_reduce n=" + std::to_string(n));
  }
}

TEST(NcclCommunicator, AllReduceBf16AndF16MatchTheCpuSum) {
  const size_t count = 29;
  for (int n : world_sizes()) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      ReduceType type = dtype == DType::kBF16 ? ReduceType::kBF16 : ReduceType::kF16;
      auto floats = random_inputs(n, count, 2);
      std::vector<std::vector<uint16_t>> inputs(n, std::vector<uint16_t>(count));
      for (int r = 0; r < n; ++r) convert_from_f32(floats[r].data(), count, dtype, inputs[r].data());
      Body body = [&](Communicator& comm, Mem& mem) -> Outputs {
        void* data = mem.put(inputs[comm.rank()]);
        comm.all_reduce(data, data, count, type, mem.stream());
        return {mem.get(data, count * 2)};
      };
      expect_close_sums(run_cpu(n, body), run_nccl(n, body), type, "all_reduce n=" + std::to_string(n));
    }
  }
}

TEST(NcclCommunicator, AllReduceIntsWrapAround) {
  for (int n : world_sizes()) {
    Body body = [&](Communicator& comm, Mem& mem) -> Outputs {
      int r = comm.rank();
      void* a = mem.put(std::vector<int32_t>{r, -3 * r, INT32_MAX});
      comm.all_reduce(a, a, 3, ReduceType::kI32, mem.stream());
      void* b = mem.put(std::vector<int64_t>{int64_t(r) << 40, -int64_t(r)});
      comm.all_reduce(b, b, 2, ReduceType::kI64, mem.stream());
      std::vector<int32_t> got = mem.get_as<int32_t>(a, 3);
      int32_t ranks = n * (n - 1) / 2;
      EXPECT_EQ(got, (std::vector<int32_t>{ranks, -3 * ranks, int32_t(uint32_t(INT32_MAX) * uint32_t(n))}));
      return {mem.get(a, 12), mem.get(b, 16)};
    };
    expect_same_bytes(run_cpu(n, body), run_nccl(n, body), "int all_reduce n=" + std::to_string(n));
  }
}

TEST(NcclCommunicator, AllGatherInRankOrder) {
  const size_t bytes = 13;
  for (int n : world_sizes()) {
    std::vector<uint8_t> expected(n * bytes);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] = uint8_t(i * 7 + 1);
    Body body = [&](Communicator& comm, Mem& mem) -> Outputs {
      int r = comm.rank();
      std::vector<uint8_t> mine(expected.begin() + r * bytes, expected.begin() + (r + 1) * bytes);
      void* send = mem.put(mine);
      void* out = mem.alloc(n * bytes);
      comm.all_gather(send, out, bytes, mem.stream());
      auto* in_place = static_cast<uint8_t*>(mem.alloc(n * bytes));
      mem.write(in_place + r * bytes, mine.data(), bytes);
      comm.all_gather(in_place + r * bytes, in_place, bytes, mem.stream());
      Outputs outputs = {mem.get(out, n * bytes), mem.get(in_place, n * bytes)};
      EXPECT_EQ(outputs[0], expected) << "out of place, rank " << r;
      EXPECT_EQ(outputs[1], expected) << "in place, rank " << r;
      return outputs;
    };
    expect_same_bytes(run_cpu(n, body), run_nccl(n, body), "all_gather n=" + std::to_string(n));
  }
}

TEST(NcclCommunicator, ReduceScatterGivesEachRankItsBlockOfTheSum) {
  const size_t count = 5;
  for (int n : world_sizes()) {
    auto inputs = random_inputs(n, n * count, 3);
    Body body = [&](Communicator& comm, Mem& mem) -> Outputs {
      int r = comm.rank();
      void* send = mem.put(inputs[r]);
      void* out = mem.alloc(count * 4);
      comm.reduce_scatter(send, out, count, ReduceType::kF32, mem.stream());
      auto* in_place = static_cast<float*>(mem.put(inputs[r]));
      comm.reduce_scatter(in_place, in_place + r * count, count, ReduceType::kF32, mem.stream());
      return {mem.get(out, count * 4), mem.get(in_place + r * count, count * 4)};
    };
    expect_close_sums(run_cpu(n, body), run_nccl(n, body), ReduceType::kF32, "reduce_scatter n=" + std::to_string(n),
                      false);
  }
}

TEST(NcclCommunicator, BroadcastFromEveryRoot) {
  for (int n : world_sizes()) {
    Body body = [&](Communicator& comm, Mem& mem) -> Outputs {
      Outputs outputs;
      for (int root = 0; root < n; ++root) {
        std::vector<int32_t> data(11, -1);
        if (comm.rank() == root)
          for (int i = 0; i < 11; ++i) data[i] = root * 100 + i;
        void* p = mem.put(data);
        comm.broadcast(p, 44, root, mem.stream());
        std::vector<int32_t> got = mem.get_as<int32_t>(p, 11);
        for (int i = 0; i < 11; ++i) EXPECT_EQ(got[i], root * 100 + i) << "rank " << comm.rank();
        outputs.push_back(bytes_of(got));
      }
      return outputs;
    };
    expect_same_bytes(run_cpu(n, body), run_nccl(n, body), "broadcast n=" + std::to_string(n));
  }
}

TEST(NcclCommunicator, SendRecvRing) {
  for (int n : world_sizes()) {
    Body body = [&](Communicator& comm, Mem& mem) -> Outputs {
      int r = comm.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
      // A full rotation with send_recv (at n = 1 a send to itself): every block comes back.
      Outputs outputs;
      void* block = mem.put(std::vector<int32_t>{r, r * 10, r * 100});
      void* got = mem.alloc(12);
      for (int step = 1; step <= n; ++step) {
        comm.send_recv(block, 12, next, got, 12, prev, mem.stream());
        int from = (r - step % n + n) % n;
        std::vector<int32_t> values = mem.get_as<int32_t>(got, 3);
        EXPECT_EQ(values, (std::vector<int32_t>{from, from * 10, from * 100})) << "rank " << r << " step " << step;
        outputs.push_back(bytes_of(values));
        std::swap(block, got);
      }
      return outputs;
    };
    expect_same_bytes(run_cpu(n, body), run_nccl(n, body), "send_recv ring n=" + std::to_string(n));
  }
}

TEST(NcclCommunicator, SendRecvPairwiseAndAllToAll) {
  for (int n : world_sizes()) {
    Body body = [&](Communicator& comm, Mem& mem) -> Outputs {
      int r = comm.rank();
      Outputs outputs;
      // Pairs (0,1), (2,3), ...: the lower rank sends first, which NCCL allows for lone calls.
      int partner = r ^ 1;
      if (partner < n) {
        void* mine = mem.put(std::vector<double>{r + 0.5});
        void* theirs = mem.alloc(8);
        if (r < partner) {
          comm.send(mine, 8, partner, mem.stream());
          comm.recv(theirs, 8, partner, mem.stream());
        } else {
          comm.recv(theirs, 8, partner, mem.stream());
          comm.send(mine, 8, partner, mem.stream());
        }
        EXPECT_EQ(mem.get_as<double>(theirs, 1)[0], partner + 0.5);
        outputs.push_back(mem.get(theirs, 8));
      }
      // Every rank to every rank (itself included) by shifts, three ordered messages each of
      // growing size: send_recv, as the contract asks for exchanges.
      for (int shift = 0; shift < n; ++shift) {
        int dst = (r + shift) % n, src = (r - shift + n) % n;
        for (int k = 0; k < 3; ++k) {
          void* msg = mem.put(std::vector<int32_t>(k + 1, r * 1000 + dst * 10 + k));
          void* in = mem.alloc((k + 1) * 4);
          comm.send_recv(msg, (k + 1) * 4, dst, in, (k + 1) * 4, src, mem.stream());
          std::vector<int32_t> got = mem.get_as<int32_t>(in, k + 1);
          EXPECT_EQ(got, std::vector<int32_t>(k + 1, src * 1000 + r * 10 + k)) << "rank " << r;
          outputs.push_back(bytes_of(got));
        }
      }
      return outputs;
    };
    expect_same_bytes(run_cpu(n, body), run_nccl(n, body), "send/recv n=" + std::to_string(n));
  }
}

TEST(NcclCommunicator, BarrierHoldsEveryRankUntilAllArrive) {
  for (int n : world_sizes()) {
    std::atomic<int> arrived{0};
    run_nccl(n, [&](Communicator& comm, Mem&) -> Outputs {
      for (int it = 0; it < 100; ++it) {
        arrived.fetch_add(1);
        comm.barrier();
        EXPECT_EQ(arrived.load(), n * (it + 1)) << "iteration " << it;
        comm.barrier();
      }
      return {};
    });
  }
}

// The CPU test's grouped-gather case: 3 items of mixed types (f32, i32, fp8 bytes) with uneven
// per-rank counts, zeros included, changing with the iteration.
struct GathervCase {
  std::vector<std::vector<size_t>> counts;              // [3 items][n ranks] bytes
  std::vector<std::vector<uint8_t>> expected;           // [3 items] concatenation in rank order
  std::vector<std::vector<std::vector<uint8_t>>> send;  // [n ranks][3 items] bytes

  GathervCase(int n, int iteration) : counts(3, std::vector<size_t>(n)), expected(3), send(n) {
    for (int r = 0; r < n; ++r) {
      counts[0][r] = 4 * size_t((r + iteration) % 4);     // f32: 0..3 elements
      counts[1][r] = 4 * size_t(r % 2 == 0 ? r + 2 : 0);  // i32: odd ranks send nothing
      counts[2][r] = size_t((r * 5 + iteration) % 7);     // fp8: raw bytes, 0..6
      send[r].resize(3);
      for (int item = 0; item < 3; ++item) {
        std::vector<uint8_t>& bytes = send[r][item];
        for (size_t b = 0; b < counts[item][r] / (item == 2 ? 1 : 4); ++b) {
          if (item == 0) {
            float v = r + 0.25f * b + iteration;
            append(bytes, &v, 4);
          }
          if (item == 1) {
            int32_t v = -r * 1000 - int32_t(b) - iteration;
            append(bytes, &v, 4);
          }
          if (item == 2) bytes.push_back(uint8_t(0x80 | (r * 16 + b + iteration)));
        }
        expected[item].insert(expected[item].end(), bytes.begin(), bytes.end());
      }
    }
  }
  static void append(std::vector<uint8_t>& out, const void* v, size_t n) {
    auto* p = static_cast<const uint8_t*>(v);
    out.insert(out.end(), p, p + n);
  }
};

Outputs check_all_gatherv(Communicator& comm, Mem& mem, const GathervCase& c, bool in_place) {
  int r = comm.rank();
  std::vector<GatherItem> items(3);
  for (int i = 0; i < 3; ++i) {
    items[i] = {.send = mem.put(c.send[r][i]),
                .send_bytes = c.send[r][i].size(),
                .recv = mem.alloc(c.expected[i].size()),
                .recv_counts = c.counts[i]};
    if (in_place) {
      std::byte* own = static_cast<std::byte*>(items[i].recv) + gather_offset(items[i], r);
      mem.write(own, c.send[r][i].data(), c.send[r][i].size());
      items[i].send = own;
    }
  }
  comm.all_gatherv(items, mem.stream());
  Outputs outputs;
  for (int i = 0; i < 3; ++i) {
    outputs.push_back(mem.get(items[i].recv, c.expected[i].size()));
    EXPECT_EQ(outputs.back(), c.expected[i]) << "item " << i << " rank " << r << (in_place ? " in place" : "");
  }
  return outputs;
}

TEST(NcclCommunicator, AllGathervMovesMixedItemsInOneCall) {
  for (int n : world_sizes()) {
    for (int iteration : {0, 1, 2, 3}) {  // different zero patterns at n = 1 too
      GathervCase c(n, iteration);
      Body body = [&](Communicator& comm, Mem& mem) -> Outputs {
        Outputs outputs = check_all_gatherv(comm, mem, c, false);
        Outputs in_place = check_all_gatherv(comm, mem, c, true);
        outputs.insert(outputs.end(), in_place.begin(), in_place.end());
        return outputs;
      };
      expect_same_bytes(run_cpu(n, body), run_nccl(n, body),
                        "all_gatherv n=" + std::to_string(n) + " iteration " + std::to_string(iteration));
    }
  }
}

TEST(NcclCommunicator, AllGathervWithNoItemsOrOnlyZeroBytes) {
  for (int n : world_sizes()) {
    run_nccl(n, [&](Communicator& comm, Mem& mem) -> Outputs {
      comm.all_gatherv({}, mem.stream());
      std::vector<size_t> zeros(n, 0);
      GatherItem item{.send = nullptr, .send_bytes = 0, .recv = nullptr, .recv_counts = zeros};
      comm.all_gatherv({&item, 1}, mem.stream());
      return {};
    });
  }
}

TEST(NcclCommunicator, HundredIterationsOfMixedCollectives) {
  for (int n : world_sizes()) {
    std::vector<GathervCase> cases;
    for (int it = 0; it < 100; ++it) cases.emplace_back(n, it);
    Body body = [&](Communicator& comm, Mem& mem) -> Outputs {
      int r = comm.rank();
      Outputs outputs;
      for (int it = 0; it < 100; ++it) {
        size_t count = 1 + it % 9;
        std::vector<float> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = float(r * 3 + it + i);
        void* d = mem.put(data);
        comm.all_reduce(d, d, count, ReduceType::kF32, mem.stream());
        std::vector<float> sum = mem.get_as<float>(d, count);
        for (size_t i = 0; i < count; ++i) EXPECT_EQ(sum[i], float(3 * n * (n - 1) / 2 + n * (it + i))) << it;
        outputs.push_back(bytes_of(sum));  // small integers: exact in any order
        Outputs gathered = check_all_gatherv(comm, mem, cases[it], it % 2 == 1);
        outputs.insert(outputs.end(), gathered.begin(), gathered.end());
        void* value = mem.put(std::vector<int32_t>{r == it % n ? it : -1});
        comm.broadcast(value, 4, it % n, mem.stream());
        outputs.push_back(mem.get(value, 4));
        void* token = mem.put(std::vector<int32_t>{it * 10 + r});
        void* got = mem.alloc(4);
        comm.send_recv(token, 4, (r + 1) % n, got, 4, (r + n - 1) % n, mem.stream());
        outputs.push_back(mem.get(got, 4));
        EXPECT_EQ(mem.get_as<int32_t>(got, 1)[0], it * 10 + (r + n - 1) % n);
      }
      return outputs;
    };
    expect_same_bytes(run_cpu(n, body), run_nccl(n, body), "100 iterations n=" + std::to_string(n));
  }
}

// Errors this rank can see alone throw before anything is enqueued, naming the rank and the
// cause; the communicator stays usable. Every rank passes the same bad argument here (a
// disagreement between ranks is not detected on NCCL, see nccl_communicator.h).
TEST(NcclCommunicator, LocalArgumentErrorsThrowClearly) {
  for (int n : world_sizes()) {
    run_nccl(n, [&](Communicator& comm, Mem& mem) -> Outputs {
      int r = comm.rank();
      std::string who = "rank " + std::to_string(r) + " of " + std::to_string(n) + ": ";
      auto expect_error = [&](const std::function<void()>& call, const std::string& cause) {
        try {
          call();
          ADD_FAILURE() << "no error, expected: " << cause;
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find(who + cause), std::string::npos) << e.what();
        }
      };
      void* p = mem.alloc(64);
      expect_error([&] { comm.broadcast(p, 4, n, mem.stream()); },
                   "broadcast: root " + std::to_string(n) + " is outside [0, " + std::to_string(n) + ")");
      expect_error([&] { comm.send(p, 4, r, mem.stream()); }, "send: a lone send to itself");
      expect_error([&] { comm.recv(p, 4, r, mem.stream()); }, "recv: a lone recv from itself");
      expect_error([&] { comm.send_recv(p, 4, -1, p, 4, 0, mem.stream()); }, "send_recv: peer -1 is outside");
      std::vector<size_t> counts(n, 4);
      GatherItem item{.send = p, .send_bytes = 8, .recv = p, .recv_counts = counts};
      expect_error([&] { comm.all_gatherv({&item, 1}, mem.stream()); },
                   "all_gatherv: item 0 sends 8 bytes but recv_counts[" + std::to_string(r) + "] is 4");
      // Still usable.
      void* one = mem.put(std::vector<int32_t>{1});
      comm.all_reduce(one, one, 1, ReduceType::kI32, mem.stream());
      EXPECT_EQ(mem.get_as<int32_t>(one, 1)[0], n);
      return {};
    });
  }
}

// ncclCommInitAll from one thread over every GPU, then each communicator driven by its GPU's thread.
TEST(NcclCommunicator, LocalCommunicatorsFromOneThread) {
  for (int n : world_sizes()) {
    std::vector<int> devices(n);
    for (int d = 0; d < n; ++d) devices[d] = d;
    std::vector<std::unique_ptr<NcclCommunicator>> comms = make_local_nccl_communicators(devices);
    ASSERT_EQ(int(comms.size()), n);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(comms[r]->rank(), r);
      EXPECT_EQ(comms[r]->size(), n);
      EXPECT_EQ(comms[r]->device(), r);
    }
    auto inputs = random_inputs(n, 33, 4);
    Body body = [&](Communicator& comm, Mem& mem) -> Outputs {
      void* d = mem.put(inputs[comm.rank()]);
      comm.all_reduce(d, d, 33, ReduceType::kF32, mem.stream());
      int32_t me = comm.rank();
      void* out = mem.alloc(4 * n);
      comm.all_gather(mem.put(std::vector<int32_t>{me}), out, 4, mem.stream());
      return {mem.get(d, 33 * 4)};
    };
    std::vector<Outputs> nccl = run_nccl(n, body, [&](int rank) -> std::unique_ptr<Communicator> {
      return std::move(comms[rank]);  // each thread owns and destroys its own
    });
    expect_close_sums(run_cpu(n, body), nccl, ReduceType::kF32, "ncclCommInitAll n=" + std::to_string(n));
  }
}

// Each rank's NCCL communicators reach exactly the members RankLayout lists, in group-rank order.
TEST(NcclProcessGroups, EveryGroupGathersItsMembersInOrder) {
  int n = device_count();
  std::vector<ParallelConfig> configs = {ParallelConfig{.tp = n}, ParallelConfig{.dp = n, .ep = n}};
  if (n % 2 == 0 && n >= 4) {
    configs.push_back(ParallelConfig{.dp = 2, .tp = n / 2, .ep = n});
    configs.push_back(ParallelConfig{.tp = n / 2, .pcp = 2, .dcp = (n / 2) % 2 == 0 ? 2 : 1, .ep = n / 2});
  }
  for (const ParallelConfig& config : configs) {
    NcclProcessGroups factory(config);
    const RankLayout& layout = factory.layout();
    ASSERT_EQ(layout.world_size(), n);
    std::vector<std::string> errors(n);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < n; ++rank) {
      threads.emplace_back([&, rank] {
        try {
          TACHYON_CUDA_CHECK(cudaSetDevice(rank));
          ProcessGroups mine = factory.make(rank);
          EXPECT_EQ(mine.coord, layout.coord(rank));
          Stream stream;
          Mem mem(true, stream.stream);
          for (GroupKind kind : kGroupKinds) {
            std::vector<int> members = layout.group(kind, rank);
            Communicator& comm = mine.get(kind);
            ASSERT_EQ(comm.size(), int(members.size())) << group_kind_name(kind);
            EXPECT_EQ(members[comm.rank()], rank) << group_kind_name(kind);
            void* me = mem.put(std::vector<int32_t>{rank});
            void* gathered = mem.alloc(4 * members.size());
            comm.all_gather(me, gathered, 4, mem.stream());
            EXPECT_EQ(mem.get_as<int32_t>(gathered, members.size()), members)
                << group_kind_name(kind) << " rank " << rank;
          }
        } catch (const std::exception& e) {
          errors[rank] = e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (int rank = 0; rank < n; ++rank) EXPECT_EQ(errors[rank], "") << rank;
  }
}

#endif  // TACHYON_HAVE_NCCL

}  // namespace
}  // namespace tachyon::dist
