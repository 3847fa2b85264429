// CpuCommunicator: every collective on 1, 2, 3, 4 and 8 thread ranks against a serial reference,
// bit-exact; the grouped all_gatherv with mixed dtypes and uneven (zero included) counts;
// 100-iteration loops that would catch barrier reuse bugs; argument errors that throw on every
// rank without a hang and leave the world usable.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tachyon/base/check.h"
#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/dist/cpu_process_groups.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::dist {
namespace {

const int kWorldSizes[] = {1, 2, 3, 4, 8};

// Runs fn(comm) on `n` threads, one CpuCommunicator each, and returns each rank's error
// message ("" when it returned normally).
std::vector<std::string> run_ranks(int n, const std::function<void(Communicator&)>& fn) {
  CpuWorld world(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CpuCommunicator comm(world, r);
      try {
        fn(comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

void run_ok(int n, const std::function<void(Communicator&)>& fn) {
  std::vector<std::string> errors = run_ranks(n, fn);
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " of " << n;
}

// inputs[r] = `count` random floats for rank r (seeded per rank, so reruns are identical).
std::vector<std::vector<float>> random_inputs(int n, size_t count, uint32_t seed) {
  std::vector<std::vector<float>> inputs(n);
  for (int r = 0; r < n; ++r) {
    std::mt19937 rng(seed * 1000 + r);
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    for (size_t i = 0; i < count; ++i) inputs[r].push_back(dist(rng));
  }
  return inputs;
}

// The serial reference: sum in rank order 0..n-1, in f32.
std::vector<float> serial_sum(const std::vector<std::vector<float>>& inputs) {
  std::vector<float> sum = inputs[0];
  for (size_t r = 1; r < inputs.size(); ++r)
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += inputs[r][i];
  return sum;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(CpuCommunicator, RankAndSize) {
  for (int n : kWorldSizes) {
    std::vector<int> seen(n, -1);
    run_ok(n, [&](Communicator& comm) {
      EXPECT_EQ(comm.size(), n);
      seen[comm.rank()] = comm.rank();
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(seen[r], r);
  }
}

TEST(CpuCommunicator, AllReduceF32IsTheRankOrderSum) {
  const size_t count = 37;
  for (int n : kWorldSizes) {
    auto inputs = random_inputs(n, count, 1);
    std::vector<float> expected = serial_sum(inputs);
    run_ok(n, [&](Communicator& comm) {
      std::vector<float> out(count);
      comm.all_reduce(inputs[comm.rank()].data(), out.data(), count, ReduceType::kF32, nullptr);
      EXPECT_TRUE(same_bits(out, expected)) << "out of place, rank " << comm.rank();
      std::vector<float> in_place = inputs[comm.rank()];
      comm.all_reduce(in_place.data(), in_place.data(), count, ReduceType::kF32, nullptr);
      EXPECT_TRUE(same_bits(in_place, expected)) << "in place, rank " << comm.rank();
    });
  }
}

TEST(CpuCommunicator, AllReduceBf16AndF16SumInF32ThenRound) {
  const size_t count = 29;
  for (int n : kWorldSizes) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      ReduceType type = dtype == DType::kBF16 ? ReduceType::kBF16 : ReduceType::kF16;
      auto floats = random_inputs(n, count, 2);
      std::vector<std::vector<uint16_t>> inputs(n, std::vector<uint16_t>(count));
      std::vector<std::vector<float>> rounded(n, std::vector<float>(count));
      for (int r = 0; r < n; ++r) {
        convert_from_f32(floats[r].data(), count, dtype, inputs[r].data());
        convert_to_f32(inputs[r].data(), dtype, count, rounded[r].data());
      }
      std::vector<float> sum = serial_sum(rounded);
      std::vector<uint16_t> expected(count);
      convert_from_f32(sum.data(), count, dtype, expected.data());
      run_ok(n, [&](Communicator& comm) {
        std::vector<uint16_t> data = inputs[comm.rank()];
        comm.all_reduce(data.data(), data.data(), count, type, nullptr);
        EXPECT_TRUE(same_bits(data, expected)) << dtype_name(dtype) << " rank " << comm.rank();
      });
    }
  }
}

TEST(CpuCommunicator, AllReduceIntsWrapAround) {
  for (int n : kWorldSizes) {
    run_ok(n, [&](Communicator& comm) {
      int r = comm.rank();
      std::vector<int32_t> a = {r, -3 * r, INT32_MAX};
      comm.all_reduce(a.data(), a.data(), a.size(), ReduceType::kI32, nullptr);
      int32_t ranks = n * (n - 1) / 2;
      EXPECT_EQ(a[0], ranks);
      EXPECT_EQ(a[1], -3 * ranks);
      EXPECT_EQ(a[2], int32_t(uint32_t(INT32_MAX) * uint32_t(n)));
      std::vector<int64_t> b = {int64_t(r) << 40, -int64_t(r)};
      comm.all_reduce(b.data(), b.data(), b.size(), ReduceType::kI64, nullptr);
      EXPECT_EQ(b[0], int64_t(ranks) << 40);
      EXPECT_EQ(b[1], -int64_t(ranks));
    });
  }
}

TEST(CpuCommunicator, AllGatherInRankOrder) {
  const size_t bytes = 13;
  for (int n : kWorldSizes) {
    std::vector<uint8_t> expected(n * bytes);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] = uint8_t(i * 7 + 1);
    run_ok(n, [&](Communicator& comm) {
      int r = comm.rank();
      std::vector<uint8_t> send(expected.begin() + r * bytes, expected.begin() + (r + 1) * bytes);
      std::vector<uint8_t> out(n * bytes);
      comm.all_gather(send.data(), out.data(), bytes, nullptr);
      EXPECT_EQ(out, expected) << "out of place, rank " << r;
      std::vector<uint8_t> in_place(n * bytes, 0);
      std::memcpy(in_place.data() + r * bytes, send.data(), bytes);
      comm.all_gather(in_place.data() + r * bytes, in_place.data(), bytes, nullptr);
      EXPECT_EQ(in_place, expected) << "in place, rank " << r;
    });
  }
}

TEST(CpuCommunicator, ReduceScatterGivesEachRankItsBlockOfTheSum) {
  const size_t count = 5;
  for (int n : kWorldSizes) {
    auto inputs = random_inputs(n, n * count, 3);
    std::vector<float> sum = serial_sum(inputs);
    run_ok(n, [&](Communicator& comm) {
      int r = comm.rank();
      std::vector<float> expected(sum.begin() + r * count, sum.begin() + (r + 1) * count);
      std::vector<float> out(count);
      comm.reduce_scatter(inputs[r].data(), out.data(), count, ReduceType::kF32, nullptr);
      EXPECT_TRUE(same_bits(out, expected)) << "out of place, rank " << r;
      std::vector<float> in_place = inputs[r];
      comm.reduce_scatter(in_place.data(), in_place.data() + r * count, count, ReduceType::kF32, nullptr);
      std::vector<float> block(in_place.begin() + r * count, in_place.begin() + (r + 1) * count);
      EXPECT_TRUE(same_bits(block, expected)) << "in place, rank " << r;
    });
  }
}

TEST(CpuCommunicator, BroadcastFromEveryRoot) {
  for (int n : kWorldSizes) {
    for (int root = 0; root < n; ++root) {
      run_ok(n, [&](Communicator& comm) {
        std::vector<int32_t> data(11, comm.rank() == root ? 0 : -1);
        if (comm.rank() == root)
          for (int i = 0; i < 11; ++i) data[i] = root * 100 + i;
        comm.broadcast(data.data(), data.size() * sizeof(int32_t), root, nullptr);
        for (int i = 0; i < 11; ++i) EXPECT_EQ(data[i], root * 100 + i) << "rank " << comm.rank();
      });
    }
  }
}

TEST(CpuCommunicator, SendRecvRing) {
  for (int n : kWorldSizes) {
    run_ok(n, [&](Communicator& comm) {
      int r = comm.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
      // One ring step with send_recv, then a full rotation: after n steps every block returns.
      std::vector<int32_t> block = {r, r * 10, r * 100}, got(3);
      for (int step = 1; step <= n; ++step) {
        comm.send_recv(block.data(), 12, next, got.data(), 12, prev, nullptr);
        int from = (r - step % n + n) % n;
        EXPECT_EQ(got, (std::vector<int32_t>{from, from * 10, from * 100})) << "rank " << r << " step " << step;
        block = got;
      }
      // Lone send then recv around the ring: the CPU backend's sends never wait for the receiver.
      int64_t out = 1000 + r, in = -1;
      comm.send(&out, sizeof(out), next, nullptr);
      comm.recv(&in, sizeof(in), prev, nullptr);
      EXPECT_EQ(in, 1000 + prev);
    });
  }
}

TEST(CpuCommunicator, SendRecvPairwiseAndAllToAll) {
  for (int n : kWorldSizes) {
    run_ok(n, [&](Communicator& comm) {
      int r = comm.rank();
      // Pairs (0,1), (2,3), ...: the lower rank sends first, so the pattern is NCCL-portable.
      int partner = r ^ 1;
      if (partner < n) {
        double mine = r + 0.5, theirs = -1;
        if (r < partner) {
          comm.send(&mine, sizeof(mine), partner, nullptr);
          comm.recv(&theirs, sizeof(theirs), partner, nullptr);
        } else {
          comm.recv(&theirs, sizeof(theirs), partner, nullptr);
          comm.send(&mine, sizeof(mine), partner, nullptr);
        }
        EXPECT_EQ(theirs, partner + 0.5);
      }
      // Every rank to every rank (itself included), three ordered messages each, sizes vary.
      for (int peer = 0; peer < n; ++peer)
        for (int k = 0; k < 3; ++k) {
          std::vector<int32_t> msg(k + 1, r * 1000 + peer * 10 + k);
          comm.send(msg.data(), msg.size() * 4, peer, nullptr);
        }
      for (int peer = 0; peer < n; ++peer)
        for (int k = 0; k < 3; ++k) {
          std::vector<int32_t> msg(k + 1, -1);
          comm.recv(msg.data(), msg.size() * 4, peer, nullptr);
          EXPECT_EQ(msg, std::vector<int32_t>(k + 1, peer * 1000 + r * 10 + k));
        }
    });
  }
}

TEST(CpuCommunicator, BarrierHoldsEveryRankUntilAllArrive) {
  for (int n : kWorldSizes) {
    std::atomic<int> arrived{0};
    run_ok(n, [&](Communicator& comm) {
      for (int it = 0; it < 100; ++it) {
        arrived.fetch_add(1);
        comm.barrier();
        EXPECT_EQ(arrived.load(), n * (it + 1)) << "iteration " << it;
        comm.barrier();  // nobody starts the next iteration before every rank has checked
      }
    });
  }
}

// Per-rank contributions of the grouped gather: 3 items of mixed types with uneven counts,
// zeros included (item sizes depend on rank and iteration so stale state would show).
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

void check_all_gatherv(Communicator& comm, const GathervCase& c, bool in_place) {
  int r = comm.rank();
  std::vector<std::vector<uint8_t>> out(3);
  std::vector<GatherItem> items(3);
  for (int i = 0; i < 3; ++i) {
    out[i].assign(c.expected[i].size(), 0xEE);
    items[i] = {.send = c.send[r][i].data(),
                .send_bytes = c.send[r][i].size(),
                .recv = out[i].data(),
                .recv_counts = c.counts[i]};
    if (in_place) {
      std::byte* own = static_cast<std::byte*>(items[i].recv) + gather_offset(items[i], r);
      if (!c.send[r][i].empty()) std::memcpy(own, c.send[r][i].data(), c.send[r][i].size());
      items[i].send = own;
    }
  }
  comm.all_gatherv(items, nullptr);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], c.expected[i]) << "item " << i << " rank " << r;
}

TEST(CpuCommunicator, AllGathervMovesMixedItemsInOneCall) {
  for (int n : kWorldSizes) {
    GathervCase c(n, 0);
    run_ok(n, [&](Communicator& comm) {
      check_all_gatherv(comm, c, false);
      check_all_gatherv(comm, c, true);
    });
  }
}

TEST(CpuCommunicator, AllGathervWithNoItemsOrOnlyZeroBytes) {
  for (int n : kWorldSizes) {
    run_ok(n, [&](Communicator& comm) {
      comm.all_gatherv({}, nullptr);
      std::vector<size_t> zeros(n, 0);
      GatherItem item{.send = nullptr, .send_bytes = 0, .recv = nullptr, .recv_counts = zeros};
      comm.all_gatherv({&item, 1}, nullptr);
    });
  }
}

TEST(CpuCommunicator, HundredIterationsOfMixedCollectives) {
  for (int n : kWorldSizes) {
    std::vector<GathervCase> cases;
    for (int it = 0; it < 100; ++it) cases.emplace_back(n, it);
    run_ok(n, [&](Communicator& comm) {
      int r = comm.rank();
      for (int it = 0; it < 100; ++it) {
        size_t count = 1 + it % 9;  // sizes change every iteration
        std::vector<float> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = float(r * 3 + it + i);
        comm.all_reduce(data.data(), data.data(), count, ReduceType::kF32, nullptr);
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(data[i], float(3 * n * (n - 1) / 2 + n * (it + i))) << it;
        check_all_gatherv(comm, cases[it], it % 2 == 1);
        int32_t value = r == it % n ? it : -1;
        comm.broadcast(&value, sizeof(value), it % n, nullptr);
        ASSERT_EQ(value, it);
        int32_t token = it * 10 + r, got = -1;
        comm.send_recv(&token, 4, (r + 1) % n, &got, 4, (r + n - 1) % n, nullptr);
        ASSERT_EQ(got, it * 10 + (r + n - 1) % n);
      }
    });
  }
}

// Every rank's error names itself and the cause.
void expect_all_throw(const std::vector<std::string>& errors, const std::string& cause) {
  int n = int(errors.size());
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(errors[r].find("rank " + std::to_string(r) + " of " + std::to_string(n)), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find(cause), std::string::npos) << errors[r];
  }
}

TEST(CpuCommunicator, MismatchedArgumentsThrowOnEveryRankAndTheWorldStaysUsable) {
  for (int n : {2, 3, 8}) {
    std::vector<std::string> errors = run_ranks(n, [&](Communicator& comm) {
      int r = comm.rank();
      std::vector<float> data(8, 1.0f);
      auto retry = [&] {  // after an error the same world still works
        std::vector<float> ok(3, 1.0f);
        comm.all_reduce(ok.data(), ok.data(), 3, ReduceType::kF32, nullptr);
        EXPECT_EQ(ok[2], float(n));
      };
      size_t count = r == n - 1 ? 7 : 8;
      EXPECT_THROW(comm.all_reduce(data.data(), data.data(), count, ReduceType::kF32, nullptr), Error);
      retry();
      ReduceType type = r == 1 ? ReduceType::kBF16 : ReduceType::kF32;
      EXPECT_THROW(comm.reduce_scatter(data.data(), data.data(), 1, type, nullptr), Error);
      retry();
      EXPECT_THROW(comm.all_gather(data.data(), data.data() + 4, r == 0 ? 4 : 8, nullptr), Error);
      retry();
      std::vector<size_t> counts(n, 0);
      counts[0] = r == 1 ? 4 : 0;  // rank 1 disagrees about rank 0's contribution
      GatherItem item{.send = r == 0 ? data.data() : nullptr,
                      .send_bytes = counts[r],
                      .recv = data.data() + 4,
                      .recv_counts = counts};
      EXPECT_THROW(comm.all_gatherv({&item, 1}, nullptr), Error);
      retry();
      // Different ops on different ranks.
      if (r == 0)
        EXPECT_THROW(comm.barrier(), Error);
      else
        EXPECT_THROW(comm.broadcast(data.data(), 4, 0, nullptr), Error);
      retry();
      // The last throw is what run_ranks reports.
      comm.all_reduce(data.data(), data.data(), r == 0 ? 8 : 4, ReduceType::kF32, nullptr);
    });
    expect_all_throw(errors, "all_reduce: rank 1 passed 4 f32 elements, rank 0 passed 8 f32");
  }
}

TEST(CpuCommunicator, BadRootOnOneRankThrowsOnEveryRank) {
  std::vector<std::string> errors = run_ranks(4, [](Communicator& comm) {
    int32_t value = 0;
    comm.broadcast(&value, 4, comm.rank() == 2 ? 4 : 0, nullptr);
  });
  expect_all_throw(errors, "broadcast: rank 2: root 4 is outside [0, 4)");
}

TEST(CpuCommunicator, BadAliasingThrowsOnEveryRank) {
  std::vector<std::string> errors = run_ranks(3, [](Communicator& comm) {
    std::vector<float> data(8, 1.0f);
    comm.all_reduce(data.data(), data.data() + 1, 4, ReduceType::kF32, nullptr);
  });
  expect_all_throw(errors, "overlap");
}

TEST(CpuCommunicator, BadPeerAndSizeMismatchThrowClearly) {
  std::vector<std::string> errors = run_ranks(2, [](Communicator& comm) {
    int32_t value = 0;
    comm.send(&value, 4, 2, nullptr);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("rank " + std::to_string(r) + " of 2: send: peer 2 is outside [0, 2)"), std::string::npos)
        << errors[r];
  }
  errors = run_ranks(2, [](Communicator& comm) { comm.recv(nullptr, 0, -1, nullptr); });
  EXPECT_NE(errors[1].find("rank 1 of 2: recv: peer -1 is outside"), std::string::npos) << errors[1];
  errors = run_ranks(2, [](Communicator& comm) {
    int64_t value = 7;
    if (comm.rank() == 0)
      comm.send(&value, 8, 1, nullptr);
    else
      comm.recv(&value, 4, 0, nullptr);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("rank 1 of 2: recv: expected 4 bytes from rank 0, the matching send carried 8"),
            std::string::npos)
      << errors[1];
}

TEST(CpuCommunicator, WorldAndRankAreChecked) {
  EXPECT_THROW(CpuWorld(0), Error);
  CpuWorld world(2);
  EXPECT_THROW(CpuCommunicator(world, 2), Error);
  EXPECT_THROW(CpuCommunicator(world, -1), Error);
}

// A rank that fails outside a collective aborts the world: the peers waiting for it in a
// collective or a recv (or arriving later) throw GroupAborted naming it, instead of waiting for
// ever (the ctest timeout would catch a hang), and every later call on the world throws too.
TEST(CpuCommunicator, AbortWakesEveryRankWaitingForTheFailedOne) {
  for (int n : {2, 4}) {
    CpuWorld world(n);
    std::vector<std::string> first(n), later(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        CpuCommunicator comm(world, r);
        std::vector<float> data(4, 1.0f);
        comm.all_reduce(data.data(), data.data(), 4, ReduceType::kF32, nullptr);  // a round that completes
        try {
          if (r == n - 1) {
            world.abort("rank " + std::to_string(r) + " failed: out of blocks");  // never joins the next call
            return;
          }
          if (r == 0 && n > 2) {
            comm.recv(data.data(), 4, n - 1, nullptr);  // a message that never comes
          } else {
            comm.all_reduce(data.data(), data.data(), 4, ReduceType::kF32, nullptr);
          }
        } catch (const GroupAborted& e) {
          first[r] = e.what();
        }
        try {
          comm.barrier();
        } catch (const GroupAborted& e) {
          later[r] = e.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    const std::string cause = "the group was aborted: rank " + std::to_string(n - 1) + " failed: out of blocks";
    for (int r = 0; r < n - 1; ++r) {
      const std::string call = r == 0 && n > 2 ? "recv" : "all_reduce";
      EXPECT_NE(first[r].find("rank " + std::to_string(r) + " of " + std::to_string(n) + ": " + call + ": " + cause),
                std::string::npos)
          << first[r];
      EXPECT_NE(later[r].find("barrier: " + cause), std::string::npos) << later[r];
    }
    EXPECT_EQ(world.abort_reason(), "rank " + std::to_string(n - 1) + " failed: out of blocks");
    world.abort("a second reason");  // the first one stays
    EXPECT_EQ(world.abort_reason(), "rank " + std::to_string(n - 1) + " failed: out of blocks");
  }
}

// Each rank's communicators reach exactly the members that RankLayout lists, in group-rank order.
TEST(CpuProcessGroups, EveryGroupGathersItsMembersInOrder) {
  for (ParallelConfig config : {ParallelConfig{.dp = 2, .tp = 2, .ep = 4}, ParallelConfig{.tp = 4, .dcp = 2, .ep = 2},
                                ParallelConfig{.dp = 2, .tp = 2, .pcp = 2, .dcp = 2, .ep = 2}}) {
    CpuProcessGroups factory(config);
    const RankLayout& layout = factory.layout();
    int n = layout.world_size();
    std::vector<ProcessGroups> groups;
    for (int rank = 0; rank < n; ++rank) groups.push_back(factory.make(rank));
    std::vector<std::string> errors(n);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < n; ++rank) {
      threads.emplace_back([&, rank] {
        try {
          const ProcessGroups& mine = groups[rank];
          EXPECT_EQ(mine.coord, layout.coord(rank));
          for (GroupKind kind : kGroupKinds) {
            std::vector<int> members = layout.group(kind, rank);
            Communicator& comm = mine.get(kind);
            ASSERT_EQ(comm.size(), int(members.size())) << group_kind_name(kind);
            EXPECT_EQ(members[comm.rank()], rank) << group_kind_name(kind);
            std::vector<int32_t> gathered(comm.size(), -1);
            int32_t me = rank;
            comm.all_gather(&me, gathered.data(), sizeof(me), nullptr);
            EXPECT_EQ(gathered, members) << group_kind_name(kind) << " rank " << rank;
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

// abort() reaches every group of every rank: a failed rank's peers may wait in any of them.
TEST(CpuProcessGroups, AbortReachesEveryGroup) {
  CpuProcessGroups factory(ParallelConfig{.dp = 2, .tp = 2, .ep = 4});
  std::vector<ProcessGroups> groups;
  for (int rank = 0; rank < 4; ++rank) groups.push_back(factory.make(rank));
  factory.abort("rank 2 of 4 failed: boom");
  for (int rank = 0; rank < 4; ++rank) {
    for (GroupKind kind : kGroupKinds) {
      try {
        groups[rank].get(kind).barrier();  // a one-rank group's barrier would pass: it is aborted too
        ADD_FAILURE() << group_kind_name(kind) << " rank " << rank << " did not throw";
      } catch (const GroupAborted& e) {
        EXPECT_NE(std::string(e.what()).find("aborted: rank 2 of 4 failed: boom"), std::string::npos) << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace tachyon::dist
