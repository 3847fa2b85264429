// Dispatcher, workers and progress line of `bench serve` (see bench_serve_load.h). Threads, not
// an event loop: a request spends its life blocked on its socket, and a thread per in-flight
// request keeps each one's timing free of the others' parsing.
#include "tachyon/cli/bench_serve_load.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "tachyon/base/check.h"

namespace tachyon::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct Progress {
  std::mutex mutex;
  std::condition_variable changed;
  int32_t in_flight = 0;
  int32_t done = 0;
};

void draw_progress(int32_t done, int32_t total, double elapsed) {
  std::fprintf(stderr, "\r%d/%d requests done | %.2f req/s | %.1f s elapsed ", done, total,
               elapsed > 0 ? done / elapsed : 0.0, elapsed);
  std::fflush(stderr);
}

}  // namespace

LoadResult run_load(const ServerTarget& target, const std::vector<BenchRequest>& requests,
                    const std::vector<double>& arrivals, const LoadOptions& options) {
  TACHYON_CHECK(arrivals.size() == requests.size()) << arrivals.size() << " arrival times for " << requests.size() << " requests";
  const auto total = static_cast<int32_t>(requests.size());
  LoadResult result;
  result.outcomes.resize(requests.size());
  Progress progress;
  const Clock::time_point start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };

  std::thread drawer;
  if (options.progress) {
    drawer = std::thread([&] {
      std::unique_lock lock(progress.mutex);
      while (progress.done < total) {
        draw_progress(progress.done, total, elapsed());
        // At most four redraws a second, however fast requests complete.
        progress.changed.wait_for(lock, std::chrono::milliseconds(250), [&] { return progress.done >= total; });
      }
      draw_progress(progress.done, total, elapsed());
      std::fputc('\n', stderr);
    });
  }
  std::vector<std::thread> workers;
  workers.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrivals[i])));
    {
      std::unique_lock lock(progress.mutex);
      progress.changed.wait(lock, [&] { return options.max_concurrency <= 0 || progress.in_flight < options.max_concurrency; });
      ++progress.in_flight;
    }
    workers.emplace_back([&, i] {
      result.outcomes[i] = send_request(target, requests[i], options.ignore_eos);
      std::lock_guard lock(progress.mutex);
      --progress.in_flight;
      ++progress.done;
      progress.changed.notify_all();
    });
  }
  for (std::thread& w : workers) w.join();
  result.duration = elapsed();
  if (drawer.joinable()) drawer.join();
  return result;
}

}  // namespace tachyon::cli
