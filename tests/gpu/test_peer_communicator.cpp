// PeerCommunicator (dist/cuda/peer_communicator.h): every world size of 1, 2, 3, 4 and 8 that
// the machine has GPUs for runs as that many rank threads, rank r on GPU r, each with its own
// non-blocking stream (a one-GPU machine runs world 1: the kernels, barriers and epochs against
// itself). Ranks sharing one GPU are NOT tested: the first run on the one-GPU machine showed
// that a rank's kernel can wait behind a peer's spinning kernel in the same hardware queue and
// never start (30 s hang timeouts at world 2 and 3), so the protocol needs a GPU per rank.
// Checked: all_reduce f32 / bf16 / f16 at awkward sizes (1, 7, 1000, 65537 elements, a two-shot
// size, one larger than the buffer so chunks run), in and out of place, misaligned, equal BIT
// FOR BIT to a serial sum in rank order (CpuCommunicator's order and rounding; a test pins that
// the reference is CpuCommunicator's result); all_gather bit-exact at odd byte counts; the path
// each size takes; a CUDA graph replayed 5 times with new inputs (the barrier epoch lives on the
// device); the fallback getting large messages and other ops, and errors without one.
//
// Rules of these tests: a rank allocates, copies and frees only
// outside lockstep(), i.e. while no collective is in flight anywhere (cudaMalloc/cudaFree or a
// synchronizing copy could wait on a peer's kernel that waits on this rank); worlds are built
// with a hang timeout, so a protocol bug traps a kernel instead of hanging the run.
// Seed: printed as [gpu_test] TACHYON_TEST_SEED=...; set it to replay a failure.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/base/check.h"
#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/dist/cuda/peer_communicator.h"
#include "tachyon/tensor/cuda/device_buffer.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::dist {

// gtest prints a PeerPath by name.
void PrintTo(PeerPath path, std::ostream* os) { *os << peer_path_name(path); }

namespace {

// Before main(), so before CUDA reads it: enough hardware queues that 8 ranks' streams on one
// GPU never queue behind each other (a kernel stuck behind a peer's spinning kernel would hang).
[[maybe_unused]] const bool kEnoughQueues = [] {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
  return true;
}();

const int kWorldSizes[] = {1, 2, 3, 4, 8};
constexpr size_t kBuffer = size_t{1} << 20;  // small, so "larger than the buffer" stays cheap
constexpr double kHangTimeoutS = 30;
constexpr ReduceType kFloatTypes[] = {ReduceType::kF32, ReduceType::kBF16, ReduceType::kF16};

// --- host reference --------------------------------------------------------------------------

float load_element(ReduceType type, const uint8_t* bytes, size_t i) {
  if (type == ReduceType::kF32) {
    float v;
    std::memcpy(&v, bytes + 4 * i, 4);
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, bytes + 2 * i, 2);
  return type == ReduceType::kBF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
}

void store_element(ReduceType type, uint8_t* bytes, size_t i, float v) {
  if (type == ReduceType::kF32) {
    std::memcpy(bytes + 4 * i, &v, 4);
    return;
  }
  const uint16_t bits = type == ReduceType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
  std::memcpy(bytes + 2 * i, &bits, 2);
}

// `count` elements for one rank as raw bytes: normal values times 2^[-6, 6], so that adding the
// ranks in another order would round differently and a bit-exact check can tell orders apart.
std::vector<uint8_t> random_elements(std::mt19937_64& gen, ReduceType type, size_t count) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-6, 6);
  std::vector<uint8_t> out(count * reduce_type_size(type));
  for (size_t i = 0; i < count; ++i) store_element(type, out.data(), i, std::ldexp(normal(gen), exponent(gen)));
  return out;
}

std::vector<uint8_t> random_bytes(std::mt19937_64& gen, size_t count) {
  std::vector<uint8_t> out(count);
  for (uint8_t& b : out) b = static_cast<uint8_t>(gen());
  return out;
}

// CpuCommunicator's all-reduce, serially: ranks 0..n-1 added in order in f32, rounded once.
std::vector<uint8_t> serial_sum(const std::vector<std::vector<uint8_t>>& inputs, ReduceType type, size_t count) {
  std::vector<uint8_t> out(count * reduce_type_size(type));
  for (size_t i = 0; i < count; ++i) {
    float acc = load_element(type, inputs[0].data(), i);
    for (size_t r = 1; r < inputs.size(); ++r) acc += load_element(type, inputs[r].data(), i);
    store_element(type, out.data(), i, acc);
  }
  return out;
}

