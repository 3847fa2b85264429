// Small-batch GEMV (m <= 8): one weight stream at HBM bandwidth, see gemv.h for the design;
// the same kernel streams bf16 weights (gemv) and E4M3 weights with row factors (fp8_gemv).
// The numbers that matter: a block is 4 warps; a warp owns R weight rows (2 for m <= 3, 4 for
// m >= 4, so the m input chunks each lane reads are reused R times) and keeps R * U = 8 16-byte
// streaming loads in flight per lane (ld.global.nc.L1::no_allocate: weights are read once and
// must not evict the input from L1). `split` warps of a block share rows and take interleaved
// 512-byte slices of k; it is chosen on the host so that the grid holds ~16 warps per SM.
// Test: tests/gpu/test_gemv.cpp (gpu_gemv).
#include "tachyon/kernels/cuda/gemv.h"

#include "tachyon/kernels/cuda/activation.cuh"
#include "tachyon/kernels/cuda/bf16_vec.cuh"
#include "tachyon/kernels/cuda/gemv_common.cuh"
#include "tachyon/kernels/cuda/pdl.cuh"
#include "tachyon/tensor/cuda/device_buffer.h"

#include <algorithm>
#include <cstdint>

namespace tachyon::kernels::cuda {
namespace {

using namespace gemv_detail;

// acc[m][r] += dot(input row m, weight row r) over chunk c; w: the R rows' chunk c, s: their
// factors (FP8); kx: 16-byte input chunks per row.
template <int M, int R>
__device__ __forceinline__ void accumulate(float (&acc)[M][R], const uint4 (&w)[R], const float (&)[R],
                                           const uint4* x, int kx, int c, const Bf16Weights&) {
  float wf[R][kChunk];
#pragma unroll
  for (int r = 0; r < R; ++r) unpack8(w[r], wf[r]);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float xf[kChunk];
    unpack8(__ldg(x + m * kx + c), xf);
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int i = 0; i < kChunk; ++i) acc[m][r] = fmaf(xf[i], wf[r][i], acc[m][r]);
    }
  }
}

// The FP8 chunk c covers input chunks 2c and 2c + 1.
template <int M, int R>
__device__ __forceinline__ void accumulate(float (&acc)[M][R], const uint4 (&w)[R], const float (&s)[R],
                                           const uint4* x, int kx, int c, const Fp8Weights&) {
  float wf[R][16];
#pragma unroll
  for (int r = 0; r < R; ++r) unpack16_fp8(w[r], wf[r]);
#pragma unroll
  for (int m = 0; m < M; ++m) add_fp8_chunk<R>(acc[m], wf, s, x + m * kx + 2 * c);
}

