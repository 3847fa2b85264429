// The load loop of `bench serve`: a dispatcher sends request i at its arrival time, or later
// when --max-concurrency requests are already in flight (as vLLM's semaphore does), each on its
// own thread; a progress line on stderr when it is a terminal.
#pragma once

#include <vector>

#include "tachyon/cli/bench_serve_client.h"

namespace tachyon::cli {

struct LoadOptions {
  int32_t max_concurrency = 0;  // 0: no limit
  bool ignore_eos = false;
  bool progress = false;        // draw the progress line on stderr
};

struct LoadResult {
  std::vector<RequestOutcome> outcomes;  // one per request, in request order
  double duration = 0;                   // seconds from the first send to the last completion
};

// arrivals[i]: seconds after the start at which request i may be sent (see arrival_times()).
LoadResult run_load(const ServerTarget& target, const std::vector<BenchRequest>& requests,
                    const std::vector<double>& arrivals, const LoadOptions& options);

}  // namespace tachyon::cli
