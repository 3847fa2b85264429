// fixed_order_gemm.h on AVX-512: one zmm register holds a dot product's 16 running sums. Register
// tiles up to 4 rows x 6 columns (24 sums, 4 rows of x, 1 of w: 29 of 32 registers), 1-3 rows x 8
// columns for a decode step. Compiled for AVX-512 by function attribute and run only where
// cpu_runs(GemmIsa::kAvx512) says so; the build's own flags stay the generic x86-64. A bf16 weight
// is widened in the register it is loaded into (AVX-512F's zero-extension and shift, no BF16
// extension needed); every sum is then the f32 product's, instruction for instruction.
#include <algorithm>
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

// The additions by halves of fixed_order_gemm.h for 16 dot products at once. Each step takes two
// registers of partial sums and adds the upper half of every row's live lanes onto the lower half,
// packing both registers' rows into one: the same additions as sum_by_halves_512, in a third of
// the instructions. Step 1: lanes 0-7 = a[j] + a[j + 8], lanes 8-15 = b[j] + b[j + 8].
// (The masked forms with every lane set are the plain instructions: see sum_by_halves_512.)
constexpr __mmask16 kAllLanes = 0xFFFF;
TACHYON_TARGET_AVX512 inline __m512 add_eighths(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_mask_shuffle_f32x4(a, kAllLanes, a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_mask_shuffle_f32x4(a, kAllLanes, a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}
// Step 2, on two results of step 1 (each 128-bit chunk then holds one row's 4 sums): j += j + 4.
TACHYON_TARGET_AVX512 inline __m512 add_fourths(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_mask_shuffle_f32x4(a, kAllLanes, a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_mask_shuffle_f32x4(a, kAllLanes, a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}
// Step 3 (j += j + 2 within each chunk, two rows' pairs per chunk), and step 4 (j += j + 1).
TACHYON_TARGET_AVX512 inline __m512 add_seconds(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}
TACHYON_TARGET_AVX512 inline __m512 add_firsts(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

// out[j] = dot(x, rows[j]) * scale for j < count <= 16, each dot in the fixed order. Rows past
// count repeat rows[0] and are not stored.
TACHYON_TARGET_AVX512 void dots_block_512(float* out, const float* x, const float* const* rows, int64_t count,
                                          int64_t k, float scale) {
  const float* r[kDotLanes];
  for (int j = 0; j < kDotLanes; ++j) r[j] = rows[j < count ? j : 0];
  __m512 sums[kDotLanes];
#pragma GCC unroll 16
  for (int j = 0; j < kDotLanes; ++j) sums[j] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kDotLanes <= k; i += kDotLanes) {
    const __m512 xs = _mm512_loadu_ps(x + i);
#pragma GCC unroll 16
    for (int j = 0; j < kDotLanes; ++j) sums[j] = _mm512_fmadd_ps(xs, _mm512_loadu_ps(r[j] + i), sums[j]);
  }
  if (i < k) {  // the partial group, as tile_512 adds it
    const __mmask16 lanes = static_cast<__mmask16>((1u << (k - i)) - 1);
    const __m512 xs = _mm512_maskz_loadu_ps(lanes, x + i);
#pragma GCC unroll 16
    for (int j = 0; j < kDotLanes; ++j) {
      sums[j] = _mm512_mask3_fmadd_ps(xs, _mm512_maskz_loadu_ps(lanes, r[j] + i), sums[j], lanes);
    }
  }
  __m512 eighths[8], fourths[4], seconds[2];
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) eighths[p] = add_eighths(sums[2 * p], sums[2 * p + 1]);
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) fourths[p] = add_fourths(eighths[2 * p], eighths[2 * p + 1]);
  seconds[0] = add_seconds(fourths[0], fourths[1]);
  seconds[1] = add_seconds(fourths[2], fourths[3]);
  // Lane 4c + e of the last step holds row 4e + c: put each row back in its place.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512 last_step = add_firsts(seconds[0], seconds[1]);
  const __m512 totals = _mm512_mask_permutexvar_ps(last_step, kAllLanes, order, last_step);
  const auto stored = static_cast<__mmask16>((1u << count) - 1);
  _mm512_mask_storeu_ps(out, stored, _mm512_mul_ps(totals, _mm512_set1_ps(scale)));
}

// out[0, 16 V) (the first `tail` lanes of the last register) += the fused sum over the rows from
// their column `column` on.
template <int V>
TACHYON_TARGET_AVX512 void weighted_sum_block_512(float* out, const float* weights, const float* const* rows,
                                                  int64_t column, int64_t count, int64_t tail) {
  const auto last = static_cast<__mmask16>((1u << tail) - 1);
  __m512 sums[V];
#pragma GCC unroll 8
  for (int v = 0; v < V - 1; ++v) sums[v] = _mm512_loadu_ps(out + v * kDotLanes);
  sums[V - 1] = _mm512_maskz_loadu_ps(last, out + (V - 1) * kDotLanes);
  for (int64_t j = 0; j < count; ++j) {
    const __m512 weight = _mm512_set1_ps(weights[j]);
    const float* row = rows[j] + column;
#pragma GCC unroll 8
    for (int v = 0; v < V - 1; ++v) sums[v] = _mm512_fmadd_ps(weight, _mm512_loadu_ps(row + v * kDotLanes), sums[v]);
    sums[V - 1] = _mm512_fmadd_ps(weight, _mm512_maskz_loadu_ps(last, row + (V - 1) * kDotLanes), sums[V - 1]);
  }
#pragma GCC unroll 8
  for (int v = 0; v < V - 1; ++v) _mm512_storeu_ps(out + v * kDotLanes, sums[v]);
  _mm512_mask_storeu_ps(out + (V - 1) * kDotLanes, last, sums[V - 1]);
}

}  // namespace

void dots_avx512(float* out, const float* x, const float* const* rows, int64_t count, int64_t k, float scale) {
  for (int64_t j = 0; j < count; j += kDotLanes) {
    dots_block_512(out + j, x, rows + j, std::min<int64_t>(kDotLanes, count - j), k, scale);
  }
}

// Up to 8 registers of output at a time (the rest of the 32 hold the loads); every element's sum
// is the same chain of fused multiply-adds in the rows' order as fused_axpy's.
void weighted_sum_avx512(float* out, const float* weights, const float* const* rows, int64_t count, int64_t n) {
  static constexpr WeightedSumBlock kBlocks[kWeightedSumMaxRegisters] = {
      &weighted_sum_block_512<1>, &weighted_sum_block_512<2>, &weighted_sum_block_512<3>,
      &weighted_sum_block_512<4>, &weighted_sum_block_512<5>, &weighted_sum_block_512<6>,
      &weighted_sum_block_512<7>, &weighted_sum_block_512<8>};
  run_weighted_sum_blocks(kBlocks, kDotLanes, out, weights, rows, count, n);
}

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
void dots_avx512(float*, const float*, const float* const*, int64_t, int64_t, float) {
  TACHYON_CHECK(false) << "internal: the AVX-512 dot products were called on a CPU that is not x86-64";
}
void weighted_sum_avx512(float*, const float*, const float* const*, int64_t, int64_t) {
  TACHYON_CHECK(false) << "internal: the AVX-512 weighted sum was called on a CPU that is not x86-64";
}
}  // namespace tachyon::kernels::cpu

#endif
