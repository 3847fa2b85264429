// fixed_order_gemm.h on AVX-512: one zmm register holds a dot product's 16 running sums. Register
// tiles up to 4 rows x 6 columns (24 sums, 4 rows of x, 1 of w: 29 of 32 registers), 1-3 rows x 8
// columns for a decode step. Compiled for AVX-512 by function attribute and run only where
// cpu_runs(GemmIsa::kAvx512) says so; the build's own flags stay the generic x86-64. A bf16 weight
// is widened in the register it is loaded into (AVX-512F's zero-extension and shift, no BF16
// extension needed); every sum is then the f32 product's, instruction for instruction.
#include <array>
#include <utility>

#include "tachyon/base/check.h"
#include "tachyon/kernels/cpu/fixed_order_gemm.h"
#include "tachyon/kernels/cpu/fixed_order_gemm_tiles.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TACHYON_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))

namespace tachyon::kernels::cpu {
namespace {

constexpr int kMaxRows512 = 4;
constexpr int kWideCols512 = 8;
constexpr int kNarrowCols512 = 6;

// The 16 running sums of one dot product -> their total, added by halves (fixed_order_gemm.h),
// in full-width registers: each step moves the upper half of the live lanes down onto the lower.
// The masked forms with every lane set are the plain instructions; the unmasked intrinsics draw
// a false -Wuninitialized from GCC 12's header (their _mm512_undefined_ps).
TACHYON_TARGET_AVX512 inline float sum_by_halves_512(__m512 sums) {
  constexpr __mmask16 kAll = 0xFFFF;
  const __m512 s8 = _mm512_add_ps(sums, _mm512_mask_shuffle_f32x4(sums, kAll, sums, sums, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 s4 = _mm512_add_ps(s8, _mm512_mask_shuffle_f32x4(s8, kAll, s8, s8, _MM_SHUFFLE(2, 3, 0, 1)));
  const __m512 s2 = _mm512_add_ps(s4, _mm512_mask_permute_ps(s4, kAll, s4, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 s1 = _mm512_add_ps(s2, _mm512_mask_permute_ps(s2, kAll, s2, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_cvtss_f32(s1);  // lane 0: ((s[0] + s[8]) + (s[4] + s[12])) + ((s[2] + s[10]) + (s[6] + s[14])) + ...
}

// 16 weights as f32: as stored, or bf16 bits moved to the upper half of each lane (exact). The
// zero-masking forms with every lane set are the plain instructions (see sum_by_halves_512).
TACHYON_TARGET_AVX512 inline __m512 load_weights_512(const float* w) { return _mm512_loadu_ps(w); }
TACHYON_TARGET_AVX512 inline __m512 load_weights_512(const uint16_t* w) {
  constexpr __mmask16 kAll = 0xFFFF;
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, bits), 16));
}

// The weights in `lanes` (the low lanes of a partial group), zeros in the others. AVX-512F has no
// masked 16-bit load, so a partial group of bf16 goes through a zeroed copy (once per dot product).
TACHYON_TARGET_AVX512 inline __m512 load_weights_in_512(const float* w, __mmask16 lanes) {
  return _mm512_maskz_loadu_ps(lanes, w);
}
TACHYON_TARGET_AVX512 inline __m512 load_weights_in_512(const uint16_t* w, __mmask16 lanes) {
  uint16_t part[kDotLanes] = {};
  for (int j = 0; j < kDotLanes; ++j) {
    if ((lanes >> j) & 1) part[j] = w[j];
  }
  return load_weights_512(part);
}

// out[r * ldo + c] = dot(x[r], w[c]) for r < R, c < C; x: [R, k], w: [C, k] of W (float or bf16).
template <int R, int C, typename W>
TACHYON_TARGET_AVX512 void tile_512(float* out, int64_t ldo, const float* x, const W* w, int64_t k) {
  __m512 sums[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) sums[r][c] = _mm512_setzero_ps();
  }
  __m512 xs[R];
  int64_t i = 0;
  for (; i + kDotLanes <= k; i += kDotLanes) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xs[r] = _mm512_loadu_ps(x + r * k + i);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512 ws = load_weights_512(w + c * k + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) sums[r][c] = _mm512_fmadd_ps(xs[r], ws, sums[r][c]);
    }
  }
  if (i < k) {  // the partial group: the sums of lanes past k stay as they are
    const __mmask16 lanes = static_cast<__mmask16>((1u << (k - i)) - 1);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xs[r] = _mm512_maskz_loadu_ps(lanes, x + r * k + i);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512 ws = load_weights_in_512(w + c * k + i, lanes);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) sums[r][c] = _mm512_mask3_fmadd_ps(xs[r], ws, sums[r][c], lanes);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) out[r * ldo + c] = sum_by_halves_512(sums[r][c]);
  }
}

