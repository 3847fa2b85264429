// CountingCommunicator (dist/counting_communicator.h): every call reaches the inner CPU
// communicator unchanged (same results) and is counted once per kind with this rank's send bytes.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "tachyon/dist/counting_communicator.h"
#include "tachyon/dist/cpu_communicator.h"

namespace tachyon::dist {
namespace {

TEST(CountingCommunicator, ForwardsAndCountsEveryKind) {
  constexpr int kSize = 3;
  CpuWorld world(kSize);
  std::vector<CollectiveCounts> counts(kSize);
  std::vector<std::string> errors(kSize);
  std::vector<std::vector<float>> sums(kSize), gathered(kSize);
  std::vector<std::vector<int32_t>> exchanged(kSize);
  std::vector<std::thread> threads;
  for (int r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      try {
        CpuCommunicator inner(world, r);
        CountingCommunicator comm(inner);
        EXPECT_EQ(comm.rank(), r);
        EXPECT_EQ(comm.size(), kSize);
        std::vector<float> values = {1.0f * r, 2.0f};
        comm.all_reduce(values.data(), values.data(), 2, ReduceType::kF32, nullptr);
        sums[r] = values;
        // Uneven runs: rank r sends r + 1 floats.
        std::vector<float> mine(static_cast<size_t>(r + 1), static_cast<float>(r));
        const std::vector<size_t> run_bytes = {4, 8, 12};
        gathered[r].resize(6);
        const GatherItem items[] = {{mine.data(), mine.size() * 4, gathered[r].data(), run_bytes}};
        comm.all_gatherv(items, nullptr);
        // Rank r sends rank q the int 10 * r + q.
        std::vector<int32_t> out(kSize), in(kSize);
        for (int q = 0; q < kSize; ++q) out[q] = 10 * r + q;
        const std::vector<size_t> four(kSize, 4);
        const AllToAllItem exchange[] = {{out.data(), four, in.data(), four}};
        comm.all_to_all_v(exchange, nullptr);
        exchanged[r] = in;
        std::vector<float> all(kSize);
        const float one = 1.0f;
        comm.all_gather(&one, all.data(), 4, nullptr);
        comm.barrier();
        counts[r] = comm.counts();
        comm.reset();
        EXPECT_EQ(comm.counts().collectives(), 0);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kSize; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(errors[r], "");
    EXPECT_EQ(sums[r], (std::vector<float>{3.0f, 6.0f}));
    EXPECT_EQ(gathered[r], (std::vector<float>{0, 1, 1, 2, 2, 2}));
    EXPECT_EQ(exchanged[r], (std::vector<int32_t>{r, 10 + r, 20 + r}));
    const CollectiveCounts& c = counts[r];
    EXPECT_EQ(c.of(CollectiveKind::kAllReduce), 1);
    EXPECT_EQ(c.sent_of(CollectiveKind::kAllReduce), 8);
    EXPECT_EQ(c.received_of(CollectiveKind::kAllReduce), 8);
    EXPECT_EQ(c.of(CollectiveKind::kAllGatherv), 1);
    EXPECT_EQ(c.sent_of(CollectiveKind::kAllGatherv), 4 * (r + 1));
    EXPECT_EQ(c.received_of(CollectiveKind::kAllGatherv), 24);
    EXPECT_EQ(c.of(CollectiveKind::kAllToAllV), 1);
    EXPECT_EQ(c.sent_of(CollectiveKind::kAllToAllV), 12);
    EXPECT_EQ(c.received_of(CollectiveKind::kAllToAllV), 12);
    EXPECT_EQ(c.of(CollectiveKind::kAllGather), 1);
    EXPECT_EQ(c.received_of(CollectiveKind::kAllGather), 12);
    EXPECT_EQ(c.of(CollectiveKind::kBarrier), 1);
    EXPECT_EQ(c.of(CollectiveKind::kReduceScatter), 0);
    EXPECT_EQ(c.collectives(), 5);
    EXPECT_EQ(c.total_received(), 8 + 24 + 12 + 12);
  }
}

TEST(CountingCommunicator, PointToPointIsNotACollective) {
  CpuWorld world(2);
  std::vector<CollectiveCounts> counts(2);
  std::vector<int32_t> got(2, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CpuCommunicator inner(world, r);
      CountingCommunicator comm(inner);
      const int32_t mine = 7 + r;
      comm.send_recv(&mine, 4, 1 - r, &got[r], 4, 1 - r, nullptr);
      counts[r] = comm.counts();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(got, (std::vector<int32_t>{8, 7}));
  for (const CollectiveCounts& c : counts) {
    EXPECT_EQ(c.of(CollectiveKind::kSendRecv), 1);
    EXPECT_EQ(c.sent_of(CollectiveKind::kSendRecv), 4);
    EXPECT_EQ(c.received_of(CollectiveKind::kSendRecv), 4);
    EXPECT_EQ(c.collectives(), 0);
  }
  EXPECT_EQ(collective_kind_name(CollectiveKind::kAllGatherv), "all_gatherv");
}

}  // namespace
}  // namespace tachyon::dist
