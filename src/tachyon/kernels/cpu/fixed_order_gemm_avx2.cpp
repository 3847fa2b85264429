// fixed_order_gemm.h on AVX2 + FMA: two ymm registers hold a dot product's 16 running sums (lanes
// 0-7 and 8-15). Register tiles up to 2 rows x 3 columns (12 sums, 2 rows of x, 1 of w: 15 of 16
// registers), 1 row x 6 columns for a decode step. Compiled for AVX2 by function attribute and
// run only where cpu_runs(GemmIsa::kAvx2) says so. A bf16 weight is widened in the register it is
// loaded into (zero-extension and shift); every sum is then the f32 product's.
#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "tachyon/base/check.h"
#include "tachyon/kernels/cpu/fixed_order_gemm.h"
#include "tachyon/kernels/cpu/fixed_order_gemm_tiles.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TACHYON_TARGET_AVX2 __attribute__((target("avx2,fma")))

namespace tachyon::kernels::cpu {
namespace {

constexpr int kMaxRows256 = 2;
constexpr int kWideCols256 = 6;
constexpr int kNarrowCols256 = 3;

// The 16 running sums (lanes 0-7 in low, 8-15 in high) -> their total, added by halves.
TACHYON_TARGET_AVX2 inline float sum_by_halves_256(__m256 low, __m256 high) {
  const __m256 s8 = _mm256_add_ps(low, high);                                                // j + (j + 8)
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  // j + (j + 4)
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                                 // j + (j + 2)
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));                         // 0 + 1
}

// All-ones in the lanes below `count` (0..8), zeros above: the lanes a partial group touches.
TACHYON_TARGET_AVX2 inline __m256i lanes_below(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// 8 weights as f32: as stored, or bf16 bits moved to the upper half of each lane (exact).
TACHYON_TARGET_AVX2 inline __m256 load_weights_256(const float* w) { return _mm256_loadu_ps(w); }
TACHYON_TARGET_AVX2 inline __m256 load_weights_256(const uint16_t* w) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

// The first `count` (0..8) weights, zeros above. AVX2 has no masked 16-bit load, so a partial
// group of bf16 goes through a zeroed copy (once per dot product).
TACHYON_TARGET_AVX2 inline __m256 load_weights_below_256(const float* w, int64_t count) {
  return _mm256_maskload_ps(w, lanes_below(count));
}
TACHYON_TARGET_AVX2 inline __m256 load_weights_below_256(const uint16_t* w, int64_t count) {
  uint16_t part[8] = {};
  std::copy_n(w, count, part);
  return load_weights_256(part);
}

// out[r * ldo + c] = dot(x[r], w[c]) for r < R, c < C; x: [R, k], w: [C, k] of W (float or bf16).
template <int R, int C, typename W>
TACHYON_TARGET_AVX2 void tile_256(float* out, int64_t ldo, const float* x, const W* w, int64_t k) {
  __m256 sums[2][R][C];  // [half][row][column]: half 0 holds lanes 0-7, half 1 lanes 8-15
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) sums[h][r][c] = _mm256_setzero_ps();
    }
  }
  __m256 xs[R];
  int64_t i = 0;
  for (; i + kDotLanes <= k; i += kDotLanes) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) xs[r] = _mm256_loadu_ps(x + r * k + i + 8 * h);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m256 ws = load_weights_256(w + c * k + i + 8 * h);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) sums[h][r][c] = _mm256_fmadd_ps(xs[r], ws, sums[h][r][c]);
      }
    }
  }
  if (i < k) {  // the partial group: the sums of lanes past k stay as they are (a blend, not + 0,
                // which would turn a -0 sum into +0)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int64_t count = std::min<int64_t>(8, std::max<int64_t>(0, k - i - 8 * h));
      const __m256i lanes = lanes_below(count);
      const __m256 keep = _mm256_castsi256_ps(lanes);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) xs[r] = _mm256_maskload_ps(x + r * k + i + 8 * h, lanes);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m256 ws = load_weights_below_256(w + c * k + i + 8 * h, count);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          sums[h][r][c] = _mm256_blendv_ps(sums[h][r][c], _mm256_fmadd_ps(xs[r], ws, sums[h][r][c]), keep);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) out[r * ldo + c] = sum_by_halves_256(sums[0][r][c], sums[1][r][c]);
  }
}

