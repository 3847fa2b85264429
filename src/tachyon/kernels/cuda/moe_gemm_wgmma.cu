// The grouped expert GEMM of moe.h on Hopper's wgmma, both operands in shared memory:
// moe_grouped_gemm_fp8 (E4M3 inputs and experts, the FP8 tensor cores) and moe_grouped_gemm_wgmma
// (bf16). mma.sync has no E4M3 form on sm_90a that ptxas does not emulate (moe_gemm.cu's header),
// and its bf16 form issues a warp's 16 x 8 tiles one by one where wgmma takes a warpgroup's.
//
// A CTA is one warpgroup (4 warps) and owns one 64-slot expert block of sorted_rows (one m64 wgmma
// tile) by 128 output columns. Each k step is 128 bytes of every row: 128 E4M3 values (one factor
// block) or 64 bf16 ones. The block's input rows (gathered through sorted_rows and a_row_divisor)
// and 128 weight rows land by cp.async in the 128-byte swizzled layout wgmma reads (16-byte chunk
// c of row r at chunk c ^ (r % 8)); three stages keep two steps in flight. Four wgmmas (k32 E4M3
// or k16 bf16, 32 bytes of each row apiece) consume a step. bf16 accumulates in the wgmma's f32
// registers throughout. E4M3 sums each factor block apart, then scales it by its row's and column's
// factors and adds it to the output's accumulators on the CUDA cores, in f32: the FP8 tensor cores
// sum with fewer bits than f32, and a block of 128 products at a time keeps that error at one
// block's.
// Test: tests/gpu/test_moe_kernels.cpp (MoeFp8ByFp8Gemm, MoeWgmmaGemm).
#include <atomic>

#include "tachyon/kernels/cuda/attention_common.cuh"
#include "tachyon/kernels/cuda/moe.h"

namespace tachyon::kernels::cuda {
namespace {

using attention_detail::cp_async_16;
using attention_detail::cp_async_4;
using attention_detail::cp_async_commit;
using attention_detail::cp_async_wait;
using attention_detail::pack_bf16;
using attention_detail::smem_u32;

constexpr int kBlockN = 128;
constexpr int kRowBytes = 128;  // of each row per k step: one 128-byte swizzle row
constexpr int kThreads = 128;   // one warpgroup
constexpr int kStages = 3;
constexpr int kATileBytes = kMoeBlockM * kRowBytes;
constexpr int kBTileBytes = kBlockN * kRowBytes;
constexpr int kAccumulators = kBlockN / 2;  // per thread: m64 x n128 f32 over 128 threads

// Shared memory, from a 1024-byte aligned base (the 128-byte swizzle repeats every 8 rows of 128
// bytes, and a descriptor's tile must start on that period).
struct Smem {
  uint8_t a[kStages][kATileBytes];
  uint8_t b[kStages][kBTileBytes];
  float a_scale[kStages][kMoeBlockM];  // E4M3: the step's factor block
  float b_scale[kStages][kBlockN];
  int32_t rows[kMoeBlockM];
};
constexpr size_t kSmemBytes = sizeof(Smem) + 1024;  // with the alignment slack

struct WgmmaGemmArgs {
  bf16* out;
  const uint8_t* a;      // [a_rows, k] E4M3 or bf16
  const float* a_scale;  // E4M3: [scale_cols, a_rows]
  const uint8_t* w;      // [num_experts, n, k] E4M3 or bf16
  const float* w_scale;  // E4M3: [num_experts, n, scale_cols]
  const int32_t* sorted_rows;
  const int32_t* block_expert;
  int64_t a_rows;
  int64_t a_row_divisor;
  int64_t n;
  int64_t k;
  int64_t scale_cols;
};

// The wgmma shared-memory descriptor of a K-major tile in the 128-byte swizzle: start address,
// leading byte offset (unused by this layout: 1), stride byte offset 1024 (the next 8 rows), mode 1.
__device__ __forceinline__ uint64_t smem_descriptor(uint32_t address) {
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// cp.async wrote the tiles through the generic proxy; wgmma reads them through the async proxy.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Keeps the compiler from moving reads or writes of the accumulators across the wgmma fences
// (the registers belong to the asynchronous wgmma between its issue and its wait).
__device__ __forceinline__ void fence_operands(float (&d)[kAccumulators]) {
#pragma unroll
  for (int i = 0; i < kAccumulators; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The 64 f32 accumulators of an m64n128 wgmma: the register list of its asm and the operands.
#define TACHYON_WGMMA_N128_D                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                         \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define TACHYON_WGMMA_N128_D_OPERANDS(d)                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),   \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// d (+)= A[64 x 32 bytes] . B[128 x 32 bytes]^T, f32 out; accumulate = false overwrites d.
template <bool kFp8>
__device__ __forceinline__ void wgmma_m64n128(float (&d)[kAccumulators], uint64_t a, uint64_t b, bool accumulate) {
  if constexpr (kFp8) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " TACHYON_WGMMA_N128_D ", %64, %65, p, 1, 1;\n}\n"
        : TACHYON_WGMMA_N128_D_OPERANDS(d)
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " TACHYON_WGMMA_N128_D ", %64, %65, p, 1, 1, 0, 0;\n}\n"
        : TACHYON_WGMMA_N128_D_OPERANDS(d)
        : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
  }
}

template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_wgmma_kernel(const WgmmaGemmArgs g) {
  const int expert = g.block_expert[blockIdx.y];
  if (expert < 0) return;
  constexpr int64_t kElem = kFp8 ? 1 : 2;  // bytes per value
  extern __shared__ uint8_t smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023));
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t my_row = tid < kMoeBlockM ? g.sorted_rows[static_cast<int64_t>(blockIdx.y) * kMoeBlockM + tid] : -1;
  if (tid < kMoeBlockM) s.rows[tid] = my_row;
  // The block's pairs are a prefix of its 64 slots: rows past them are not loaded (their sums
  // land in rows nobody writes).
  const int rows_used = __syncthreads_count(my_row >= 0);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBlockN;
  const int64_t row_bytes = g.k * kElem;
  const uint8_t* w = g.w + static_cast<int64_t>(expert) * g.n * row_bytes;
  const int k_steps = static_cast<int>((row_bytes + kRowBytes - 1) / kRowBytes);

