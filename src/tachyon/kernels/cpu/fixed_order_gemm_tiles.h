// How the AVX2 and AVX-512 paths of fixed_order_gemm.h walk a product: register tiles of R rows x
// C columns (each element's sum is the same whatever tile holds it; the tiles only decide how
// often a loaded row of x or w is reused), in row blocks whose rows of x stay in the L2 cache
// while every column's weights stream past them once. Templated on the weight's element type: f32,
// or bf16 bit patterns that a tile widens as it loads them (fixed_order_gemm.h).
#pragma once

#include <algorithm>
#include <cstdint>

namespace tachyon::kernels::cpu {

// out[r * ldo + c] = dot(x[r], w[c]) for r < R, c < C; x: [R, k], w: [C, k] (row stride k) of
// float or uint16_t (bf16).
template <typename W>
using GemmTile = void (*)(float* out, int64_t ldo, const float* x, const W* w, int64_t k);

// tiles[(R - 1) * wide_cols + (C - 1)] computes an R x C tile, R <= max_rows, C <= wide_cols.
// A row block of at least max_rows rows walks columns narrow_cols at a time (all registers in
// use at R = max_rows); a smaller block (a decode step) walks them wide_cols at a time.
template <typename W>
struct GemmTiles {
  const GemmTile<W>* tiles;
  int max_rows;
  int wide_cols;
  int narrow_cols;
};

inline constexpr int64_t kGemmRowBlockBytes = 256 * 1024;  // rows of x kept in L2 per pass over the weights

// out[r, o] for r < rows, o in [col_begin, col_end); shapes as in fixed_order_gemm_columns.
template <typename W>
void run_gemm_tiles(const GemmTiles<W>& t, float* out, const float* in, const W* weight, int64_t rows, int64_t k,
                    int64_t out_features, int64_t col_begin, int64_t col_end) {
  const int64_t row_block = std::max<int64_t>(t.max_rows, kGemmRowBlockBytes / (4 * std::max<int64_t>(k, 1)));
  for (int64_t r0 = 0; r0 < rows; r0 += row_block) {
    const int64_t r1 = std::min(rows, r0 + row_block);
    const int64_t width = r1 - r0 >= t.max_rows ? t.narrow_cols : t.wide_cols;
    for (int64_t o = col_begin; o < col_end; o += width) {
      const int64_t cols = std::min(width, col_end - o);
      for (int64_t r = r0; r < r1; r += t.max_rows) {
        const int64_t tile_rows = std::min<int64_t>(t.max_rows, r1 - r);
        t.tiles[(tile_rows - 1) * t.wide_cols + (cols - 1)](out + r * out_features + o, out_features, in + r * k,
                                                           weight + o * k, k);
      }
    }
  }
}

// out[0, V * lanes) (the first `tail` lanes of the last register) += the fused weighted sum of
// the rows from their column `column` on (fixed_order_gemm.h fused_weighted_sum), the output
// held in V registers of `lanes` floats.
using WeightedSumBlock = void (*)(float* out, const float* weights, const float* const* rows, int64_t column,
                                  int64_t count, int64_t tail);
inline constexpr int kWeightedSumMaxRegisters = 8;

// fused_weighted_sum over n columns, kWeightedSumMaxRegisters registers of output at a time:
// blocks[V - 1] handles V registers.
inline void run_weighted_sum_blocks(const WeightedSumBlock (&blocks)[kWeightedSumMaxRegisters], int64_t lanes,
                                    float* out, const float* weights, const float* const* rows, int64_t count,
                                    int64_t n) {
  const int64_t block = kWeightedSumMaxRegisters * lanes;
  for (int64_t d = 0; d < n; d += block) {
    const int64_t registers = (std::min(block, n - d) + lanes - 1) / lanes;
    blocks[registers - 1](out + d, weights, rows, d, count, std::min(block, n - d) - (registers - 1) * lanes);
  }
}

}  // namespace tachyon::kernels::cpu