// "" when equal, else where and how the first element of `unit` bytes differs.
std::string first_difference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, size_t unit = 1) {
  if (got.size() != want.size())
    return "got " + std::to_string(got.size()) + " bytes, want " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); i += unit) {
    if (std::memcmp(got.data() + i, want.data() + i, unit) != 0) {
      char text[96];
      std::snprintf(text, sizeof(text), "element %zu of %zu: got 0x%02x.. want 0x%02x..", i / unit, got.size() / unit,
                    got[i], want[i]);
      return text;
    }
  }
  return "";
}

// --- rank harness ----------------------------------------------------------------------------

// Device memory of one rank, filled and read on the rank's stream; freed when the rank's body ends.
class RankMemory {
 public:
  explicit RankMemory(cudaStream_t stream) : stream_(stream) {}
  // `bytes` (at least 1) of poison (0xFF: NaN in every float type), 256-byte aligned.
  std::byte* alloc(size_t bytes) {
    buffers_.push_back(std::make_unique<cuda::DeviceBuffer>(std::max<size_t>(bytes, 1)));
    auto* p = static_cast<std::byte*>(buffers_.back()->data());
    poison(p, bytes);
    return p;
  }
  void poison(void* p, size_t bytes) {
    TACHYON_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes, stream_));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void upload(void* dst, const std::vector<uint8_t>& bytes) {
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(dst, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream_));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  std::vector<uint8_t> download(const void* src, size_t bytes) {
    std::vector<uint8_t> out(bytes);
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(out.data(), src, bytes, cudaMemcpyDeviceToHost, stream_));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return out;
  }

 private:
  cudaStream_t stream_;
  std::vector<std::unique_ptr<cuda::DeviceBuffer>> buffers_;
};

struct Rank {
  int rank;
  PeerCommunicator& comm;
  cudaStream_t stream;
  RankMemory& mem;
  void* s() const { return stream; }
};

// Enqueues `collectives` on every rank at once: every rank has finished its setup before the
// first launch, and every collective has finished everywhere before anyone reads or frees.
void lockstep(Rank& rank, const std::function<void()>& collectives) {
  rank.comm.barrier();
  collectives();
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(rank.stream));
  rank.comm.barrier();
}

// Runs body on world.size() threads: rank r with world.device(r) current, its own non-blocking
// stream and a PeerCommunicator with fallbacks[r] (none when fallbacks is empty).
void run_ranks(PeerWorld& world, const std::function<void(Rank&)>& body,
               const std::vector<Communicator*>& fallbacks = {}) {
  const int n = world.size();
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        TACHYON_CUDA_CHECK(cudaSetDevice(world.device(r)));
        cudaStream_t stream = nullptr;
        TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        {
          RankMemory mem(stream);
          PeerCommunicator comm(world, r, fallbacks.empty() ? nullptr : fallbacks[r]);
          Rank rank{r, comm, stream, mem};
          body(rank);
          TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream));
        }
        TACHYON_CUDA_CHECK(cudaStreamDestroy(stream));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " of " << n;
}

// Rank r on GPU r; nullptr when the machine has fewer than n GPUs (the caller skips that size).
std::unique_ptr<PeerWorld> test_world(int n, size_t buffer = kBuffer) {
  if (cuda::cuda_device_count() < n) return nullptr;
  std::vector<int> devices(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) devices[static_cast<size_t>(r)] = r;
  if (!PeerWorld::supported(devices)) return nullptr;
  return std::make_unique<PeerWorld>(devices, buffer, kHangTimeoutS);
}

// --- all_reduce cases ------------------------------------------------------------------------

// Above every one-shot limit of 3+ ranks (512 KiB) and below the buffer: two-shot from 3 ranks.
size_t two_shot_count(ReduceType type) { return (size_t{640} << 10) / reduce_type_size(type) + 3; }
// 2.5 buffers and a bit: three chunks, the last one not a multiple of 16 bytes.
size_t over_buffer_count(ReduceType type) { return kBuffer * 5 / 2 / reduce_type_size(type) + 3; }

