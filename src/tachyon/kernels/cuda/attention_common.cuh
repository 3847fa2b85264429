// Device helpers shared by the decode and prefill attention kernels: cp.async copies into
// swizzled shared-memory tiles, ldmatrix, the bf16 m16n8k16 tensor-core MMA, and the exp2 that
// the online softmax runs on. Both kernels hold K and V tiles as [rows][head_dim] bf16 with the
// 16-byte chunks of each row XOR-swizzled by (row % 8), so that the 8 rows an ldmatrix reads
// (and the chunks a warp's cp.async writes) fall in 8 different bank groups.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16): with g = lane / 4 and c = lane % 4,
//   A (16x16, row-major): a0 = (row g, k 2c..2c+1), a1 = (g+8, 2c), a2 = (g, 2c+8), a3 = (g+8, 2c+8)
//   B (16x8, "col"):      b0 = (k 2c..2c+1, col g), b1 = (k 2c+8..2c+9, col g)
//   C (16x8, f32):        c0,c1 = (row g, cols 2c, 2c+1), c2,c3 = (row g+8, cols 2c, 2c+1)
// so the C fragments of two adjacent n8 tiles of S = Q K^T are, packed to bf16, exactly the A
// fragment of P for the P V product (flash-attention 2 keeps P in registers this way).
#pragma once

#include <atomic>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda::attention_detail {

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// log2(e): scores are scaled by scale * log2(e) so the softmax can use exp2.
constexpr float kLog2e = 1.4426950408889634f;

// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows][kHeadDim] bf16 tile.
template <int kHeadDim>
__device__ __forceinline__ int swizzled(int row, int chunk) {
  return row * kHeadDim + ((chunk ^ (row & 7)) << 3);
}

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// 16-byte global -> shared copy that bypasses L1; when !valid it reads nothing and writes zeros
// (so rows past a sequence's end never carry stale cache bytes, NaN included, into the math).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// 4-byte global -> shared copy (through L1: .cg takes 16 bytes only); zeros when !valid.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `kPending` committed groups of this thread are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a (16x16 bf16) * b (16x8 bf16), f32 accumulate.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a (16x16 f16) * b (16x8 f16), f32 accumulate (the FP8 KV cache's decode: E4M3 codes are
// f16 values, so they enter the tensor cores exactly, one conversion per two codes).
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two f32 -> one register of two f16, `lo` in the low half.
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 pair = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// Two f32 -> one register of two bf16, `lo` in the low half (the lower k / column index).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// 2^x in one MUFU instruction; exp2(-inf) = 0, which the masking relies on.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Raises `kernel`'s dynamic shared-memory limit to `bytes` once per device (a driver call per
// launch would show in eager decode steps). `done`: one bit per device ordinal, owned by the caller.
template <typename Kernel>
void raise_smem_limit_once(Kernel kernel, size_t bytes, std::atomic<uint64_t>& done) {
  int device = 0;
  TACHYON_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device & 63);
  if (done.load(std::memory_order_acquire) & bit) return;
  TACHYON_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  done.fetch_or(bit, std::memory_order_release);
}

}  // namespace tachyon::kernels::cuda::attention_detail
