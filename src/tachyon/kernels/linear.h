// Dense layers of the CPU reference: y = x W^T + b (HF nn.Linear layout), the SwiGLU gate, and
// the embedding lookup. The matrix product sums every element in one fixed order
// (kernels/cpu/fixed_order_gemm.h), so a row's result never depends on the other rows of the
// product (a decode row equals the same row in a verify step or a batch); the rest are plain loops.
#pragma once

#include <cstdint>

namespace tachyon::kernels::cpu {

// out: [rows, out_features]; in: [rows, in_features]; weight: [out_features, in_features];
// bias: [out_features] or nullptr.
void linear(float* out, const float* in, const float* weight, const float* bias, int64_t rows, int64_t in_features,
            int64_t out_features);
// The same with weight [out_features, in_features] as bf16 bit patterns (a bf16 checkpoint's
// matrix as the CPU model holds it): each is widened to f32 as the product loads it, which is
// exact, so out is bit for bit linear() on the f32-widened matrix, from half the bytes.
void linear(float* out, const float* in, const uint16_t* weight, const float* bias, int64_t rows,
            int64_t in_features, int64_t out_features);

// out: [rows, dim] = silu(gate_up[:, :dim]) * gate_up[:, dim:]; gate_up: [rows, 2 * dim].
void silu_and_mul(float* out, const float* gate_up, int64_t rows, int64_t dim);

// out: [rows, dim] = table[ids[r]]; table: [vocab, dim]; ids must be in [0, vocab) (checked).
void embedding(float* out, const int32_t* ids, const float* table, int64_t rows, int64_t vocab, int64_t dim);

// out[i] += in[i] for i < count (residual connections).
void add_inplace(float* out, const float* in, int64_t count);

}  // namespace tachyon::kernels::cpu
