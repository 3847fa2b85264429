// Soak: short requests at concurrency 64 with /metrics scraped once a second. Resident memory
// after the run stays within 2% of what it was after the first 10% of the requests, and the
// /metrics render time in the last quarter stays within 25% of the first quarter's (medians of
// the scrapes, so one slow scrape on a busy machine does not decide). CI runs 4,000 requests;
// TACHYON_SOAK_FULL=1 runs the full 20,000.
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <fstream>

#include "server_fixture.h"

namespace tachyon::server::testing {
namespace {

int64_t resident_anonymous_bytes() {
  ::malloc_trim(0);
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoll(line.substr(8)) * 1024;
  }
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

TEST(ServerSoak, MemoryAndMetricsStayFlat) {
  ::mallopt(M_ARENA_MAX, 1);  // see test_engine_long_run.cpp: one arena keeps RSS samples comparable
  const bool full = std::getenv("TACHYON_SOAK_FULL") != nullptr;
  const int total = full ? 20000 : 4000;
  const int concurrency = 64;
  ServerUnderTest server;
  // Warm-up outside the measurement, as in the engine's long-run test.
  {
    std::vector<std::thread> warm;
    for (int t = 0; t < concurrency; ++t) {
      warm.emplace_back([&] {
        auto c = server.client();
        for (int i = 0; i < 20; ++i) c.Post("/v1/completions", R"({"prompt":"warm up","max_tokens":3})", "application/json");
      });
    }
    for (auto& t : warm) t.join();
  }
  std::atomic<int> next{0}, failures{0}, done{0};
  std::atomic<int64_t> baseline_rss{0};
  std::atomic<bool> finished{false};
  std::vector<std::pair<int, double>> scrapes;  // (requests done, render seconds)
  std::thread scraper([&] {
    auto c = server.client();
    while (!finished) {
      auto start = std::chrono::steady_clock::now();
      auto r = c.Get("/metrics");
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!r || r->status != 200) ++failures;
      scrapes.emplace_back(done.load(), seconds);
      for (int i = 0; i < 20 && !finished; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::vector<std::thread> clients;
  for (int t = 0; t < concurrency; ++t) {
    clients.emplace_back([&] {
      auto c = server.client();
      while (next.fetch_add(1) < total) {
        auto r = c.Post("/v1/completions", R"({"prompt":"Tell me","max_tokens":4,"temperature":0.8})", "application/json");
        if (!r || r->status != 200) ++failures;
        if (done.fetch_add(1) + 1 == total / 10) {
          server.wait_idle(std::chrono::milliseconds(0));
          baseline_rss = resident_anonymous_bytes();
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  finished = true;
  scraper.join();
  ASSERT_TRUE(server.wait_idle());
  const int64_t end_rss = resident_anonymous_bytes();
  std::vector<double> first, last;
  for (const auto& [at, seconds] : scrapes) {
    if (at < total / 4) first.push_back(seconds);
    if (at >= total * 3 / 4) last.push_back(seconds);
  }
  std::printf("[soak] %d requests at concurrency %d, %zu scrapes; RSS after %d: %.2f MiB, at end: %.2f MiB (%+.2f%%); "
              "/metrics median render %.3f ms (first quarter) vs %.3f ms (last quarter)\n",
              total, concurrency, scrapes.size(), total / 10, baseline_rss / 1048576.0, end_rss / 1048576.0,
              100.0 * (end_rss - baseline_rss) / baseline_rss, median(first) * 1e3, median(last) * 1e3);
  EXPECT_EQ(failures, 0);
  EXPECT_LE(end_rss, baseline_rss.load() * 102 / 100);
  if (!first.empty() && !last.empty()) {
    EXPECT_LE(median(last), median(first) * 1.25 + 0.002);
  }
}

}  // namespace
}  // namespace tachyon::server::testing