struct ReduceCase {
  ReduceType type;
  size_t count;
  bool in_place;
  size_t send_offset = 0;  // bytes past a 256-byte boundary: misaligned pointers
  size_t recv_offset = 0;
  size_t bytes() const { return count * reduce_type_size(type); }
  std::string name() const {
    return std::string(reduce_type_name(type)) + " x" + std::to_string(count) + (in_place ? " in place" : "") +
           (send_offset + recv_offset ? " misaligned" : "");
  }
};

// The path a message of `bytes` must take: the first chunk's when it exceeds the buffer.
PeerPath expected_path(size_t bytes, int n) { return all_reduce_path(std::min(bytes, kBuffer), n); }

// Runs every case back to back on every rank (no host sync in between: buffer reuse across
// calls of different sizes and paths is part of the test), then checks each result bit for bit.
void check_all_reduce(PeerWorld& world, const std::vector<ReduceCase>& cases, uint64_t salt) {
  const int n = world.size();
  std::mt19937_64 gen = gpu_test::rng(salt);
  std::vector<std::vector<std::vector<uint8_t>>> inputs(cases.size());  // [case][rank]
  std::vector<std::vector<uint8_t>> want(cases.size());
  for (size_t c = 0; c < cases.size(); ++c) {
    for (int r = 0; r < n; ++r) inputs[c].push_back(random_elements(gen, cases[c].type, cases[c].count));
    want[c] = serial_sum(inputs[c], cases[c].type, cases[c].count);
  }
  run_ranks(world, [&](Rank& rank) {
    std::vector<std::byte*> send(cases.size()), recv(cases.size());
    for (size_t c = 0; c < cases.size(); ++c) {
      const ReduceCase& k = cases[c];
      send[c] = rank.mem.alloc(k.bytes() + k.send_offset) + k.send_offset;
      recv[c] = k.in_place ? send[c] : rank.mem.alloc(k.bytes() + k.recv_offset) + k.recv_offset;
      rank.mem.upload(send[c], inputs[c][rank.rank]);
    }
    std::vector<PeerPath> paths(cases.size());
    lockstep(rank, [&] {
      for (size_t c = 0; c < cases.size(); ++c) {
        rank.comm.all_reduce(send[c], recv[c], cases[c].count, cases[c].type, rank.s());
        paths[c] = rank.comm.last_path();
      }
    });
    for (size_t c = 0; c < cases.size(); ++c) {
      const ReduceCase& k = cases[c];
      const std::string what = "n=" + std::to_string(n) + " rank " + std::to_string(rank.rank) + " " + k.name();
      EXPECT_EQ(first_difference(rank.mem.download(recv[c], k.bytes()), want[c], reduce_type_size(k.type)), "") << what;
      EXPECT_EQ(paths[c], expected_path(k.bytes(), n)) << what;
    }
  });
}

std::vector<ReduceCase> awkward_cases() {
  std::vector<ReduceCase> cases;
  for (ReduceType type : kFloatTypes) {
    for (size_t count :
         {size_t{1}, size_t{7}, size_t{1000}, size_t{65537}, two_shot_count(type), over_buffer_count(type)}) {
      for (bool in_place : {false, true}) cases.push_back({.type = type, .count = count, .in_place = in_place});
    }
  }
  return cases;
}

TEST(PeerCommunicator, AllReduceEqualsTheSerialSumBitForBit) {
  for (int n : kWorldSizes) {
    auto world = test_world(n);
    if (!world) continue;  // fewer GPUs than ranks
    check_all_reduce(*world, awkward_cases(), 100 + n);
  }
}

TEST(PeerCommunicator, EachSizeTakesItsPath) {
  for (int n : kWorldSizes) {
    for (ReduceType type : kFloatTypes) {
      const size_t esize = reduce_type_size(type);
      for (size_t count : {size_t{1}, size_t{7}, size_t{1000}})
        EXPECT_EQ(expected_path(count * esize, n), PeerPath::kOneShot);
      const PeerPath big = n >= 3 ? PeerPath::kTwoShot : PeerPath::kOneShot;
      EXPECT_EQ(expected_path(two_shot_count(type) * esize, n), big) << n;
      EXPECT_EQ(expected_path(over_buffer_count(type) * esize, n), big) << n;
    }
  }
  // With a fallback, larger than the buffer is the fallback's (FallbackTakesWhatThePeerPathDoesNot).
}