__device__ __forceinline__ void store(bf16* out, float v) { *out = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(float* out, float v) { *out = v; }

// out: [M, n] OutT, or (kSilu) [M, n / 2] bf16 activations; in: [M, k] bf16; weight: [n, k] in
// Format (bf16, or E4M3 with its factors [n, scale_cols]); bias: [n] bf16 or nullptr; k8: 16-byte
// weight chunks per row, kx: 16-byte input chunks per row (k / 8); split in {1, 2, 4} warps share
// R rows. A warp's R rows are its row group's R consecutive rows, or with the SwiGLU epilogue
// (kSilu: weight = [gate rows; up rows]) R / 2 gate rows and the up rows that pair with them (n / 2
// further on), so one lane holds both sums of an activation. Either way every row's sum is taken
// in the same order (the lane's chunks in k order, the warp's xor tree, the split warps'
// partials in order; the split depends on n and k only), so the activations are bit for bit
// those of this kernel without the epilogue followed by silu_and_mul.
template <int M, typename OutT, typename Format, bool kSilu>
__global__ void __launch_bounds__(kThreads) gemv_kernel(OutT* __restrict__ out, const bf16* __restrict__ in,
                                                        const void* __restrict__ weight, Format format,
                                                        const bf16* __restrict__ bias, int n, int k8, int kx,
                                                        int scale_cols, int split) {
  constexpr int R = rows_per_warp<M>();
  constexpr int U = unroll<M>();
  constexpr int kOutputs = kSilu ? R / 2 : R;  // outputs per row group and input row
  __shared__ float partial[kWarps][M * R];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int slice = warp % split;
  const int64_t group = static_cast<int64_t>(blockIdx.x) * (kWarps / split) + warp / split;
  const int n_out = kSilu ? n / 2 : n;

  // Outputs past n_out (the last warp of an awkward n) re-read the last row and are not written.
  const uint4* w_rows[R];
  int64_t scale_row[R];  // FP8: the first factor of each row
#pragma unroll
  for (int r = 0; r < R; ++r) {
    int64_t row;
    if constexpr (kSilu) {  // n_out is a multiple of 8 (gemv_silu_supports), so no group runs past it
      row = (r >= kOutputs ? n_out : 0) + static_cast<int>(group) * kOutputs + r % kOutputs;
    } else {
      row = std::min<int64_t>(group * R + r, n - 1);
    }
    w_rows[r] = reinterpret_cast<const uint4*>(weight) + row * k8;
    scale_row[r] = row * scale_cols;
  }
  const uint4* x = reinterpret_cast<const uint4*>(in);

  float acc[M][R];
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
  }

  const int stride = 32 * split;  // chunks between one lane's consecutive chunks
  int base = slice * 32 + lane;
  // The first trip's weight loads are issued before waiting for the previous kernel (weights
  // are never written by one): under programmatic dependent launch (pdl.cuh) they overlap its tail.
  uint4 w[U][R];
  float f[U][R];  // FP8: the chunks' factors
  auto load_trip = [&](int at) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        w[u][r] = load_stream(w_rows[r] + at + u * stride);
        f[u][r] = load_factor(format, scale_row[r], at + u * stride);
      }
    }
  };
  bool prefetched = base + (U - 1) * stride < k8;
  if (prefetched) load_trip(base);
  pdl_wait();
  pdl_launch_dependents();
  for (; base + (U - 1) * stride < k8; base += stride * U) {
    // All R * U weight loads first, so they are in flight together.
    if (!prefetched) load_trip(base);
    prefetched = false;
#pragma unroll
    for (int u = 0; u < U; ++u) accumulate<M, R>(acc, w[u], f[u], x, kx, base + u * stride, format);
  }
  for (; base < k8; base += stride) {  // the lane's last < U chunks
    uint4 w1[R];
    float f1[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      w1[r] = load_stream(w_rows[r] + base);
      f1[r] = load_factor(format, scale_row[r], base);
    }
    accumulate<M, R>(acc, w1, f1, x, kx, base, format);
  }

  // Warp sums, then the split warps' sums through shared memory; lane m * R + r writes.
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], offset);
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int r = 0; r < R; ++r) partial[warp][m * R + r] = acc[m][r];
    }
  }
  __syncthreads();
  if (slice != 0 || lane >= M * kOutputs) return;
  const int m = lane / kOutputs, i = lane % kOutputs;
  const int64_t index = group * kOutputs + i;
  if (index >= n_out) return;
  float first = 0.0f, second = 0.0f;  // the sums of row `index` and (kSilu) of its up row
  for (int s = 0; s < split; ++s) first += partial[warp + s][m * R + i];
  if (bias != nullptr) first += __bfloat162float(bias[index]);
  if constexpr (kSilu) {
    for (int s = 0; s < split; ++s) second += partial[warp + s][m * R + i + kOutputs];
    if (bias != nullptr) second += __bfloat162float(bias[n_out + index]);
    // gate and up rounded to bf16 first, as silu_and_mul reads them from the plain product
    const float gate = __bfloat162float(__float2bfloat16_rn(first));
    const float up = __bfloat162float(__float2bfloat16_rn(second));
    store(out + m * static_cast<int64_t>(n_out) + index, silu_mul(gate, up));
  } else {
    store(out + m * static_cast<int64_t>(n) + index, first);
  }
}

