// Two-batch overlap's ordering machinery, without a model (runner/tbo_*.h):
//   checker  hand-written traces: ordered accesses pass; a read of the comm stream's output with
//            no wait, a write over a buffer the other stream still reads, a wait on an event never
//            recorded each fail, naming the accesses;
//   helper   two CPU thread ranks, two micro-batches each making three all-reduces through the
//            comm-phase helper: the sums are right and the trace is ordered; the two mutations the
//            checker exists for fail the step: micro-batch 1 skips one wait (TboHooks::
//            drop_wait_phase), and micro-batch 1 reuses micro-batch 0's buffers while its
//            collective may still run (TboHooks::share_arena: the seed's bug, a comm output
//            handed to the other micro-batch too early); and the trace shows the overlap: each
//            micro-batch stages its phase before the other reads the outputs of its own;
//   split    a step is cut by whole sequences, contiguous, tokens balanced, re-indexed from 0.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <thread>
#include <vector>

#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/runner/tbo_comm_phase.h"
#include "tachyon/runner/tbo_communicator.h"
#include "tachyon/runner/tbo_order.h"
#include "tachyon/runner/tbo_split.h"

namespace tachyon::runner {
namespace {

constexpr TboStreamKind kCompute = TboStreamKind::kCompute;
constexpr TboStreamKind kComm = TboStreamKind::kComm;

TboOp access(TboStreamKind stream, TboAccess kind, int buffer, const char* what) {
  return {stream, kind, buffer, -1, what};
}
TboOp event(TboStreamKind stream, TboAccess kind, int id, const char* what) { return {stream, kind, -1, id, what}; }

// One comm phase as the helper records it, with or without the compute stream's wait.
std::vector<TboOp> phase(bool wait_done) {
  std::vector<TboOp> ops = {access(kCompute, TboAccess::kWrite, 0, "stage"),
                            event(kCompute, TboAccess::kRecord, 0, "staged"),
                            event(kComm, TboAccess::kWait, 0, "wait staged"),
                            access(kComm, TboAccess::kRead, 0, "send"),
                            access(kComm, TboAccess::kWrite, 1, "receive"),
                            event(kComm, TboAccess::kRecord, 1, "done")};
  if (wait_done) ops.push_back(event(kCompute, TboAccess::kWait, 1, "wait done"));
  ops.push_back(access(kCompute, TboAccess::kRead, 1, "read outputs"));
  return ops;
}

TEST(TboOrder, OrderedPhasePasses) { EXPECT_EQ(check_happens_before(phase(true)), ""); }

TEST(TboOrder, ReadingTheOutputsWithoutTheWaitFails) {
  const std::string why = check_happens_before(phase(false));
  EXPECT_NE(why.find("buffer 1: the compute stream's read (read outputs) is not ordered after the comm stream's "
                     "write (receive)"),
            std::string::npos)
      << why;
}

TEST(TboOrder, TheVerdictDoesNotDependOnWhichStreamLoggedFirst) {
  // The comm thread may log its write after the compute stream's unwaited read.
  std::vector<TboOp> ops = phase(false);
  std::swap(ops[4], ops[6]);  // read outputs before receive
  std::swap(ops[5], ops[6]);
  EXPECT_NE(check_happens_before(ops), "");
}

TEST(TboOrder, OverwritingABufferTheCommStreamMayStillReadFails) {
  // The compute stream stages the next phase's inputs into buffer 0 before waiting on `done`.
  std::vector<TboOp> ops = {access(kCompute, TboAccess::kWrite, 0, "stage A"),
                            event(kCompute, TboAccess::kRecord, 0, "staged"),
                            event(kComm, TboAccess::kWait, 0, "wait staged"),
                            access(kComm, TboAccess::kRead, 0, "send A"),
                            access(kCompute, TboAccess::kWrite, 0, "stage B")};
  const std::string why = check_happens_before(ops);
  EXPECT_NE(why.find("the compute stream's write (stage B) is not ordered after the comm stream's read (send A)"),
            std::string::npos)
      << why;
  // Reads on both streams never conflict.
  EXPECT_EQ(check_happens_before(std::vector<TboOp>{access(kComm, TboAccess::kRead, 3, "a"),
                                                    access(kCompute, TboAccess::kRead, 3, "b")}),
            "");
}

TEST(TboOrder, WaitingOnAnUnrecordedEventFails) {
  const std::string why = check_happens_before(std::vector<TboOp>{event(kCompute, TboAccess::kWait, 7, "x")});
  EXPECT_NE(why.find("waits on event 7 before any stream records it"), std::string::npos) << why;
}

// ---------------------------------------------------------------------------------------------
// The helper on two CPU thread ranks.

constexpr int kRanks = 2, kValues = 16, kPhases = 3;

struct RankRun {
  std::array<std::vector<float>, 2> values;  // [mb] after the phases
  std::string violation;
  std::vector<TboOp> ops;  // the rank's trace
};

// Micro-batch mb of rank r starts from r + 10 mb + i, then kPhases times: all-reduce, halve.
RankRun run_rank(dist::CpuWorld& world, int rank, TboHooks hooks) {
  dist::CpuCommunicator comm(world, rank);
  TboArena arena0(1024, 0), arena1(1024, 2);
  TboTrace trace;
  TboComputeStream compute;
  RankRun run;
  {
    TboCommStream stream;
    TboCommPhases phases(comm, compute, stream, trace, {&arena0, &arena1}, hooks);
    auto micro_batch = [&](int mb) {
      compute.enter(mb);
      TboCommunicator group(phases, mb);
      std::vector<float> v(kValues);
      for (int i = 0; i < kValues; ++i) v[static_cast<size_t>(i)] = static_cast<float>(rank + 10 * mb + i);
      for (int p = 0; p < kPhases; ++p) {
        group.all_reduce(v.data(), v.data(), v.size(), dist::ReduceType::kF32, nullptr);
        for (float& x : v) x *= 0.5f;
      }
      run.values[static_cast<size_t>(mb)] = v;
      compute.finish(mb);
    };
    std::thread second(micro_batch, 1);
    micro_batch(0);
    second.join();
    phases.finish_step();
  }
  run.ops = trace.ops();
  run.violation = check_happens_before(run.ops);
  return run;
}

std::vector<RankRun> run_ranks(TboHooks hooks) {
  dist::CpuWorld world(kRanks);
  std::vector<RankRun> runs(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) threads.emplace_back([&, r] { runs[static_cast<size_t>(r)] = run_rank(world, r, hooks); });
  for (std::thread& t : threads) t.join();
  return runs;
}

TEST(TboCommPhases, MicroBatchesOverlapAndTheTraceIsOrdered) {
  for (int repeat = 0; repeat < 20; ++repeat) {
    const std::vector<RankRun> runs = run_ranks({});
    for (int r = 0; r < kRanks; ++r) {
      const RankRun& run = runs[static_cast<size_t>(r)];
      EXPECT_EQ(run.violation, "") << "rank " << r;
      for (int mb = 0; mb < 2; ++mb) {
        for (int i = 0; i < kValues; ++i) {
          float expected = 0;  // the same f32 statements: sum over ranks in rank order, halve; twice more
          for (int q = 0; q < kRanks; ++q) expected += static_cast<float>(q + 10 * mb + i);
          expected *= 0.5f;
          for (int p = 1; p < kPhases; ++p) expected = (expected + expected) * 0.5f;
          EXPECT_EQ(run.values[static_cast<size_t>(mb)][static_cast<size_t>(i)], expected)
              << "rank " << r << " micro-batch " << mb << " value " << i;
        }
      }
    }
  }
}

// Where a compute-stream op is in the trace (its position), or -1.
int64_t position(const std::vector<TboOp>& ops, const std::string& what) {
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].stream == kCompute && ops[i].what == what) return static_cast<int64_t>(i);
  }
  return -1;
}

