#include "tachyon/runner/cpu_threads.h"

#include <algorithm>

namespace tachyon::runner {

int cpu_forward_threads(double decode_step_bytes, int cores, const char* omp_num_threads_env) {
  if (omp_num_threads_env != nullptr && omp_num_threads_env[0] != '\0') return 0;  // the user chose
  if (decode_step_bytes < kSmallModelDecodeBytes) return 1;
  return std::max(1, cores);
}

}  // namespace tachyon::runner
