// RankWorkers: every rank runs each task once, on its own fixed thread, and errors come back.
#include "tachyon/runner/rank_workers.h"

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

namespace tachyon::runner {
namespace {

TEST(RankWorkers, EveryRankRunsEachTaskOnItsOwnThread) {
  RankWorkers workers(4);
  std::vector<std::thread::id> first(4), second(4);
  std::atomic<int> calls{0};
  workers.run([&](int r) {
    first[static_cast<size_t>(r)] = std::this_thread::get_id();
    ++calls;
  });
  workers.run([&](int r) {
    second[static_cast<size_t>(r)] = std::this_thread::get_id();
    ++calls;
  });
  EXPECT_EQ(calls.load(), 8);
  EXPECT_EQ(first, second);  // rank r stays on one thread
  EXPECT_EQ(std::set<std::thread::id>(first.begin(), first.end()).size(), 4u);
  EXPECT_EQ(first[0] == std::this_thread::get_id(), false);
}

TEST(RankWorkers, RanksRunConcurrently) {
  // Each rank waits for all the others: this finishes only if they run at the same time.
  RankWorkers workers(3);
  std::atomic<int> arrived{0};
  workers.run([&](int) {
    ++arrived;
    while (arrived.load() < 3) std::this_thread::yield();
  });
  EXPECT_EQ(arrived.load(), 3);
}

TEST(RankWorkers, AWorkerExceptionIsRethrownAndTheWorkersStayUsable) {
  RankWorkers workers(2);
  EXPECT_THROW(workers.run([](int r) {
    if (r == 1) throw std::runtime_error("rank 1 failed");
  }),
               std::runtime_error);
  std::atomic<int> calls{0};
  workers.run([&](int) { ++calls; });  // the error of the previous run does not linger
  EXPECT_EQ(calls.load(), 2);
}

}  // namespace
}  // namespace tachyon::runner
