// CpuCommunicator::all_to_all_v: every rank sends each peer a run of its own length (zero
// included) and receives the peers' runs in rank order, on 2, 3, 4 and 6 thread ranks (a
// 6-rank group must not misbehave: a seed's 6-rank gather once did), several items of mixed
// dtypes in one call, and counts that disagree between a sender and its receiver throwing the
// same error on every rank without a hang.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tachyon/dist/cpu_communicator.h"

namespace tachyon::dist {
namespace {

const int kA2aGroupSizes[] = {1, 2, 3, 4, 6};

std::vector<std::string> run_a2a_ranks(int n, const std::function<void(Communicator&)>& fn) {
  CpuWorld world(n);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CpuCommunicator comm(world, r);
      try {
        fn(comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

// How many int32 values rank `src` sends rank `dst`: uneven, and zero for some pairs (every
// third pair, a rank's message to itself included when src + dst is a multiple of 3).
size_t values_sent(int src, int dst) { return (src + dst) % 3 == 0 ? 0 : static_cast<size_t>(1 + 2 * src + dst); }

// The i-th value rank `src` sends rank `dst`: names both ends, so a run at the wrong offset shows.
int32_t a2a_value(int src, int dst, size_t i) { return src * 10000 + dst * 100 + static_cast<int32_t>(i); }

// Rank `me`'s item: counts in bytes of int32 values, the send buffer filled by a2a_value().
struct RankExchange {
  std::vector<size_t> send_counts, recv_counts;  // [n] bytes
  std::vector<int32_t> send, recv;
};

RankExchange make_exchange(int me, int n) {
  RankExchange x;
  for (int r = 0; r < n; ++r) {
    x.send_counts.push_back(values_sent(me, r) * sizeof(int32_t));
    x.recv_counts.push_back(values_sent(r, me) * sizeof(int32_t));
    for (size_t i = 0; i < values_sent(me, r); ++i) x.send.push_back(a2a_value(me, r, i));
  }
  size_t incoming = 0;
  for (int r = 0; r < n; ++r) incoming += values_sent(r, me);
  x.recv.assign(incoming, -1);
  return x;
}

std::vector<int32_t> expected_recv(int me, int n) {
  std::vector<int32_t> expected;
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < values_sent(r, me); ++i) expected.push_back(a2a_value(r, me, i));
  return expected;
}

TEST(AllToAllV, UnevenAndZeroCountsLandInRankOrder) {
  for (int n : kA2aGroupSizes) {
    std::vector<std::vector<int32_t>> got(static_cast<size_t>(n));
    std::vector<std::string> errors = run_a2a_ranks(n, [&](Communicator& comm) {
      RankExchange x = make_exchange(comm.rank(), n);
      const AllToAllItem item{x.send.data(), x.send_counts, x.recv.data(), x.recv_counts};
      comm.all_to_all_v({&item, 1}, nullptr);
      got[static_cast<size_t>(comm.rank())] = x.recv;
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r << " of " << n;
      EXPECT_EQ(got[static_cast<size_t>(r)], expected_recv(r, n)) << "rank " << r << " of " << n;
    }
  }
}

// Two items in one call, f32 rows and int32 ids, the second with other counts than the first:
// each item is exchanged by its own counts. Run 50 times to catch a barrier reused too early.
TEST(AllToAllV, SeveralItemsOfMixedDtypesInOneCall) {
  for (int n : {2, 3, 6}) {
    std::vector<std::string> errors = run_a2a_ranks(n, [&](Communicator& comm) {
      const int me = comm.rank();
      for (int iteration = 0; iteration < 50; ++iteration) {
        RankExchange ids = make_exchange(me, n);
        std::vector<size_t> row_send_counts, row_recv_counts;  // 3 floats per id sent back the other way round
        std::vector<float> rows;
        for (int r = 0; r < n; ++r) {
          row_send_counts.push_back(values_sent(r, me) * 3 * sizeof(float));
          row_recv_counts.push_back(values_sent(me, r) * 3 * sizeof(float));
          for (size_t i = 0; i < 3 * values_sent(r, me); ++i)
            rows.push_back(0.5f * static_cast<float>(me + iteration) + static_cast<float>(i));
        }
        size_t rows_in_count = 0;
        for (int r = 0; r < n; ++r) rows_in_count += 3 * values_sent(me, r);
        std::vector<float> rows_in(rows_in_count, -1.0f);
        const AllToAllItem items[] = {{ids.send.data(), ids.send_counts, ids.recv.data(), ids.recv_counts},
                                      {rows.data(), row_send_counts, rows_in.data(), row_recv_counts}};
        comm.all_to_all_v(items, nullptr);
        // EXPECT, not ASSERT: a rank leaving the loop early would leave its peers waiting.
        EXPECT_EQ(ids.recv, expected_recv(me, n)) << "rank " << me << " of " << n << ", iteration " << iteration;
        std::vector<float> expected_rows;
        for (int r = 0; r < n; ++r) {
          for (size_t i = 0; i < 3 * values_sent(me, r); ++i)
            expected_rows.push_back(0.5f * static_cast<float>(r + iteration) + static_cast<float>(i));
        }
        EXPECT_EQ(rows_in, expected_rows) << "rank " << me << " of " << n << ", iteration " << iteration;
      }
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r << " of " << n;
  }
}

TEST(AllToAllV, NoItemsAndAllZeroCounts) {
  for (int n : kA2aGroupSizes) {
    std::vector<std::string> errors = run_a2a_ranks(n, [&](Communicator& comm) {
      comm.all_to_all_v({}, nullptr);
      const std::vector<size_t> zeros(static_cast<size_t>(n), 0);
      const AllToAllItem item{nullptr, zeros, nullptr, zeros};
      comm.all_to_all_v({&item, 1}, nullptr);
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r << " of " << n;
  }
}

// Rank 1 expects one int more from rank 0 than rank 0 sends it: every rank throws the same
// message naming both, and the world serves the next call.
TEST(AllToAllV, CountsThatDisagreeThrowOnEveryRankAndTheWorldStaysUsable) {
  const int n = 3;
  std::vector<std::string> after(static_cast<size_t>(n));
  std::vector<std::string> errors = run_a2a_ranks(n, [&](Communicator& comm) {
    RankExchange x = make_exchange(comm.rank(), n);
    if (comm.rank() == 1) {
      x.recv_counts[0] += sizeof(int32_t);
      x.recv.push_back(-1);
    }
    const AllToAllItem item{x.send.data(), x.send_counts, x.recv.data(), x.recv_counts};
    try {
      comm.all_to_all_v({&item, 1}, nullptr);
    } catch (const std::exception& e) {
      after[static_cast<size_t>(comm.rank())] = e.what();
    }
    RankExchange good = make_exchange(comm.rank(), n);
    const AllToAllItem retry{good.send.data(), good.send_counts, good.recv.data(), good.recv_counts};
    comm.all_to_all_v({&retry, 1}, nullptr);
    EXPECT_EQ(good.recv, expected_recv(comm.rank(), n));
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    const std::string& error = after[static_cast<size_t>(r)];
    EXPECT_NE(error.find("rank 1 expects"), std::string::npos) << error;
    EXPECT_NE(error.find("all_to_all_v"), std::string::npos) << error;
  }
}

TEST(AllToAllV, OverlappingBuffersAreRefusedOnEveryRank) {
  const int n = 2;
  std::vector<std::string> errors = run_a2a_ranks(n, [&](Communicator& comm) {
    std::vector<int32_t> buffer(8, 0);
    const std::vector<size_t> counts(2, 2 * sizeof(int32_t));
    const AllToAllItem item{buffer.data(), counts, comm.rank() == 0 ? buffer.data() + 2 : buffer.data() + 4, counts};
    comm.all_to_all_v({&item, 1}, nullptr);
  });
  for (const std::string& error : errors) EXPECT_NE(error.find("overlap"), std::string::npos) << error;
}

}  // namespace
}  // namespace tachyon::dist