template <typename W, int... I>
constexpr std::array<GemmTile<W>, sizeof...(I)> make_tiles_512(std::integer_sequence<int, I...>) {
  return {&tile_512<I / kWideCols512 + 1, I % kWideCols512 + 1, W>...};
}
template <typename W>
constexpr std::array<GemmTile<W>, kMaxRows512 * kWideCols512> kTiles512 =
    make_tiles_512<W>(std::make_integer_sequence<int, kMaxRows512 * kWideCols512>{});

template <typename W>
void columns_512(float* out, const float* in, const W* weight, int64_t rows, int64_t in_features,
                 int64_t out_features, int64_t col_begin, int64_t col_end) {
  const GemmTiles<W> tiles{kTiles512<W>.data(), kMaxRows512, kWideCols512, kNarrowCols512};
  run_gemm_tiles(tiles, out, in, weight, rows, in_features, out_features, col_begin, col_end);
}

}  // namespace

void gemm_columns_avx512(float* out, const float* in, const float* weight, int64_t rows, int64_t in_features,
                         int64_t out_features, int64_t col_begin, int64_t col_end) {
  columns_512(out, in, weight, rows, in_features, out_features, col_begin, col_end);
}

void gemm_columns_avx512(float* out, const float* in, const uint16_t* weight, int64_t rows, int64_t in_features,
                         int64_t out_features, int64_t col_begin, int64_t col_end) {
  columns_512(out, in, weight, rows, in_features, out_features, col_begin, col_end);
}

float dot_avx512(const float* x, const float* w, int64_t k) {
  float out = 0.0f;
  tile_512<1, 1, float>(&out, 1, x, w, k);
  return out;
}

TACHYON_TARGET_AVX512 void axpy_avx512(float* y, float a, const float* x, int64_t n) {
  const __m512 scale = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(scale, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  }
  if (i < n) {
    const __mmask16 lanes = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 sum = _mm512_fmadd_ps(scale, _mm512_maskz_loadu_ps(lanes, x + i), _mm512_maskz_loadu_ps(lanes, y + i));
    _mm512_mask_storeu_ps(y + i, lanes, sum);
  }
}

}  // namespace tachyon::kernels::cpu

#else  // not x86-64: cpu_runs(GemmIsa::kAvx512) is false, so nothing calls this

namespace tachyon::kernels::cpu {
void gemm_columns_avx512(float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t) {
  TACHYON_CHECK(false) << "internal: the AVX-512 product was called on a CPU that is not x86-64";
}
void gemm_columns_avx512(float*, const float*, const uint16_t*, int64_t, int64_t, int64_t, int64_t, int64_t) {
  TACHYON_CHECK(false) << "internal: the AVX-512 product was called on a CPU that is not x86-64";
}
float dot_avx512(const float*, const float*, int64_t) {
  TACHYON_CHECK(false) << "internal: the AVX-512 dot product was called on a CPU that is not x86-64";
  return 0.0f;
}
void axpy_avx512(float*, float, const float*, int64_t) {
  TACHYON_CHECK(false) << "internal: the AVX-512 axpy was called on a CPU that is not x86-64";
}
}  // namespace tachyon::kernels::cpu

#endif