TEST(PeerCommunicator, MisalignedBuffersTakeTheBytePath) {
  std::vector<ReduceCase> cases = {
      {.type = ReduceType::kBF16, .count = 1003, .in_place = false, .send_offset = 2, .recv_offset = 6},
      {.type = ReduceType::kBF16, .count = 70001, .in_place = true, .send_offset = 10},
      {.type = ReduceType::kF32, .count = 4099, .in_place = false, .send_offset = 4, .recv_offset = 0},
      {.type = ReduceType::kF16, .count = 333, .in_place = false, .send_offset = 0, .recv_offset = 14},
      {.type = ReduceType::kF32,
       .count = over_buffer_count(ReduceType::kF32),
       .in_place = false,
       .send_offset = 8,
       .recv_offset = 4},
  };
  for (int n : {1, 2, 3, 8}) {
    auto world = test_world(n);
    if (!world) continue;  // fewer GPUs than ranks
    check_all_reduce(*world, cases, 200 + n);
  }
}

// The test's reference is what CpuCommunicator computes, bit for bit.
TEST(PeerCommunicator, ReferenceIsTheCpuCommunicatorsSum) {
  const int n = 3;
  std::mt19937_64 gen = gpu_test::rng(300);
  for (ReduceType type : kFloatTypes) {
    const size_t count = 1001;
    std::vector<std::vector<uint8_t>> inputs;
    for (int r = 0; r < n; ++r) inputs.push_back(random_elements(gen, type, count));
    const std::vector<uint8_t> want = serial_sum(inputs, type, count);
    CpuWorld world(n);
    std::vector<std::vector<uint8_t>> got(n, std::vector<uint8_t>(want.size()));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        CpuCommunicator comm(world, r);
        comm.all_reduce(inputs[r].data(), got[r].data(), count, type, nullptr);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(first_difference(got[r], want, reduce_type_size(type)), "") << reduce_type_name(type);
  }
}

// --- all_gather ------------------------------------------------------------------------------

TEST(PeerCommunicator, AllGatherIsBitExact) {
  const size_t sizes[] = {1, 7, 13, 1000, 4099, 65537, kBuffer + 33};
  for (int n : kWorldSizes) {
    auto world = test_world(n);
    if (!world) continue;  // fewer GPUs than ranks
    std::mt19937_64 gen = gpu_test::rng(400 + n);
    std::vector<std::vector<uint8_t>> want;  // [size]: every rank's bytes in rank order
    for (size_t bytes : sizes) want.push_back(random_bytes(gen, bytes * n));
    run_ranks(*world, [&](Rank& rank) {
      const int r = rank.rank;
      std::vector<std::byte*> send, out, in_place;
      for (size_t i = 0; i < std::size(sizes); ++i) {
        const size_t bytes = sizes[i];
        std::vector<uint8_t> mine(want[i].begin() + r * bytes, want[i].begin() + (r + 1) * bytes);
        send.push_back(rank.mem.alloc(bytes));
        rank.mem.upload(send.back(), mine);
        out.push_back(rank.mem.alloc(bytes * n));
        in_place.push_back(rank.mem.alloc(bytes * n));
        rank.mem.upload(in_place.back() + r * bytes, mine);
      }
      std::vector<PeerPath> paths;
      lockstep(rank, [&] {
        for (size_t i = 0; i < std::size(sizes); ++i) {
          rank.comm.all_gather(send[i], out[i], sizes[i], rank.s());
          rank.comm.all_gather(in_place[i] + r * sizes[i], in_place[i], sizes[i], rank.s());
          paths.push_back(rank.comm.last_path());
        }
      });
      for (size_t i = 0; i < std::size(sizes); ++i) {
        const std::string what =
            "n=" + std::to_string(n) + " rank " + std::to_string(r) + " bytes " + std::to_string(sizes[i]);
        EXPECT_EQ(first_difference(rank.mem.download(out[i], sizes[i] * n), want[i]), "") << what << " out of place";
        EXPECT_EQ(first_difference(rank.mem.download(in_place[i], sizes[i] * n), want[i]), "") << what << " in place";
        EXPECT_EQ(paths[i], PeerPath::kOneShot) << what;
      }
    });
  }
}

// --- CUDA graphs -----------------------------------------------------------------------------

