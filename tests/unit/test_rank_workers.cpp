// RankWorkers: every rank runs each task once, on its own fixed thread, and errors come back;
// a rank that fails outside a collective wakes its peers waiting in one (through on_failure), so
// run() returns with that rank's error instead of hanging (the ctest timeout is the guard).
#include "tachyon/runner/rank_workers.h"

#include <atomic>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tachyon/base/check.h"
#include "tachyon/dist/cpu_communicator.h"

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

// Rank `failing` throws before the all_reduce its peers wait in, on every world size: run()
// returns, rethrowing that rank's own error (the cause, not a peer's GroupAborted), and every peer
// got GroupAborted naming it. The world is dead afterwards: the next run fails on every rank alike.
TEST(RankWorkers, ARankThatFailsOutsideACollectiveWakesItsPeers) {
  for (int n : {2, 3, 4}) {
    const int failing = n - 2;
    dist::CpuWorld world(n);
    RankWorkers workers(n, [&](const std::string& reason) { world.abort(reason); });
    std::vector<std::unique_ptr<dist::CpuCommunicator>> comms;
    for (int r = 0; r < n; ++r) comms.push_back(std::make_unique<dist::CpuCommunicator>(world, r));
    std::vector<std::string> errors(static_cast<size_t>(n));
    auto step = [&](int r) {
      try {
        if (r == failing) throw std::runtime_error("slot 97 is outside the cache");
        float value = 1.0f;
        comms[static_cast<size_t>(r)]->all_reduce(&value, &value, 1, dist::ReduceType::kF32, nullptr);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
        throw;
      }
    };
    try {
      workers.run(step);
      ADD_FAILURE() << "run() returned normally";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "slot 97 is outside the cache");
    }
    const std::string cause = "the group was aborted: rank " + std::to_string(failing) + " of " + std::to_string(n) +
                              " failed: slot 97 is outside the cache";
    for (int r = 0; r < n; ++r) {
      if (r == failing) continue;
      EXPECT_NE(errors[static_cast<size_t>(r)].find("all_reduce: " + cause), std::string::npos)
          << "rank " << r << ": " << errors[static_cast<size_t>(r)];
    }
    EXPECT_THROW(workers.run([&](int r) { comms[static_cast<size_t>(r)]->barrier(); }), dist::GroupAborted);
  }
}

// The test hook: the rank fails in the next run only, without running its task; the others run it.
TEST(RankWorkers, AFailureInjectedByATestHitsOneRankOfOneRun) {
  RankWorkers workers(3);
  std::atomic<int> calls{0};
  workers.fail_next_run_for_test(1);
  try {
    workers.run([&](int r) {
      EXPECT_NE(r, 1);
      ++calls;
    });
    ADD_FAILURE() << "run() returned normally";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1: a failure injected by a test"), std::string::npos) << e.what();
  }
  EXPECT_EQ(calls.load(), 2);
  workers.run([&](int) { ++calls; });
  EXPECT_EQ(calls.load(), 5);
}

}  // namespace
}  // namespace tachyon::runner