// The overlap itself, without timing: while micro-batch 0's phase k is on the comm stream, the
// compute stream runs micro-batch 1 up to its own phase k, so 1 stages phase k's inputs before
// 0 reads phase k's outputs (and 0 stages phase k + 1 before 1 reads phase k).
TEST(TboCommPhases, EachMicroBatchComputesWhileTheOthersPhaseIsInFlight) {
  for (const RankRun& run : run_ranks({})) {
    for (int k = 0; k < kPhases; ++k) {
      const std::string phase = " phase " + std::to_string(k) + " all_reduce: ";
      const int64_t b_stages = position(run.ops, "micro-batch 1" + phase + "stage the inputs");
      const int64_t a_reads = position(run.ops, "micro-batch 0" + phase + "read the outputs");
      ASSERT_GE(b_stages, 0);
      EXPECT_LT(b_stages, a_reads) << "phase " << k;
      if (k + 1 == kPhases) continue;
      const int64_t a_stages_next =
          position(run.ops, "micro-batch 0 phase " + std::to_string(k + 1) + " all_reduce: stage the inputs");
      const int64_t b_reads = position(run.ops, "micro-batch 1" + phase + "read the outputs");
      EXPECT_LT(a_stages_next, b_reads) << "phase " << k;
    }
  }
}

