// The matrix product behind the CPU linear (kernels/linear.h): out[r, o] = dot(in[r, :], weight[o, :]),
// every element summed in ONE order that depends on the dot product's length only. Not on the
// number of rows in the product, the element's place in it, the column range a thread computes,
// nor the instruction set: a decode step's row is bit-identical to the same row inside a
// speculative verify step or a batch of 64, by construction. A general GEMM (a BLAS sgemm, which
// this product replaced) gives no such promise: its blocking, and the kernel it picks, depend on
// the product's shape.
//
// The order (the spec; dot_portable writes it as plain loops):
//   16 running sums; sum j takes the products k = j, j + 16, j + 32, ... in increasing k, each
//   added with one fused multiply-add (one rounding); the last, partial group only touches the
//   sums it has products for. Then the sums are added by halves: s[j] += s[j + 8] (j < 8),
//   s[j] += s[j + 4] (j < 4), s[j] += s[j + 2] (j < 2), s[0] += s[1].
// One AVX-512 register holds the 16 sums, two AVX2 registers do; the portable path runs the same
// order in scalar code (std::fma: slow, for CPUs without AVX2 + FMA), so all three give the same
// bits (tests/unit/test_fixed_order_gemm.cpp).
// Threads split the output columns only, never the dot product.
//
// The weight may also be given as bf16 bit patterns (a bf16 checkpoint's matrices as the CPU
// model holds them, model/model_weights.h): each is widened to f32 as it is loaded, which is
// exact (a bf16 is the upper half of an f32), so the product is the one on the f32-widened matrix
// bit for bit, reading half the bytes (tests/unit/test_bf16_weight_gemm.cpp).
#pragma once

#include <cstdint>
#include <string_view>

namespace tachyon::kernels::cpu {

inline constexpr int kDotLanes = 16;  // the running sums of one dot product

enum class GemmIsa { kPortable, kAvx2, kAvx512 };

// Whether this CPU runs `isa` (AVX2 and AVX-512 paths also need FMA); kPortable always.
bool cpu_runs(GemmIsa isa);
// The widest instruction set this CPU runs (asked once per process): what linear() uses.
GemmIsa best_gemm_isa();
std::string_view gemm_isa_name(GemmIsa isa);

// out[r, o] = dot(in[r, :], weight[o, :]) for r < rows and o in [col_begin, col_end), no bias.
// out: [rows, out_features]; in: [rows, in_features]; weight: [out_features, in_features].
// `isa` must be one cpu_runs() accepts.
void fixed_order_gemm_columns(GemmIsa isa, float* out, const float* in, const float* weight, int64_t rows,
                              int64_t in_features, int64_t out_features, int64_t col_begin, int64_t col_end);

// The same with weight as bf16 bit patterns [out_features, in_features].
void fixed_order_gemm_columns(GemmIsa isa, float* out, const float* in, const uint16_t* weight, int64_t rows,
                              int64_t in_features, int64_t out_features, int64_t col_begin, int64_t col_end);

// x, w: [k] -> their dot product in the fixed order: one element of the product, alone (the CPU
// attention's q.k scores).
float fixed_order_dot(GemmIsa isa, const float* x, const float* w, int64_t k);

// y[i] = fma(a, x[i], y[i]) for i < n: one rounding per element on every instruction set (the
// CPU attention's weighted sum of values). y and x must not overlap.
void fused_axpy(GemmIsa isa, float* y, float a, const float* x, int64_t n);

// out[j] = fixed_order_dot(isa, x, rows[j], k) * scale for j < count, bit for bit, many at once
// (an attention query's scaled scores against its keys, wherever the cache holds them). On
// AVX-512 (AVX2), 16 (4) rows' running sums stay in registers and are added by halves together
// (two rows' lanes per register: the same additions in fewer instructions).
void fixed_order_dots(GemmIsa isa, float* out, const float* x, const float* const* rows, int64_t count, int64_t k,
                      float scale);

// fused_axpy(isa, out, weights[j], rows[j], n) for j = 0, 1, ..., count - 1, bit for bit (an
// attention's weighted sum of values, onto zeros or onto the sum of the rows before); the output
// stays in registers across the rows instead of going to memory and back for each.
void fused_weighted_sum(GemmIsa isa, float* out, const float* weights, const float* const* rows, int64_t count,
                        int64_t n);

// One file per instruction set, same contracts as above.
void gemm_columns_portable(float* out, const float* in, const float* weight, int64_t rows, int64_t in_features,
                           int64_t out_features, int64_t col_begin, int64_t col_end);
void gemm_columns_portable(float* out, const float* in, const uint16_t* weight, int64_t rows, int64_t in_features,
                           int64_t out_features, int64_t col_begin, int64_t col_end);
float dot_portable(const float* x, const float* w, int64_t k);
void axpy_portable(float* y, float a, const float* x, int64_t n);
void gemm_columns_avx2(float* out, const float* in, const float* weight, int64_t rows, int64_t in_features,
                       int64_t out_features, int64_t col_begin, int64_t col_end);
void gemm_columns_avx2(float* out, const float* in, const uint16_t* weight, int64_t rows, int64_t in_features,
                       int64_t out_features, int64_t col_begin, int64_t col_end);
float dot_avx2(const float* x, const float* w, int64_t k);
void axpy_avx2(float* y, float a, const float* x, int64_t n);
void dots_avx2(float* out, const float* x, const float* const* rows, int64_t count, int64_t k, float scale);
void weighted_sum_avx2(float* out, const float* weights, const float* const* rows, int64_t count, int64_t n);
void gemm_columns_avx512(float* out, const float* in, const float* weight, int64_t rows, int64_t in_features,
                         int64_t out_features, int64_t col_begin, int64_t col_end);
void gemm_columns_avx512(float* out, const float* in, const uint16_t* weight, int64_t rows, int64_t in_features,
                         int64_t out_features, int64_t col_begin, int64_t col_end);
float dot_avx512(const float* x, const float* w, int64_t k);
void axpy_avx512(float* y, float a, const float* x, int64_t n);
void dots_avx512(float* out, const float* x, const float* const* rows, int64_t count, int64_t k, float scale);
void weighted_sum_avx512(float* out, const float* weights, const float* const* rows, int64_t count, int64_t n);

}  // namespace tachyon::kernels::cpu