// silu: the SwiGLU epilogue (bf16 output only).
template <int M, typename Format>
void launch(void* out, GemmOutputType out_type, bool silu, const bf16* in, const void* weight, Format format,
            const bf16* bias, int64_t n, int64_t k, cudaStream_t stream) {
  constexpr int R = rows_per_warp<M>();
  constexpr int U = unroll<M>();
  const int64_t k8 = k / Format::kValues;
  const int64_t kx = k / kChunk;
  const int64_t scale_cols = (k + 127) / 128;
  const int64_t warps = (n + R - 1) / R;
  // FP8 rows are half the bytes of bf16 ones, so at the same warp count each warp's stream is
  // half as long and the launch's ramp and tail weigh twice as much: FP8 aims at twice the warps
  // (Llama-3-8B's down projection at m = 1: 20.7 -> 18.2 us, the FP8 decode step 1% shorter;
  // bench/results/2026-12-04-fp8-gemv-variants-h200.json).
  const int64_t target = static_cast<int64_t>(tachyon::cuda::multiprocessor_count()) * kTargetWarpsPerSm *
                         (Format::kValues == 16 ? 2 : 1);
  int split = 1;  // while the grid is thin and every lane keeps U chunks per row, split k wider
  while (split < kWarps && warps * split < target && k8 >= int64_t{32} * U * split * 2) split *= 2;
  const int64_t rows_per_block = int64_t{R} * (kWarps / split);
  const dim3 blocks(static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block));
  const int n32 = static_cast<int>(n), k8_32 = static_cast<int>(k8), kx32 = static_cast<int>(kx);
  const int scale_cols32 = static_cast<int>(scale_cols);
  if (silu) {
    launch_pdl(gemv_kernel<M, bf16, Format, true>, blocks, dim3(kThreads), 0, stream, static_cast<bf16*>(out), in,
               weight, format, bias, n32, k8_32, kx32, scale_cols32, split);
  } else if (out_type == GemmOutputType::kBF16) {
    launch_pdl(gemv_kernel<M, bf16, Format, false>, blocks, dim3(kThreads), 0, stream, static_cast<bf16*>(out), in,
               weight, format, bias, n32, k8_32, kx32, scale_cols32, split);
  } else {
    launch_pdl(gemv_kernel<M, float, Format, false>, blocks, dim3(kThreads), 0, stream, static_cast<float*>(out), in,
               weight, format, bias, n32, k8_32, kx32, scale_cols32, split);
  }
  TACHYON_CUDA_CHECK_LAUNCH();
}

