// KvCopier: a decode engine's copies by reference (engine/kv_transfer.h), off the engine's thread.
// A copy (runner/model_runner.h KvRowAccess::copy_by_reference, then the source's confirmation)
// takes a fraction of a millisecond through CUDA IPC on one GPU, but up to its transport's
// deadline for a frozen prefill server or a long prompt read through UCX across nodes; on the
// engine's thread it held every running sequence's next token that long. One worker thread runs
// the copies in order: the engine hands over an import with the blocks it allocated for it, keeps
// stepping the others, and takes the result at a later step (EngineCore::finish_copies).
// The job owns the blocks while it runs, so an abort meanwhile cannot free blocks a copy still
// writes; the engine frees them when the result comes back.
// Test: tests/unit/test_kv_by_reference.cpp (AFrozenSourceDoesNotHoldTheDecodeEngine).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tachyon/engine/kv_transfer.h"
#include "tachyon/runner/model_runner.h"

namespace tachyon::engine {

class KvCopier {
 public:
  struct Job {
    int64_t sequence_id = 0;
    std::shared_ptr<const KvPayload> payload;  // by reference: the source's blocks, confirm()
    std::vector<int32_t> blocks;               // this cache's, allocated for the prompt
    int64_t num_tokens = 0;                    // the prompt's
  };
  struct Done {
    int64_t sequence_id = 0;
    std::shared_ptr<const KvPayload> payload;
    std::vector<int32_t> blocks;  // back to the engine: used when confirmed, freed otherwise
    bool confirmed = false;       // the rows were copied and the source still held them
    int64_t bytes = 0;
    double seconds = 0.0;         // the copy with its confirmation
  };
  // `on_done` runs on the worker thread once per job, in order.
  KvCopier(runner::KvRowAccess& rows, std::function<void(Done)> on_done);
  ~KvCopier();  // finishes the jobs it has (each bounded by its transport's deadline)
  KvCopier(const KvCopier&) = delete;
  KvCopier& operator=(const KvCopier&) = delete;
  void submit(Job job);

 private:
  void work();
  Done copy(Job& job);

  runner::KvRowAccess& rows_;
  std::function<void(Done)> on_done_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tachyon::engine