TEST(TboCommPhases, ADroppedWaitFailsTheCheck) {
  TboHooks hooks;
  hooks.drop_wait_phase = 1;
  for (const RankRun& run : run_ranks(hooks)) {
    // Which unordered pair is reported first depends on which stream logged first; each names phase 1.
    EXPECT_NE(run.violation.find("is not ordered after"), std::string::npos) << run.violation;
    EXPECT_NE(run.violation.find("micro-batch 1 phase 1 all_reduce"), std::string::npos) << run.violation;
  }
}

TEST(TboCommPhases, ABufferReusedByTheOtherMicroBatchTooEarlyFailsTheCheck) {
  TboHooks hooks;
  hooks.share_arena = true;  // micro-batch 1 stages into micro-batch 0's buffers while its phase may run
  for (const RankRun& run : run_ranks(hooks)) {
    EXPECT_NE(run.violation.find("buffer 0:"), std::string::npos) << run.violation;
    EXPECT_NE(run.violation.find("micro-batch 1 phase 0 all_reduce: stage the inputs"), std::string::npos)
        << run.violation;
  }
}

// ---------------------------------------------------------------------------------------------
// The split.

core::ScheduledSequence sequence(int64_t id, int64_t first, int64_t tokens) {
  core::ScheduledSequence s;
  s.sequence_id = id;
  s.first_token = first;
  s.num_tokens = tokens;
  s.block_table = {static_cast<int32_t>(id)};
  s.sample = true;
  return s;
}

TEST(TboSplit, WholeSequencesContiguousAndBalanced) {
  core::StepPlan plan;
  plan.block_size = 16;
  const int64_t lengths[] = {5, 1, 4, 2};  // 12 tokens: [5, 1] | [4, 2] balances them
  int64_t first = 0;
  for (int64_t i = 0; i < 4; ++i) {
    plan.sequences.push_back(sequence(i, first, lengths[i]));
    for (int64_t t = 0; t < lengths[i]; ++t) {
      plan.token_ids.push_back(static_cast<int32_t>(100 * i + t));
      plan.positions.push_back(t);
      plan.slot_mapping.push_back(16 * i + t);
    }
    first += lengths[i];
    plan.logits_rows.push_back(first - 1);
  }
  const TboSplit split = split_micro_batches(plan);
  ASSERT_EQ(split[0].sequences.size(), 2u);
  ASSERT_EQ(split[1].sequences.size(), 2u);
  EXPECT_EQ(split[0].num_tokens(), 6);
  EXPECT_EQ(split[1].num_tokens(), 6);
  EXPECT_EQ(split[1].sequences[0].sequence_id, 2);
  EXPECT_EQ(split[1].sequences[0].first_token, 0);
  EXPECT_EQ(split[1].sequences[1].first_token, 4);
  EXPECT_EQ(split[1].token_ids[4], 300);
  EXPECT_EQ(split[1].slot_mapping[4], 48);
  EXPECT_EQ(split[0].logits_rows, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(split[1].logits_rows, (std::vector<int64_t>{3, 5}));
  // Two sequences: one each, however uneven.
  plan.sequences.resize(2);
  plan.token_ids.resize(6);
  plan.positions.resize(6);
  plan.slot_mapping.resize(6);
  plan.logits_rows.resize(2);
  const TboSplit two = split_micro_batches(plan);
  EXPECT_EQ(two[0].num_tokens(), 5);
  EXPECT_EQ(two[1].num_tokens(), 1);
}

}  // namespace
}  // namespace tachyon::runner