// One graph holding a one-shot all-reduce, a two-shot one (3+ ranks) and an all-gather, replayed
// 5 times with new inputs. Epochs baked in at capture would let a replay's barriers pass before
// the peers staged their new data; fresh results every time show the epoch is the device's.
// An eager call afterwards shows graph and eager calls share the same epochs.
TEST(PeerCommunicator, GraphReplaysGetFreshEpochs) {
  constexpr int kReplays = 5;
  for (int n : kWorldSizes) {
    auto world = test_world(n);
    if (!world) continue;  // fewer GPUs than ranks
    std::mt19937_64 gen = gpu_test::rng(500 + n);
    const size_t small = 4099, large = two_shot_count(ReduceType::kBF16), gather = 1001;
    // [replay + 1 eager][rank]
    std::vector<std::vector<std::vector<uint8_t>>> small_in(kReplays + 1), large_in(kReplays + 1);
    std::vector<std::vector<uint8_t>> small_want, large_want, gather_want;
    for (int i = 0; i <= kReplays; ++i) {
      for (int r = 0; r < n; ++r) {
        small_in[i].push_back(random_elements(gen, ReduceType::kBF16, small));
        large_in[i].push_back(random_elements(gen, ReduceType::kBF16, large));
      }
      small_want.push_back(serial_sum(small_in[i], ReduceType::kBF16, small));
      large_want.push_back(serial_sum(large_in[i], ReduceType::kBF16, large));
      gather_want.push_back(random_bytes(gen, gather * n));
    }
    run_ranks(*world, [&](Rank& rank) {
      const int r = rank.rank;
      std::byte* small_send = rank.mem.alloc(small * 2);
      std::byte* small_recv = rank.mem.alloc(small * 2);
      std::byte* large_data = rank.mem.alloc(large * 2);  // in place
      std::byte* gather_send = rank.mem.alloc(gather);
      std::byte* gather_recv = rank.mem.alloc(gather * n);
      auto enqueue = [&] {
        rank.comm.all_reduce(small_send, small_recv, small, ReduceType::kBF16, rank.s());
        rank.comm.all_reduce(large_data, large_data, large, ReduceType::kBF16, rank.s());
        rank.comm.all_gather(gather_send, gather_recv, gather, rank.s());
      };
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      TACHYON_CUDA_CHECK(cudaStreamBeginCapture(rank.stream, cudaStreamCaptureModeThreadLocal));
      enqueue();
      TACHYON_CUDA_CHECK(cudaStreamEndCapture(rank.stream, &graph));
      TACHYON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      for (int i = 0; i <= kReplays; ++i) {
        rank.mem.upload(small_send, small_in[i][r]);
        rank.mem.upload(large_data, large_in[i][r]);
        rank.mem.upload(gather_send, std::vector<uint8_t>(gather_want[i].begin() + r * gather,
                                                          gather_want[i].begin() + (r + 1) * gather));
        rank.mem.poison(small_recv, small * 2);
        rank.mem.poison(gather_recv, gather * n);
        const bool eager = i == kReplays;
        lockstep(rank, [&] {
          if (eager) {
            enqueue();
          } else {
            TACHYON_CUDA_CHECK(cudaGraphLaunch(exec, rank.stream));
          }
        });
        const std::string what = "n=" + std::to_string(n) + " rank " + std::to_string(r) +
                                 (eager ? " eager after the replays" : " replay " + std::to_string(i));
        EXPECT_EQ(first_difference(rank.mem.download(small_recv, small * 2), small_want[i], 2), "")
            << what << " one-shot";
        EXPECT_EQ(first_difference(rank.mem.download(large_data, large * 2), large_want[i], 2), "") << what << " large";
        EXPECT_EQ(first_difference(rank.mem.download(gather_recv, gather * n), gather_want[i]), "")
            << what << " all_gather";
      }
      TACHYON_CUDA_CHECK(cudaGraphExecDestroy(exec));
      TACHYON_CUDA_CHECK(cudaGraphDestroy(graph));
    });
  }
}

// --- fallback and errors ---------------------------------------------------------------------