  // This thread's 16-byte chunks of each step: the same rows and chunk column every step, so the
  // sources are worked out once (null: a padding row or a weight row past n, not loaded).
  constexpr int kAChunks = kATileBytes / 16 / kThreads;  // 4
  constexpr int kBChunks = kBTileBytes / 16 / kThreads;  // 8
  const int chunk = tid & 7;
  const uint8_t* a_src[kAChunks];
  const uint8_t* b_src[kBChunks];
#pragma unroll
  for (int i = 0; i < kAChunks; ++i) {
    const int r = (tid >> 3) + i * (kThreads / 8);
    const int32_t pair = s.rows[r];
    a_src[i] = r < rows_used && pair >= 0 ? g.a + (pair / g.a_row_divisor) * row_bytes + chunk * 16 : nullptr;
  }
#pragma unroll
  for (int i = 0; i < kBChunks; ++i) {
    const int64_t r = (tid >> 3) + i * (kThreads / 8);
    b_src[i] = n0 + r < g.n ? w + (n0 + r) * row_bytes + chunk * 16 : nullptr;
  }
  // E4M3 factors: thread t < 64 loads its block row's, every thread one weight row's.
  const int64_t a_scale_row = tid < kMoeBlockM && my_row >= 0 ? my_row / g.a_row_divisor : -1;
  const bool b_scale_valid = n0 + tid < g.n;
  const float* b_scale_src =
      kFp8 ? g.w_scale + (static_cast<int64_t>(expert) * g.n + (b_scale_valid ? n0 + tid : 0)) * g.scale_cols : nullptr;

  auto load = [&](int stage, int step) {
    const int64_t k0 = static_cast<int64_t>(step) * kRowBytes;
    const bool in_k = k0 + chunk * 16 < row_bytes;  // a 16-byte chunk is all in or all out
#pragma unroll
    for (int i = 0; i < kAChunks; ++i) {
      if (a_src[i] == nullptr) continue;
      const int r = (tid >> 3) + i * (kThreads / 8);
      cp_async_16(smem_u32(&s.a[stage][r * kRowBytes + ((chunk ^ (r & 7)) << 4)]), in_k ? a_src[i] + k0 : g.a, in_k);
    }
#pragma unroll
    for (int i = 0; i < kBChunks; ++i) {
      if (b_src[i] == nullptr) continue;
      const int r = (tid >> 3) + i * (kThreads / 8);
      cp_async_16(smem_u32(&s.b[stage][r * kRowBytes + ((chunk ^ (r & 7)) << 4)]), in_k ? b_src[i] + k0 : g.w, in_k);
    }
    if constexpr (kFp8) {
      if (tid < kMoeBlockM) {
        const bool valid = a_scale_row >= 0;
        cp_async_4(smem_u32(&s.a_scale[stage][tid]), valid ? g.a_scale + step * g.a_rows + a_scale_row : g.a_scale,
                   valid);
      }
      cp_async_4(smem_u32(&s.b_scale[stage][tid]), b_scale_valid ? b_scale_src + step : g.w_scale, b_scale_valid);
    }
  };

