// The check shared by the tests of the gate_up products with a SwiGLU epilogue (kernels/cuda/
// gemv.h: gemv_silu in test_gemv.cpp, fp8_gemv_silu in test_fp8_kernels.cpp): the fused product
// against the plain product followed by silu_and_mul, both into poisoned outputs, bit for bit,
// with nothing written past the activations.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/kernels/cuda/activation.h"

namespace tachyon::gpu_test {

// plain(out): the product of m rows into out ([m, n] bf16); fused(act): the same product with the
// epilogue into act ([m, n / 2] bf16).
inline void expect_swiglu_epilogue_matches_product_then_silu(int64_t m, int64_t n,
                                                             const std::function<void(bf16* out)>& plain,
                                                             const std::function<void(bf16* act)>& fused) {
  constexpr size_t kGuard = 64;
  const size_t acts = static_cast<size_t>(m * n / 2);
  DeviceArray<bf16> gate_up(static_cast<size_t>(m * n)), want(acts), got(acts + kGuard);
  plain(gate_up.data());
  kernels::cuda::silu_and_mul(want.data(), gate_up.data(), m, n / 2, nullptr);
  fused(got.data());
  TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> fused_acts = download_f32(got);
  for (size_t i = acts; i < fused_acts.size(); ++i) ASSERT_TRUE(std::isnan(fused_acts[i])) << "guard element " << i;
  fused_acts.resize(acts);
  const std::vector<float> plain_acts = download_f32(want);
  size_t differ = 0;
  for (size_t i = 0; i < acts; ++i) differ += fused_acts[i] != plain_acts[i] ? 1 : 0;  // NaN (unwritten) differs
  EXPECT_EQ(differ, 0u) << "activations that differ from the product + silu_and_mul, of " << acts;
}

}  // namespace tachyon::gpu_test