// A fallback that records each call and touches no memory.
class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce(const void*, void*, size_t count, ReduceType type, void*) override {
    record("all_reduce " + std::to_string(count) + " " + std::string(reduce_type_name(type)));
  }
  void all_gather(const void*, void*, size_t bytes, void*) override { record("all_gather " + std::to_string(bytes)); }
  void reduce_scatter(const void*, void*, size_t count, ReduceType, void*) override {
    record("reduce_scatter " + std::to_string(count));
  }
  void broadcast(void*, size_t bytes, int root, void*) override { record("broadcast root " + std::to_string(root)); }
  void all_gatherv(std::span<const GatherItem> items, void*) override {
    record("all_gatherv " + std::to_string(items.size()));
  }
  void all_to_all_v(std::span<const AllToAllItem> items, void*) override {
    record("all_to_all_v " + std::to_string(items.size()));
  }
  void send(const void*, size_t, int peer, void*) override { record("send " + std::to_string(peer)); }
  void recv(void*, size_t, int peer, void*) override { record("recv " + std::to_string(peer)); }
  void send_recv(const void*, size_t, int dst, void*, size_t, int src, void*) override {
    record("send_recv " + std::to_string(dst) + " " + std::to_string(src));
  }
  void barrier() override { record("barrier"); }
  std::vector<std::string> calls;

 private:
  void record(std::string call) { calls.push_back(std::move(call)); }
  int rank_, size_;
};

TEST(PeerCommunicator, FallbackTakesWhatThePeerPathDoesNot) {
  const int n = 2;
  auto world = test_world(n);
  if (!world) GTEST_SKIP() << "needs 2 GPUs with peer access (ranks cannot share one GPU)";
  std::vector<std::unique_ptr<RecordingCommunicator>> mocks;
  std::vector<Communicator*> fallbacks;
  for (int r = 0; r < n; ++r) {
    mocks.push_back(std::make_unique<RecordingCommunicator>(r, n));
    fallbacks.push_back(mocks.back().get());
  }
  std::mt19937_64 gen = gpu_test::rng(600);
  const size_t small = 1000, over = kBuffer / 4 + 1;  // f32 elements
  std::vector<std::vector<uint8_t>> inputs = {random_elements(gen, ReduceType::kF32, small),
                                              random_elements(gen, ReduceType::kF32, small)};
  const std::vector<uint8_t> want = serial_sum(inputs, ReduceType::kF32, small);
  run_ranks(
      *world,
      [&](Rank& rank) {
        RecordingCommunicator& mock = *mocks[rank.rank];
        std::byte* data = rank.mem.alloc(small * 4);
        rank.mem.upload(data, inputs[rank.rank]);
        lockstep(rank, [&] { rank.comm.all_reduce(data, data, small, ReduceType::kF32, rank.s()); });
        EXPECT_EQ(rank.comm.last_path(), PeerPath::kOneShot);
        EXPECT_EQ(first_difference(rank.mem.download(data, small * 4), want, 4), "");
        EXPECT_TRUE(mock.calls.empty());
        // Nothing below launches a peer kernel, so no lockstep is needed.
        std::byte* any = data;  // the mock never dereferences
        rank.comm.all_reduce(any, any, over, ReduceType::kF32, rank.s());
        EXPECT_EQ(rank.comm.last_path(), PeerPath::kFallback);
        rank.comm.all_gather(any, any, kBuffer + 1, rank.s());
        EXPECT_EQ(rank.comm.last_path(), PeerPath::kFallback);
        rank.comm.all_reduce(any, any, 5, ReduceType::kI32, rank.s());
        rank.comm.all_reduce(any, any, 5, ReduceType::kI64, rank.s());
        rank.comm.reduce_scatter(any, any, 3, ReduceType::kBF16, rank.s());
        rank.comm.broadcast(any, 8, 1, rank.s());
        GatherItem item;
        rank.comm.all_gatherv({&item, 1}, rank.s());
        rank.comm.send(any, 4, 1 - rank.rank, rank.s());
        rank.comm.recv(any, 4, 1 - rank.rank, rank.s());
        rank.comm.send_recv(any, 4, 1, any, 4, 0, rank.s());
        rank.comm.barrier();  // the world's own rendezvous, not the fallback's
        const std::vector<std::string> expected = {"all_reduce " + std::to_string(over) + " f32",
                                                   "all_gather " + std::to_string(kBuffer + 1),
                                                   "all_reduce 5 i32",
                                                   "all_reduce 5 i64",
                                                   "reduce_scatter 3",
                                                   "broadcast root 1",
                                                   "all_gatherv 1",
                                                   "send " + std::to_string(1 - rank.rank),
                                                   "recv " + std::to_string(1 - rank.rank),
                                                   "send_recv 1 0"};
        EXPECT_EQ(mock.calls, expected) << "rank " << rank.rank;
      },
      fallbacks);
}