  float acc[kAccumulators] = {};
  float block_sum[kAccumulators] = {};  // E4M3: the current factor block's sums (bf16: unused)
  float (&mma_out)[kAccumulators] = kFp8 ? block_sum : acc;
  // Fragment of the m64 x n128 f32 result: warp w holds rows 16w + lane / 4 (+ 8), and of every
  // n8 tile j the columns 8j + 2 (lane % 4) (+ 1): element 4j + 2h + e is (row + 8h, col + e).
  const int frag_row = warp * 16 + (lane >> 2), frag_col = 2 * (lane & 3);

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < k_steps) load(st, st);
    cp_async_commit();
  }
  for (int step = 0; step < k_steps; ++step) {
    const int stage = step % kStages;
    // The stage refilled here was read by the previous step, which ended with a barrier.
    const int next = step + kStages - 1;
    if (next < k_steps) load(next % kStages, next);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    fence_proxy_async();
    __syncthreads();
    const uint64_t a_desc = smem_descriptor(smem_u32(s.a[stage]));
    const uint64_t b_desc = smem_descriptor(smem_u32(s.b[stage]));
    fence_operands(mma_out);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {  // 32 bytes further along the swizzled rows each
      wgmma_m64n128<kFp8>(mma_out, a_desc + 2 * kk, b_desc + 2 * kk, !kFp8 || kk > 0);
    }
    wgmma_commit();
    wgmma_wait_all();
    fence_operands(mma_out);
    if constexpr (kFp8) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float a_factor = s.a_scale[stage][frag_row + 8 * h];
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int i = 4 * j + 2 * h + e;
            acc[i] = fmaf(block_sum[i], a_factor * s.b_scale[stage][8 * j + frag_col + e], acc[i]);
          }
        }
      }
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int32_t pair = s.rows[frag_row + 8 * h];
    if (pair < 0) continue;
    bf16* out_row = g.out + static_cast<int64_t>(pair) * g.n;
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
      const int64_t col = n0 + 8 * j + frag_col;
      if (col >= g.n) continue;
      *reinterpret_cast<uint32_t*>(out_row + col) = pack_bf16(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }
  }
}

template <bool kFp8>
void launch(const char* name, const WgmmaGemmArgs& args, int64_t capacity, cudaStream_t stream) {
  const int64_t k_multiple = kFp8 ? 16 : 8;  // one 16-byte chunk
  TACHYON_CHECK(args.n > 0 && args.n % 8 == 0 && args.k > 0 && args.k % k_multiple == 0)
      << name << ": n " << args.n << " must be a positive multiple of 8 and k " << args.k << " of " << k_multiple;
  TACHYON_CHECK(args.a_row_divisor >= 1 && args.a_rows >= 1)
      << name << ": a_row_divisor " << args.a_row_divisor << ", a_rows " << args.a_rows;
  TACHYON_CHECK(!kFp8 || (args.a_scale != nullptr && args.w_scale != nullptr))
      << name << ": no factors for the inputs or the experts";
  TACHYON_CHECK(capacity >= 0 && capacity % kMoeBlockM == 0 && capacity / kMoeBlockM <= 65535)
      << name << ": capacity " << capacity << " must be a multiple of " << kMoeBlockM << " (moe_sorted_capacity)";
  for (const void* p : {static_cast<const void*>(args.out), static_cast<const void*>(args.a),
                        static_cast<const void*>(args.w)}) {
    TACHYON_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0) << name << ": out, a and w must be 16-byte aligned";
  }
  if (capacity == 0) return;
  // Above the 48 KB a kernel gets without asking: raised once per device (tensor-parallel ranks
  // launch it on several).
  static std::atomic<uint64_t> smem_raised{0};
  attention_detail::raise_smem_limit_once(grouped_gemm_wgmma_kernel<kFp8>, kSmemBytes, smem_raised);
  const dim3 grid(static_cast<unsigned>((args.n + kBlockN - 1) / kBlockN),
                  static_cast<unsigned>(capacity / kMoeBlockM));
  grouped_gemm_wgmma_kernel<kFp8><<<grid, kThreads, kSmemBytes, stream>>>(args);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void moe_grouped_gemm_fp8(bf16* out, const uint8_t* a, const float* a_scale, int64_t a_rows, const uint8_t* w,
                          const float* w_scale, const int32_t* sorted_rows, const int32_t* block_expert,
                          int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k, cudaStream_t stream) {
  launch<true>("moe_grouped_gemm_fp8",
               WgmmaGemmArgs{out, a, a_scale, w, w_scale, sorted_rows, block_expert, a_rows, a_row_divisor, n, k,
                             (k + 127) / 128},
               capacity, stream);
}

void moe_grouped_gemm_wgmma(bf16* out, const bf16* a, int64_t a_rows, const bf16* w, const int32_t* sorted_rows,
                            const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k,
                            cudaStream_t stream) {
  launch<false>("moe_grouped_gemm_wgmma",
                WgmmaGemmArgs{out, reinterpret_cast<const uint8_t*>(a), nullptr, reinterpret_cast<const uint8_t*>(w),
                              nullptr, sorted_rows, block_expert, a_rows, a_row_divisor, n, k, 0},
                capacity, stream);
}

}  // namespace tachyon::kernels::cuda
