// The FP8 latent cache's row (--kv-cache-dtype fp8 on latent attention): FlashMLA's FP8 layout,
// c_kv as E4M3 codes with one f32 factor per kFp8LatentGroup values (amax / 448, as the CPU
// reference's runner/paged_attention_backend.h rounds it), the factors padded to a multiple of 4
// so every plane of a token stays 16-byte aligned, k_pe kept in bf16; and DSA's index key as E4M3
// codes with one factor per key. At DeepSeek's 512 + 64 a latent row takes 512 + 16 + 128 = 656
// bytes against 1152 in bf16. Plain constants with no dependencies, so the GPU kernels
// (kernels/cuda/mla_attention.h) and the byte floors (model/decode_bytes.h) read the one layout.
#pragma once

#include <cstdint>

#include "tachyon/kernels/dcp_layout.h"  // TACHYON_HOST_DEVICE

namespace tachyon::kernels {

constexpr int32_t kFp8LatentGroup = 128;

// f32 factors a token's c_kv keeps (one per kFp8LatentGroup values, padded to a multiple of 4).
TACHYON_HOST_DEVICE constexpr int32_t fp8_latent_scale_stride(int32_t kv_lora_rank) {
  return ((kv_lora_rank + kFp8LatentGroup - 1) / kFp8LatentGroup + 3) / 4 * 4;
}

// Bytes of one token's latent row, and of one index key, in the FP8 cache.
constexpr int64_t fp8_latent_row_bytes(int32_t kv_lora_rank, int32_t rope_dim) {
  return kv_lora_rank + 2 * int64_t{rope_dim} + 4 * int64_t{fp8_latent_scale_stride(kv_lora_rank)};
}
constexpr int64_t fp8_index_key_bytes(int32_t index_head_dim) { return index_head_dim + 4; }

}  // namespace tachyon::kernels