void expect_error(const std::function<void()>& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one containing: " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PeerCommunicator, WithoutFallbackOtherOpsSayTheyNeedNccl) {
  const int n = 2;
  auto world = test_world(n);
  if (!world) GTEST_SKIP() << "needs 2 GPUs with peer access (ranks cannot share one GPU)";
  run_ranks(*world, [&](Rank& rank) {
    std::byte* p = rank.mem.alloc(256);
    void* s = rank.s();
    PeerCommunicator& comm = rank.comm;
    expect_error([&] { comm.reduce_scatter(p, p, 4, ReduceType::kF32, s); }, "reduce_scatter needs NCCL");
    expect_error([&] { comm.broadcast(p, 4, 0, s); }, "broadcast needs NCCL");
    GatherItem item;
    expect_error([&] { comm.all_gatherv({&item, 1}, s); }, "all_gatherv needs NCCL");
    expect_error([&] { comm.send(p, 4, 0, s); }, "send needs NCCL");
    expect_error([&] { comm.recv(p, 4, 0, s); }, "recv needs NCCL");
    expect_error([&] { comm.send_recv(p, 4, 0, p + 64, 4, 0, s); }, "send_recv needs NCCL");
    expect_error([&] { comm.all_reduce(p, p, 4, ReduceType::kI32, s); }, "all_reduce of i32 needs NCCL");
    // Argument errors throw before anything is enqueued (every rank makes the same bad call).
    expect_error([&] { comm.all_reduce(nullptr, p, 4, ReduceType::kF32, s); }, "send is null");
    expect_error([&] { comm.all_reduce(p, p + 4, 8, ReduceType::kF32, s); }, "overlap");
    expect_error([&] { comm.all_gather(p, nullptr, 4, s); }, "recv is null");
    // Empty messages launch nothing and leave recv alone.
    lockstep(rank, [&] {
      comm.all_reduce(p, p + 128, 0, ReduceType::kBF16, s);
      comm.all_gather(p, p + 128, 0, s);
    });
    EXPECT_EQ(rank.mem.download(p + 128, 128), std::vector<uint8_t>(128, 0xFF));
    // Still usable.
    std::vector<uint8_t> one(4);
    store_element(ReduceType::kF32, one.data(), 0, 1.5f);
    rank.mem.upload(p, one);
    lockstep(rank, [&] { comm.all_reduce(p, p, 1, ReduceType::kF32, s); });
    EXPECT_EQ(load_element(ReduceType::kF32, rank.mem.download(p, 4).data(), 0), 1.5f * n);
  });
}

TEST(PeerCommunicator, BadSetupThrows) {
  expect_error([] { PeerWorld world(std::vector<int>(kPeerMaxRanks + 1, 0)); }, "ranks");
  expect_error([] { PeerWorld world({0}, 1000); }, "multiple of 16");
  TACHYON_CUDA_CHECK(cudaSetDevice(0));
  // Construction only (no collective runs), so two ranks may name the same GPU here.
  auto world = std::make_unique<PeerWorld>(std::vector<int>{0, 0}, kBuffer, kHangTimeoutS);
  expect_error([&] { PeerCommunicator comm(*world, 2); }, "outside a world of 2");
  RecordingCommunicator wrong(1, 2);
  expect_error([&] { PeerCommunicator comm(*world, 0, &wrong); }, "the fallback is rank 1 of 2");
  EXPECT_TRUE(PeerWorld::supported({0, 0, 0}));
  EXPECT_FALSE(PeerWorld::supported({}));
  EXPECT_FALSE(PeerWorld::supported({-1}));
}

// --- several GPUs ----------------------------------------------------------------------------

// Real peer access over NVLink / PCIe: rank r on GPU r, when the machine has several.
TEST(PeerCommunicator, AcrossGpus) {
  const int count = cuda::cuda_device_count();
  if (count < 2) GTEST_SKIP() << "needs 2 GPUs with peer access";
  std::vector<int> devices;
  for (int d = 0; d < std::min(count, kPeerMaxRanks); ++d) devices.push_back(d);
  if (!PeerWorld::supported(devices)) GTEST_SKIP() << "these GPUs have no peer access";
  PeerWorld world(devices, kBuffer, kHangTimeoutS);
  check_all_reduce(world, awkward_cases(), 700);
}

}  // namespace
}  // namespace tachyon::dist
