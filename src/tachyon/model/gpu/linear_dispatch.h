// The products of the GPU forward by role, and the runner's kernel choice for them. A role is
// one linear product of a layer (or of the LM head) on the workspace buffers it always reads and
// writes; blocks issue every product through LinearDispatch, which picks our GEMV or cuBLASLt per
// (role, rows) as timed at start-up (runner/cuda/cuda_kernel_choice.cpp). The role numbering is
// saved with those timings: append new roles, never reorder.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tachyon/kernels/cuda/fp8_rows.h"
#include "tachyon/kernels/cuda/gemm.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::model::gpu {

using kernels::cuda::bf16;
using kernels::cuda::GemmOutputType;

enum class LinearRole {
  kQkv, kO, kGateUp, kDownWithSilu, kLmHead,  // dense attention and MLP, the LM head
  kMlaQA, kMlaQB, kMlaKvA, kMlaO,              // MLA: q_a (or q_proj), q_b, kv_a, o_proj
  kRouter, kSharedGateUp, kSharedDownWithSilu  // MoE layers: the router, DeepSeek's shared expert
};
inline constexpr int kLinearRoleCount = 12;
const char* linear_role_name(LinearRole role);

// One role's product as the model has it: [m, k] @ [n, k]^T; n == 0: the model has none.
struct LinearShape {
  int64_t n = 0, k = 0;
};

// A role a block runs, for the runner's timing: its shape, and the input buffer (with its row
// width) that timing fills with a finite pattern first.
struct RoleInfo {
  LinearRole role = LinearRole::kQkv;
  LinearShape shape;
  const bf16* input = nullptr;
  int64_t input_width = 0;
};

// A linear layer's weight on the GPU: bf16 [n, k], or E4M3 [n, k] with one f32 factor per row
// and 128 columns (model/fp8_projections.h), held twice: [n, ceil(k / 128)] for the decode GEMV
// and [ceil(k / 128), n] for cuBLASLt's block-scaled FP8 product (kernels/cuda/gemm.h
// linear_fp8), 3% of the weight's bytes each. A bf16 pointer converts to it, so a block issues
// both kinds alike.
struct LinearWeight {
  const bf16* values = nullptr;
  const uint8_t* fp8 = nullptr;
  const float* scale = nullptr;           // [n, ceil(k / 128)]
  const float* scale_by_block = nullptr;  // the same factors, [ceil(k / 128), n]
  // Where every row's factors are one (per-channel and per-tensor checkpoints): that factor per
  // row, [n]. Its products of more rows than fp8_gemv serves quantize the input per token and run
  // cuBLASLt's per-row scaling (GemmRunner::linear_fp8_per_row), faster than the block scaling.
  const float* scale_by_row = nullptr;

  LinearWeight() = default;
  LinearWeight(const bf16* weight) : values(weight) {}  // NOLINT: implicit on purpose
  bool empty() const { return values == nullptr && fp8 == nullptr; }
};

class LinearDispatch {
 public:
  virtual ~LinearDispatch() = default;
  // out: [m, shape.n] (bf16 or f32) = in: [m, shape.k] bf16 @ weight: [shape.n, shape.k]^T (+ bias [shape.n]).
  virtual void linear(LinearRole role, LinearShape shape, void* out, GemmOutputType type, const bf16* in,
                      const LinearWeight& weight, const bf16* bias, int64_t m, cudaStream_t stream) = 0;
  // Whether linear() for this role, weight and m rows keeps no state across streams (our GEMV
  // kernels, not cuBLASLt's workspace or the FP8 staging buffers), so that it may run on a side
  // stream beside the block's (GpuBlock::run_branches). Fixed once the runner's choices are made.
  virtual bool stream_local(LinearRole role, LinearShape shape, const LinearWeight& weight, int64_t m) const = 0;
  // FP8 runs: the E4M3 rows (kernels/cuda/fp8_rows.h) the product of `role` at m rows reads when
  // it runs as an E4M3 x E4M3 product (not our GEMV, not the dequantized fallback); empty
  // otherwise, and in every bf16 run. The kernel producing that input may write them itself
  // (rms_norm.h, activation.h take an Fp8Rows) and call linear_quantized instead of linear():
  // the launch linear() spends quantizing its bf16 input is saved. Stable for the same
  // arguments once the runner's choices are made, so a producer and its consumer that ask apart
  // get the same answer.
  virtual kernels::cuda::Fp8Rows fp8_input(LinearRole role, LinearShape shape, const LinearWeight& weight,
                                           const bf16* bias, int64_t m) = 0;
  // Whether producers may quantize for the FP8 products at all (TACHYON_FP8_FUSED_QUANTIZE=0: no),
  // for those outside linear() (the MoE block's E4M3 expert products).
  virtual bool fuses_fp8_quantize() const = 0;
  // linear() (bf16 out) of the input a producer wrote into `rows`, what fp8_input(role, shape,
  // weight, bias, m) answered.
  virtual void linear_quantized(LinearShape shape, bf16* out, const LinearWeight& weight,
                                const bf16* bias, int64_t m, const kernels::cuda::Fp8Rows& rows,
                                cudaStream_t stream) = 0;
  // A product with no timed role (the indexer's): always cuBLASLt.
  virtual void gemm(void* out, GemmOutputType type, const bf16* in, const bf16* weight, const bf16* bias, int64_t m,
                    int64_t n, int64_t k, cudaStream_t stream) = 0;

  // A gate_up product (weight = [gate rows; up rows]) with SwiGLU as its epilogue:
  // act [m, shape.n / 2] = silu(gate) * up, bit for bit linear() then silu_and_mul, as one launch
  // of our GEMV (kernels/cuda/gemv.h gemv_silu) where it serves the role at m rows and the weight
  // rows are at most 4 KB (where it was measured to pay). Returns false, having issued nothing,
  // otherwise: the caller runs linear() and silu_and_mul.
  bool linear_silu(LinearRole role, LinearShape shape, bf16* act, const bf16* in, const LinearWeight& weight,
                   const bf16* bias, int64_t m, cudaStream_t stream);
  // linear_silu calls that issued the fused launch so far (for tests: whether the path ran).
  int64_t swiglu_epilogues() const { return swiglu_epilogues_; }

 private:
  int64_t swiglu_epilogues_ = 0;
};

}  // namespace tachyon::model::gpu
