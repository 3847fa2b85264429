// The CPU kernels' one way to spread a loop over OpenMP's team. An OpenMP parallel region costs a
// futex system call even when it runs on one thread or its if() clause is false: 1 to 4 us on the
// dev VM (page-table isolation makes system calls dear), 74 regions in a decode step of the
// canary, a tenth of the step. So a loop enters a region only when the calling thread's team has
// more than one thread, it is not already inside a region (nested regions run on one thread), and
// the caller says the work pays for a fork and join; otherwise it runs inline. Which thread runs an
// iteration never changes what the iteration computes.
#pragma once

#include <omp.h>

#include <cstdint>

namespace tachyon::kernels::cpu {

// body(i) for i in [0, count), statically split over the team when worth_forking.
template <typename Body>
void parallel_for(int64_t count, bool worth_forking, const Body& body) {
  if (count < 2 || !worth_forking || omp_get_max_threads() < 2 || omp_in_parallel()) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) body(i);
}

}  // namespace tachyon::kernels::cpu
