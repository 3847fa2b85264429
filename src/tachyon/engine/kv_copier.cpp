#include "tachyon/engine/kv_copier.h"

#include <chrono>
#include <cstdio>

namespace tachyon::engine {

KvCopier::KvCopier(runner::KvRowAccess& rows, std::function<void(Done)> on_done)
    : rows_(rows), on_done_(std::move(on_done)), thread_([this] { work(); }) {}

KvCopier::~KvCopier() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_one();
  thread_.join();
}

void KvCopier::submit(Job job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  ready_.notify_one();
}

void KvCopier::work() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, with nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    on_done_(copy(job));
  }
}

// The copy, then the confirmation: a copy the source did not confirm is not used (its blocks may
// have held another prompt's rows by then), and the engine computes the prompt instead.
KvCopier::Done KvCopier::copy(Job& job) {
  Done done;
  done.sequence_id = job.sequence_id;
  done.payload = job.payload;
  const auto start = std::chrono::steady_clock::now();
  try {
    const KvPayload& payload = *job.payload;
    const std::vector<int32_t> source = join_kv_block_chunks(payload, payload.reference_block_size);
    done.bytes = rows_.copy_by_reference(payload.reference, payload.reference_block_size, source, job.blocks,
                                         job.num_tokens);
    done.confirmed = payload.confirm();
  } catch (const std::exception& e) {  // Error from the transport; anything else is no reason to stop
    std::fprintf(stderr, "[tachyon] decode: the KV copy by reference failed, computing the prompt here: %s\n", e.what());
  }
  done.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  done.blocks = std::move(job.blocks);
  return done;
}

}  // namespace tachyon::engine
