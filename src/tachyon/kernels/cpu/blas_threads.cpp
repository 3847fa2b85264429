// set_blas_threads (kernels/linear.h) in a file of its own: it names OpenBLAS's entry point
// weakly, without <cblas.h>, so that a build against another BLAS still links (and the call
// does nothing there).
#include "tachyon/kernels/linear.h"

extern "C" void openblas_set_num_threads(int num_threads) __attribute__((weak));

namespace tachyon::kernels::cpu {

void set_blas_threads(int threads) {
  if (openblas_set_num_threads != nullptr) openblas_set_num_threads(threads);
}

}  // namespace tachyon::kernels::cpu
