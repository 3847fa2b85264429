// The stream/event model of two-batch overlap (TBO) on CPU thread ranks. A GPU rank has a compute
// stream and a comm stream and orders them with events; a CPU rank gets the same three things:
//   TboEvent          one-shot: a stream records it once, the other stream waits on it
//   TboCommStream     a worker thread per rank that runs the rank's communicator calls one after
//                     the other, in enqueue order (a comm stream is a FIFO of work)
//   TboComputeStream  the compute stream, shared by the step's two micro-batches: they take turns
//                     on it, handing it over at each comm phase, so while micro-batch A's
//                     collective runs on the comm thread, B computes (and vice versa). Each
//                     micro-batch runs on a thread of its own so the model's forward stays one
//                     straight function; the turn-taking makes them one stream (never both at once).
// The non-obvious part: the turn order is strict alternation (A, B, A, B ... while both run), so
// every rank enqueues its comm phases in the same order and the collectives match across ranks.
// A comm phase that throws fails the stream: later work is skipped, every event is still recorded
// (no waiter hangs) and the error is rethrown to the compute side (rethrow_if_failed).
// Used by runner/tbo_comm_phase.h. Tests: tests/unit/test_tbo_order.cpp.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace tachyon::runner {

class TboEvent {
 public:
  explicit TboEvent(int id) : id_(id) {}
  int id() const { return id_; }
  void record();
  void wait() const;  // blocks until recorded

 private:
  int id_;
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  bool recorded_ = false;
};

class TboCommStream {
 public:
  TboCommStream();
  ~TboCommStream();  // runs what is queued, then joins
  TboCommStream(const TboCommStream&) = delete;
  TboCommStream& operator=(const TboCommStream&) = delete;

  // Runs work(failed) on the stream's thread after everything enqueued before it; `failed` is
  // true once an earlier work threw (the work should then only record its events).
  void enqueue(std::function<void(bool failed)> work);
  void synchronize();        // blocks until the queue is empty and idle
  void rethrow_if_failed();  // the first error a work threw, on the caller

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void(bool)>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after the state above exists
};

class TboComputeStream {
 public:
  // Micro-batch mb (0 or 1) blocks until the stream is its turn (micro-batch 0 goes first).
  void enter(int mb);
  // mb hands the stream to the other micro-batch, if that one still runs, and waits for its turn back.
  void yield(int mb);
  // mb is done with the stream for this step (also on an error, so the other never waits on it).
  void finish(int mb);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int turn_ = 0;
  bool finished_[2] = {false, false};
};

}  // namespace tachyon::runner
