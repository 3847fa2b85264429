// The happens-before checker of two-batch overlap (TBO): every comm phase (tbo_comm_phase.h)
// records, per rank, which buffers each stream reads and writes and which events it records and
// waits on; check_happens_before() replays that trace with vector clocks (one clock per stream,
// an event carries the recording stream's clock, a wait joins it) and fails the step when two
// accesses to one buffer from different streams, at least one a write, are not ordered: a write
// not ordered after every earlier read and write of the other stream, or a read not ordered after
// the other stream's write. This is the bug a comm stream's output returned to a pool and
// overwritten by the other micro-batch is (gsm8k 0.97 -> 0.69 in the seed, caught only by
// accuracy): here it fails the step that does it, whatever the threads' timing was.
// The verdict depends on the recorded order of waits and records, not on when things ran, so the
// same program gives the same verdict every run (tests/unit/test_tbo_order.cpp).
#pragma once

#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "tachyon/base/check.h"

namespace tachyon::runner {

enum class TboStreamKind { kCompute = 0, kComm = 1 };
enum class TboAccess { kRead, kWrite, kRecord, kWait };

struct TboOp {
  TboStreamKind stream = TboStreamKind::kCompute;
  TboAccess access = TboAccess::kRead;
  int buffer = -1;      // kRead / kWrite: which planned buffer (tbo_comm_phase.h's arena regions)
  int event = -1;       // kRecord / kWait: which event
  std::string what;     // for the message: micro-batch, phase and collective
};

// One rank's trace of a step; both streams append to it as they go.
class TboTrace {
 public:
  void add(TboOp op);
  std::vector<TboOp> ops() const;

 private:
  mutable std::mutex mutex_;
  std::vector<TboOp> ops_;
};

// A TBO step whose trace has an unordered conflicting pair, or waits on an event never recorded.
class TboOrderError : public Error {
 public:
  using Error::Error;
};

// "" when every conflicting pair of accesses in `ops` is ordered by the waits; otherwise the first
// violation, naming both accesses.
std::string check_happens_before(std::span<const TboOp> ops);

}  // namespace tachyon::runner
