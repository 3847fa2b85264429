// How many threads the CPU forward's kernels use. OpenMP's default, one thread per core that
// spins at every barrier, is wrong for a small model: a decode step of the built-in canary (5M
// parameters) has too little work to pay for a fork and join per attention call, and when
// another process takes a core, the spinning team waits for its descheduled member. Measured on
// the 2-core dev machine (canary, batch 1, `bench latency --device cpu`): decode step 2.8 ms with
// one thread, 3.2 ms (p90 22.9 ms) with two; with both cores busy elsewhere 3.4 ms with one
// thread, 44 ms (p90 136 ms) with two. The wait policy cannot be changed from inside the process
// (the OpenMP runtime reads it when it loads), so the policy is the thread count of OpenMP's team,
// which every CPU kernel runs on (kernels/cpu/parallel_for.h):
//   OMP_NUM_THREADS set by the user       -> left to OpenMP (0)
//   a decode step reads < 64 MB of weights -> 1 thread
//   otherwise                              -> every core
// Test: tests/unit/test_cpu_threads.cpp.
#pragma once

#include <cstdint>

namespace tachyon::runner {

inline constexpr double kSmallModelDecodeBytes = 64.0 * (1 << 20);

// 0: leave the thread count to OpenMP; else the count to set.
int cpu_forward_threads(double decode_step_bytes, int cores, const char* omp_num_threads_env);

}  // namespace tachyon::runner