template <typename Format>
void launch_rows(int64_t m, void* out, GemmOutputType out_type, bool silu, const bf16* in, const void* weight,
                 Format format, const bf16* bias, int64_t n, int64_t k, cudaStream_t stream) {
  switch (m) {
    case 1: return launch<1>(out, out_type, silu, in, weight, format, bias, n, k, stream);
    case 2: return launch<2>(out, out_type, silu, in, weight, format, bias, n, k, stream);
    case 3: return launch<3>(out, out_type, silu, in, weight, format, bias, n, k, stream);
    case 4: return launch<4>(out, out_type, silu, in, weight, format, bias, n, k, stream);
    case 5: return launch<5>(out, out_type, silu, in, weight, format, bias, n, k, stream);
    case 6: return launch<6>(out, out_type, silu, in, weight, format, bias, n, k, stream);
    case 7: return launch<7>(out, out_type, silu, in, weight, format, bias, n, k, stream);
    default: return launch<8>(out, out_type, silu, in, weight, format, bias, n, k, stream);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemv_supports(int64_t m, int64_t n, int64_t k) {
  // The limits keep the kernel's int chunk indices (2 * m * k / 8) and the grid inside range.
  return m >= 1 && m <= 8 && n >= 1 && n <= (int64_t{1} << 28) && k >= kChunk && k % kChunk == 0 &&
         k <= (int64_t{1} << 24);
}

void gemv(void* out, GemmOutputType out_type, const bf16* in, const bf16* weight, const bf16* bias, int64_t m,
          int64_t n, int64_t k, cudaStream_t stream) {
  if (m == 0) return;
  TACHYON_CHECK(gemv_supports(m, n, k)) << "gemv: unsupported shape m=" << m << " n=" << n << " k=" << k
                                        << " (needs 1 <= m <= 8, k a positive multiple of 8)";
  TACHYON_CHECK(bias == nullptr || out_type == GemmOutputType::kBF16)
      << "gemv: a bias needs bf16 output (m=" << m << " n=" << n << " k=" << k << ")";
  TACHYON_CHECK(aligned16(in)) << "gemv: in (" << in << ") must be 16-byte aligned";
  TACHYON_CHECK(aligned16(weight)) << "gemv: weight (" << weight << ") must be 16-byte aligned";
  launch_rows(m, out, out_type, /*silu=*/false, in, weight, Bf16Weights{}, bias, n, k, stream);
}

bool fp8_gemv_supports(int64_t m, int64_t n, int64_t k) {
  return m >= 1 && m <= 8 && n >= 1 && n <= (int64_t{1} << 28) && k >= 16 && k % 16 == 0 && k <= (int64_t{1} << 24);
}

void fp8_gemv(void* out, GemmOutputType out_type, const bf16* in, const uint8_t* weight, const float* scale,
              const bf16* bias, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m == 0) return;
  TACHYON_CHECK(fp8_gemv_supports(m, n, k)) << "fp8_gemv: unsupported shape m=" << m << " n=" << n << " k=" << k
                                            << " (needs 1 <= m <= 8, k a positive multiple of 16)";
  TACHYON_CHECK(bias == nullptr || out_type == GemmOutputType::kBF16)
      << "fp8_gemv: a bias needs bf16 output (m=" << m << " n=" << n << " k=" << k << ")";
  TACHYON_CHECK(aligned16(in)) << "fp8_gemv: in (" << in << ") must be 16-byte aligned";
  TACHYON_CHECK(aligned16(weight)) << "fp8_gemv: weight (" << static_cast<const void*>(weight)
                                    << ") must be 16-byte aligned";
  TACHYON_CHECK(scale != nullptr) << "fp8_gemv: no factors for the FP8 weight";
  launch_rows(m, out, out_type, /*silu=*/false, in, weight, Fp8Weights{scale}, bias, n, k, stream);
}

// n / 2 a multiple of 8, as silu_and_mul needs of the activations it would otherwise write.
bool gemv_silu_supports(int64_t m, int64_t n, int64_t k) { return gemv_supports(m, n, k) && n % 16 == 0; }

bool fp8_gemv_silu_supports(int64_t m, int64_t n, int64_t k) { return fp8_gemv_supports(m, n, k) && n % 16 == 0; }

void gemv_silu(bf16* out, const bf16* in, const bf16* weight, const bf16* bias, int64_t m, int64_t n, int64_t k,
               cudaStream_t stream) {
  if (m == 0) return;
  TACHYON_CHECK(gemv_silu_supports(m, n, k)) << "gemv_silu: unsupported shape m=" << m << " n=" << n << " k=" << k
                                             << " (needs gemv's shapes and n a multiple of 16)";
  TACHYON_CHECK(aligned16(in)) << "gemv_silu: in (" << in << ") must be 16-byte aligned";
  TACHYON_CHECK(aligned16(weight)) << "gemv_silu: weight (" << weight << ") must be 16-byte aligned";
  launch_rows(m, out, GemmOutputType::kBF16, /*silu=*/true, in, weight, Bf16Weights{}, bias, n, k, stream);
}

void fp8_gemv_silu(bf16* out, const bf16* in, const uint8_t* weight, const float* scale, const bf16* bias, int64_t m,
                   int64_t n, int64_t k, cudaStream_t stream) {
  if (m == 0) return;
  TACHYON_CHECK(fp8_gemv_silu_supports(m, n, k)) << "fp8_gemv_silu: unsupported shape m=" << m << " n=" << n
                                                 << " k=" << k << " (needs fp8_gemv's shapes and n a multiple of 16)";
  TACHYON_CHECK(aligned16(in)) << "fp8_gemv_silu: in (" << in << ") must be 16-byte aligned";
  TACHYON_CHECK(aligned16(weight)) << "fp8_gemv_silu: weight (" << static_cast<const void*>(weight)
                                   << ") must be 16-byte aligned";
  TACHYON_CHECK(scale != nullptr) << "fp8_gemv_silu: no factors for the FP8 weight";
  launch_rows(m, out, GemmOutputType::kBF16, /*silu=*/true, in, weight, Fp8Weights{scale}, bias, n, k, stream);
}

}  // namespace tachyon::kernels::cuda
