// PeerPlan (dist/peer_plan.h): the one-shot / two-shot crossover per group size, the buffer
// limit, the fallback-or-chunks choice and the chunk arithmetic, at the sizes around each
// threshold. Pure host logic: runs in the CPU build. The kernels the plan drives are tested in
// tests/gpu/test_peer_communicator.cpp.
#include <gtest/gtest.h>

#include <limits>
#include <ostream>

#include "tachyon/base/check.h"
#include "tachyon/dist/peer_plan.h"

namespace tachyon::dist {

// gtest prints a PeerPath by name.
void PrintTo(PeerPath path, std::ostream* os) { *os << peer_path_name(path); }

namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * kKiB;

TEST(PeerPlan, OneShotLimitShrinksWithTheGroup) {
  EXPECT_EQ(one_shot_max_bytes(1), std::numeric_limits<size_t>::max());
  EXPECT_EQ(one_shot_max_bytes(2), std::numeric_limits<size_t>::max());
  EXPECT_EQ(one_shot_max_bytes(3), 512 * kKiB);
  EXPECT_EQ(one_shot_max_bytes(4), 512 * kKiB);
  EXPECT_EQ(one_shot_max_bytes(5), 256 * kKiB);
  EXPECT_EQ(one_shot_max_bytes(8), 256 * kKiB);
}

TEST(PeerPlan, PathAroundTheCrossover) {
  EXPECT_EQ(all_reduce_path(0, 8), PeerPath::kOneShot);
  EXPECT_EQ(all_reduce_path(256 * kKiB, 8), PeerPath::kOneShot);
  EXPECT_EQ(all_reduce_path(256 * kKiB + 2, 8), PeerPath::kTwoShot);
  EXPECT_EQ(all_reduce_path(512 * kKiB, 4), PeerPath::kOneShot);
  EXPECT_EQ(all_reduce_path(512 * kKiB + 2, 3), PeerPath::kTwoShot);
  // Two ranks read the same bytes either way: one-shot (one barrier less) at every size.
  EXPECT_EQ(all_reduce_path(64 * kMiB, 2), PeerPath::kOneShot);
  EXPECT_EQ(all_reduce_path(64 * kMiB, 1), PeerPath::kOneShot);
}

TEST(PeerPlan, CapacityIsTheBufferRoundedDownToUnits) {
  EXPECT_EQ(peer_capacity(8 * kMiB), 8 * kMiB);
  EXPECT_EQ(peer_capacity(1000), 992u);
  EXPECT_EQ(peer_capacity(16), 16u);
  EXPECT_EQ(peer_capacity(15), 0u);
}

TEST(PeerPlan, EmptyMessageLaunchesNothing) {
  for (bool fallback : {false, true}) {
    PeerPlan plan = plan_all_reduce(0, 4, kMiB, fallback);
    EXPECT_EQ(plan.chunks, 0u);
    EXPECT_EQ(plan.path, PeerPath::kOneShot);
    EXPECT_EQ(plan_all_gather(0, 4, kMiB, fallback).chunks, 0u);
  }
}

TEST(PeerPlan, SmallMessagesAreOneChunk) {
  for (size_t bytes : {size_t{2}, size_t{14}, size_t{4000}, 256 * kKiB}) {
    PeerPlan plan = plan_all_reduce(bytes, 8, 8 * kMiB, true);
    EXPECT_EQ(plan.path, PeerPath::kOneShot) << bytes;
    EXPECT_EQ(plan.chunks, 1u) << bytes;
    EXPECT_EQ(plan.chunk_bytes, bytes) << bytes;
  }
  PeerPlan two = plan_all_reduce(256 * kKiB + 4, 8, 8 * kMiB, true);
  EXPECT_EQ(two.path, PeerPath::kTwoShot);
  EXPECT_EQ(two.chunks, 1u);
}

TEST(PeerPlan, BufferLimitSendsLargerMessagesToTheFallback) {
  const size_t buffer = 8 * kMiB;
  PeerPlan fits = plan_all_reduce(buffer, 8, buffer, true);
  EXPECT_EQ(fits.path, PeerPath::kTwoShot);
  EXPECT_EQ(fits.chunks, 1u);
  EXPECT_EQ(fits.chunk_bytes, buffer);
  PeerPlan over = plan_all_reduce(buffer + 2, 8, buffer, true);
  EXPECT_EQ(over.path, PeerPath::kFallback);
  EXPECT_EQ(over.chunks, 0u);
  EXPECT_EQ(plan_all_gather(buffer, 8, buffer, true).path, PeerPath::kOneShot);
  EXPECT_EQ(plan_all_gather(buffer + 1, 8, buffer, true).path, PeerPath::kFallback);
}

TEST(PeerPlan, WithoutFallbackLargerMessagesRunInBufferSizedChunks) {
  const size_t buffer = kMiB;
  PeerPlan plan = plan_all_reduce(buffer + 2, 8, buffer, false);
  EXPECT_EQ(plan.path, PeerPath::kTwoShot);  // the first chunk fills the buffer
  EXPECT_EQ(plan.chunks, 2u);
  EXPECT_EQ(plan.chunk_bytes, buffer);
  // The 2-byte last chunk picks its own path.
  EXPECT_EQ(all_reduce_path(2, 8), PeerPath::kOneShot);

  PeerPlan exact = plan_all_reduce(3 * buffer, 4, buffer, false);
  EXPECT_EQ(exact.chunks, 3u);
  PeerPlan pair = plan_all_reduce(3 * buffer + 4, 2, buffer, false);
  EXPECT_EQ(pair.path, PeerPath::kOneShot);
  EXPECT_EQ(pair.chunks, 4u);

  PeerPlan gather = plan_all_gather(2 * buffer + 1, 3, buffer, false);
  EXPECT_EQ(gather.path, PeerPath::kOneShot);
  EXPECT_EQ(gather.chunks, 3u);
  EXPECT_EQ(gather.chunk_bytes, buffer);
}

TEST(PeerPlan, ChunksStayUnitAlignedWhenTheBufferIsNot) {
  PeerPlan plan = plan_all_reduce(5000, 2, 1000, false);
  EXPECT_EQ(plan.chunk_bytes, 992u);
  EXPECT_EQ(plan.chunk_bytes % kPeerUnitBytes, 0u);
  EXPECT_EQ(plan.chunks, 6u);  // 5 * 992 = 4960, then 40 bytes
}

TEST(PeerPlan, BadArgumentsThrow) {
  EXPECT_THROW(plan_all_reduce(16, 0, kMiB, false), Error);
  EXPECT_THROW(plan_all_gather(16, 2, 8, false), Error);
}

TEST(PeerPlan, PathNames) {
  EXPECT_EQ(peer_path_name(PeerPath::kOneShot), "one-shot");
  EXPECT_EQ(peer_path_name(PeerPath::kTwoShot), "two-shot");
  EXPECT_EQ(peer_path_name(PeerPath::kFallback), "fallback");
}

}  // namespace
}  // namespace tachyon::dist