template <typename W, int... I>
constexpr std::array<GemmTile<W>, sizeof...(I)> make_tiles_256(std::integer_sequence<int, I...>) {
  return {&tile_256<I / kWideCols256 + 1, I % kWideCols256 + 1, W>...};
}
template <typename W>
constexpr std::array<GemmTile<W>, kMaxRows256 * kWideCols256> kTiles256 =
    make_tiles_256<W>(std::make_integer_sequence<int, kMaxRows256 * kWideCols256>{});

template <typename W>
void columns_256(float* out, const float* in, const W* weight, int64_t rows, int64_t in_features, int64_t out_features,
                 int64_t col_begin, int64_t col_end) {
  const GemmTiles<W> tiles{kTiles256<W>.data(), kMaxRows256, kWideCols256, kNarrowCols256};
  run_gemm_tiles(tiles, out, in, weight, rows, in_features, out_features, col_begin, col_end);
}

// out[j] = dot(x, rows[j]) * scale for j < count <= 4, each dot in the fixed order (tile_256's
// sums), the four reduced by halves together: step 1 within each row, then two rows' lanes per
// register (the same additions as sum_by_halves_256). Rows past count repeat rows[0], unstored.
TACHYON_TARGET_AVX2 void dots_block_256(float* out, const float* x, const float* const* rows, int64_t count, int64_t k,
                                        float scale) {
  constexpr int kRows = 4;
  const float* r[kRows];
  for (int j = 0; j < kRows; ++j) r[j] = rows[j < count ? j : 0];
  __m256 sums[2][kRows];  // [half][row]
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
    for (int j = 0; j < kRows; ++j) sums[h][j] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + kDotLanes <= k; i += kDotLanes) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256 xs = _mm256_loadu_ps(x + i + 8 * h);
#pragma GCC unroll 4
      for (int j = 0; j < kRows; ++j) sums[h][j] = _mm256_fmadd_ps(xs, _mm256_loadu_ps(r[j] + i + 8 * h), sums[h][j]);
    }
  }
  if (i < k) {  // the partial group, as tile_256 adds it
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int64_t lanes_count = std::min<int64_t>(8, std::max<int64_t>(0, k - i - 8 * h));
      const __m256i lanes = lanes_below(lanes_count);
      const __m256 keep = _mm256_castsi256_ps(lanes);
      const __m256 xs = _mm256_maskload_ps(x + i + 8 * h, lanes);
#pragma GCC unroll 4
      for (int j = 0; j < kRows; ++j) {
        const __m256 ws = _mm256_maskload_ps(r[j] + i + 8 * h, lanes);
        sums[h][j] = _mm256_blendv_ps(sums[h][j], _mm256_fmadd_ps(xs, ws, sums[h][j]), keep);
      }
    }
  }
  __m256 eighths[kRows];  // j + (j + 8), 8 lanes a row
#pragma GCC unroll 4
  for (int j = 0; j < kRows; ++j) eighths[j] = _mm256_add_ps(sums[0][j], sums[1][j]);
  // j + (j + 4): rows 0 and 1 (then 2 and 3) share a register, a 128-bit half each.
  const __m256 fourths01 = _mm256_add_ps(_mm256_permute2f128_ps(eighths[0], eighths[1], 0x20),
                                         _mm256_permute2f128_ps(eighths[0], eighths[1], 0x31));
  const __m256 fourths23 = _mm256_add_ps(_mm256_permute2f128_ps(eighths[2], eighths[3], 0x20),
                                         _mm256_permute2f128_ps(eighths[2], eighths[3], 0x31));
  // j + (j + 2): half 0 holds rows 0 and 2 two sums each, half 1 rows 1 and 3.
  const __m256 seconds = _mm256_add_ps(_mm256_shuffle_ps(fourths01, fourths23, _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm256_shuffle_ps(fourths01, fourths23, _MM_SHUFFLE(3, 2, 3, 2)));
  // 0 + 1: lanes 0, 1, 4, 5 hold rows 0, 2, 1, 3.
  const __m256 totals = _mm256_mul_ps(_mm256_add_ps(_mm256_shuffle_ps(seconds, seconds, _MM_SHUFFLE(2, 0, 2, 0)),
                                                    _mm256_shuffle_ps(seconds, seconds, _MM_SHUFFLE(3, 1, 3, 1))),
                                      _mm256_set1_ps(scale));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, totals);
  const float row_total[kRows] = {lanes[0], lanes[4], lanes[1], lanes[5]};
  for (int64_t j = 0; j < count; ++j) out[j] = row_total[j];
}

// out[0, 8 V) (the first `tail` lanes of the last register) += the fused sum over the rows from
// their column `column` on.
template <int V>
TACHYON_TARGET_AVX2 void weighted_sum_block_256(float* out, const float* weights, const float* const* rows,
                                                int64_t column, int64_t count, int64_t tail) {
  const __m256i last = lanes_below(tail);
  __m256 sums[V];
#pragma GCC unroll 8
  for (int v = 0; v < V - 1; ++v) sums[v] = _mm256_loadu_ps(out + 8 * v);
  sums[V - 1] = _mm256_maskload_ps(out + 8 * (V - 1), last);
  for (int64_t j = 0; j < count; ++j) {
    const __m256 weight = _mm256_set1_ps(weights[j]);
    const float* row = rows[j] + column;
#pragma GCC unroll 8
    for (int v = 0; v < V - 1; ++v) sums[v] = _mm256_fmadd_ps(weight, _mm256_loadu_ps(row + 8 * v), sums[v]);
    sums[V - 1] = _mm256_fmadd_ps(weight, _mm256_maskload_ps(row + 8 * (V - 1), last), sums[V - 1]);
  }
#pragma GCC unroll 8
  for (int v = 0; v < V - 1; ++v) _mm256_storeu_ps(out + 8 * v, sums[v]);
  _mm256_maskstore_ps(out + 8 * (V - 1), last, sums[V - 1]);
}

}  // namespace

void dots_avx2(float* out, const float* x, const float* const* rows, int64_t count, int64_t k, float scale) {
  for (int64_t j = 0; j < count; j += 4) {
    dots_block_256(out + j, x, rows + j, std::min<int64_t>(4, count - j), k, scale);
  }
}

// Up to 8 registers of output at a time (8 of the 16 hold the loads and the weight).
void weighted_sum_avx2(float* out, const float* weights, const float* const* rows, int64_t count, int64_t n) {
  static constexpr WeightedSumBlock kBlocks[kWeightedSumMaxRegisters] = {
      &weighted_sum_block_256<1>, &weighted_sum_block_256<2>, &weighted_sum_block_256<3>,
      &weighted_sum_block_256<4>, &weighted_sum_block_256<5>, &weighted_sum_block_256<6>,
      &weighted_sum_block_256<7>, &weighted_sum_block_256<8>};
  run_weighted_sum_blocks(kBlocks, 8, out, weights, rows, count, n);
}

void gemm_columns_avx2(float* out, const float* in, const float* weight, int64_t rows, int64_t in_features,
                       int64_t out_features, int64_t col_begin, int64_t col_end) {
  columns_256(out, in, weight, rows, in_features, out_features, col_begin, col_end);
}

void gemm_columns_avx2(float* out, const float* in, const uint16_t* weight, int64_t rows, int64_t in_features,
                       int64_t out_features, int64_t col_begin, int64_t col_end) {
  columns_256(out, in, weight, rows, in_features, out_features, col_begin, col_end);
}

float dot_avx2(const float* x, const float* w, int64_t k) {
  float out = 0.0f;
  tile_256<1, 1, float>(&out, 1, x, w, k);
  return out;
}

TACHYON_TARGET_AVX2 void axpy_avx2(float* y, float a, const float* x, int64_t n) {
  const __m256 scale = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(scale, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);  // scalar FMA (this function is compiled with FMA)
}

}  // namespace tachyon::kernels::cpu

#else  // not x86-64: cpu_runs(GemmIsa::kAvx2) is false, so nothing calls this

namespace tachyon::kernels::cpu {
void gemm_columns_avx2(float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t) {
  TACHYON_CHECK(false) << "internal: the AVX2 product was called on a CPU that is not x86-64";
}
void gemm_columns_avx2(float*, const float*, const uint16_t*, int64_t, int64_t, int64_t, int64_t, int64_t) {
  TACHYON_CHECK(false) << "internal: the AVX2 product was called on a CPU that is not x86-64";
}
float dot_avx2(const float*, const float*, int64_t) {
  TACHYON_CHECK(false) << "internal: the AVX2 dot product was called on a CPU that is not x86-64";
  return 0.0f;
}
void axpy_avx2(float*, float, const float*, int64_t) {
  TACHYON_CHECK(false) << "internal: the AVX2 axpy was called on a CPU that is not x86-64";
}
void dots_avx2(float*, const float*, const float* const*, int64_t, int64_t, float) {
  TACHYON_CHECK(false) << "internal: the AVX2 dot products were called on a CPU that is not x86-64";
}
void weighted_sum_avx2(float*, const float*, const float* const*, int64_t, int64_t) {
  TACHYON_CHECK(false) << "internal: the AVX2 weighted sum was called on a CPU that is not x86-64";
}
}  // namespace tachyon::kernels::cpu

#endif
