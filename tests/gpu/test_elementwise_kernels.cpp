// The per-layer elementwise CUDA kernels (embedding, rms_norm, add_rms_norm, silu_and_mul,
// rope_store_kv) against their CPU twins, which are the spec. Inputs are bf16-representable, the
// reference runs in f32, and outputs are compared by relative error: bf16 outputs carry one to
// three roundings of ~2^-9 each, observed ~2e-3, so kBf16Tolerance (1e-2) holds with margin;
// copies (embedding, the v rows) must be bit-exact, and rows a kernel must not touch must keep
// their poison. Sizes are awkward on purpose: rows 1..300, dims not a multiple of 16 (2056).
// Run on the GPU machine: build/tests/gpu_elementwise_kernels (TACHYON_TEST_SEED replays a run).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/kernels/attention.h"
#include "tachyon/kernels/cuda/activation.h"
#include "tachyon/kernels/cuda/embedding.h"
#include "tachyon/kernels/cuda/rms_norm.h"
#include "tachyon/kernels/cuda/rope_store_kv.h"
#include "tachyon/kernels/linear.h"
#include "tachyon/kernels/rms_norm.h"
#include "tachyon/kernels/rope.h"
#include "tachyon/model/rope.h"
#include "tachyon/tensor/fp8.h"

namespace tachyon::gpu_test {
namespace {

namespace cpu = kernels::cpu;
namespace gpu = kernels::cuda;

const std::vector<int64_t> kRows = {1, 3, 17, 97, 300};
const std::vector<int64_t> kDims = {64, 128, 896, 1536, 2056, 4096, 5120};

uint16_t bits_of(bf16 value) {
  uint16_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

TEST(Embedding, CopiesTableRowsBitForBit) {
  auto gen = rng(1);
  const int64_t vocab = 1000;
  for (int64_t dim : kDims) {
    const std::vector<float> table = random_bf16_values(gen, vocab * dim);
    DeviceArray<bf16> table_d = upload_bf16(table);
    for (int64_t rows : kRows) {
      SCOPED_TRACE(testing::Message() << "rows " << rows << " dim " << dim);
      std::vector<int32_t> ids(rows);
      std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
      for (int32_t& id : ids) id = pick(gen);
      ids.front() = vocab - 1;  // both ends of the table
      ids.back() = 0;
      std::vector<float> ref(rows * dim);
      cpu::embedding(ref.data(), ids.data(), table.data(), rows, vocab, dim);
      DeviceArray<int32_t> ids_d = upload(ids);
      DeviceArray<bf16> out(rows * dim);
      gpu::embedding(out.data(), ids_d.data(), table_d.data(), rows, dim, nullptr);
      EXPECT_TRUE(download_f32(out) == ref);
    }
  }
}

// The vocab-parallel shard: rows [begin, begin + shard) of the full table; ids outside give zeros,
// so the shards' outputs summed over ranks equal the full lookup.
TEST(Embedding, ShardWritesItsRowsAndZerosElsewhere) {
  auto gen = rng(11);
  const int64_t vocab = 1024, dim = 136, rows = 37, ranks = 4, shard = vocab / ranks;
  const std::vector<float> table = random_bf16_values(gen, vocab * dim);
  std::vector<int32_t> ids(rows);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  for (int32_t& id : ids) id = pick(gen);
  ids[0] = 0, ids[1] = shard - 1, ids[2] = shard, ids[3] = vocab - 1;  // both edges of a shard
  DeviceArray<int32_t> ids_d = upload(ids);
  std::vector<float> sum(rows * dim, 0.0f);
  for (int64_t r = 0; r < ranks; ++r) {
    SCOPED_TRACE(testing::Message() << "rank " << r);
    const std::vector<float> part(table.begin() + r * shard * dim, table.begin() + (r + 1) * shard * dim);
    DeviceArray<bf16> part_d = upload_bf16(part);
    DeviceArray<bf16> out(rows * dim);
    gpu::embedding_shard(out.data(), ids_d.data(), part_d.data(), rows, dim, r * shard, shard, nullptr);
    const std::vector<float> got = download_f32(out);
    for (int64_t i = 0; i < rows; ++i) {
      const bool mine = ids[i] >= r * shard && ids[i] < (r + 1) * shard;
      for (int64_t d = 0; d < dim; ++d) {
        const float want = mine ? table[ids[i] * dim + d] : 0.0f;
        ASSERT_EQ(got[i * dim + d], want) << "row " << i << " id " << ids[i] << " col " << d;
        sum[i * dim + d] += got[i * dim + d];
      }
    }
  }
  std::vector<float> full(rows * dim);
  cpu::embedding(full.data(), ids.data(), table.data(), rows, vocab, dim);
  EXPECT_TRUE(sum == full);
}

// rms_norm, out of place and in place, over kDims and the dims that need 2, 4 and 8 vectors
// per thread (8200, 16392, 32768).
TEST(RmsNorm, MatchesCpuOutOfPlaceAndInPlace) {
  auto gen = rng(2);
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int64_t dim : kDims) {
    for (int64_t rows : kRows) shapes.emplace_back(rows, dim);
  }
  for (int64_t dim : {8200, 16392, 32768}) shapes.emplace_back(3, dim);
  const float eps = 1e-6f;
  for (auto [rows, dim] : shapes) {
    SCOPED_TRACE(testing::Message() << "rows " << rows << " dim " << dim);
    const std::vector<float> in = random_bf16_values(gen, rows * dim, 3.0f);
    std::vector<float> weight = random_floats(gen, dim, 0.2f);
    for (float& w : weight) w += 1.0f;
    weight = round_to_bf16(weight);
    std::vector<float> ref(rows * dim);
    cpu::rms_norm(ref.data(), in.data(), weight.data(), rows, dim, eps);

    DeviceArray<bf16> in_d = upload_bf16(in), weight_d = upload_bf16(weight), out(rows * dim);
    gpu::rms_norm(out.data(), in_d.data(), weight_d.data(), rows, dim, eps, nullptr);
    EXPECT_LT(relative_error(download_f32(out), ref), kBf16Tolerance);
    gpu::rms_norm(in_d.data(), in_d.data(), weight_d.data(), rows, dim, eps, nullptr);
    EXPECT_LT(relative_error(download_f32(in_d), ref), kBf16Tolerance);
  }
}

// residual <- bf16(residual + in) exactly (one f32 add, one rounding, as torch does), and out
// is rms_norm of that rounded sum.
TEST(AddRmsNorm, RoundsTheSumThenNormalizesIt) {
  auto gen = rng(3);
  const float eps = 1e-5f;
  for (int64_t dim : kDims) {
    for (int64_t rows : kRows) {
      SCOPED_TRACE(testing::Message() << "rows " << rows << " dim " << dim);
      const std::vector<float> residual = random_bf16_values(gen, rows * dim, 4.0f);
      const std::vector<float> in = random_bf16_values(gen, rows * dim, 1.0f);
      const std::vector<float> weight = random_bf16_values(gen, dim, 1.0f);
      std::vector<float> sum = residual;
      cpu::add_inplace(sum.data(), in.data(), rows * dim);
      sum = round_to_bf16(sum);
      std::vector<float> ref(rows * dim);
      cpu::rms_norm(ref.data(), sum.data(), weight.data(), rows, dim, eps);

      DeviceArray<bf16> residual_d = upload_bf16(residual), in_d = upload_bf16(in), weight_d = upload_bf16(weight);
      DeviceArray<bf16> out(rows * dim);
      gpu::add_rms_norm(out.data(), residual_d.data(), in_d.data(), weight_d.data(), rows, dim, eps, nullptr);
      EXPECT_TRUE(download_f32(residual_d) == sum);
      EXPECT_LT(relative_error(download_f32(out), ref), kBf16Tolerance);
    }
  }
}

TEST(SiluAndMul, MatchesCpu) {
  auto gen = rng(4);
  for (int64_t dim : kDims) {
    for (int64_t rows : kRows) {
      SCOPED_TRACE(testing::Message() << "rows " << rows << " dim " << dim);
      // Scale 4 reaches gates of +-15, where silu is ~0 or ~the identity.
      const std::vector<float> gate_up = random_bf16_values(gen, rows * 2 * dim, 4.0f);
      std::vector<float> ref(rows * dim);
      cpu::silu_and_mul(ref.data(), gate_up.data(), rows, dim);
      DeviceArray<bf16> gate_up_d = upload_bf16(gate_up), out(rows * dim);
      gpu::silu_and_mul(out.data(), gate_up_d.data(), rows, dim, nullptr);
      EXPECT_LT(relative_error(download_f32(out), ref), kBf16Tolerance);
    }
  }
}

TEST(ElementwiseKernels, EmptyInputsLaunchNothing) {
  gpu::embedding(nullptr, nullptr, nullptr, 0, 4096, nullptr);
  gpu::rms_norm(nullptr, nullptr, nullptr, 0, 4096, 1e-6f, nullptr);
  gpu::add_rms_norm(nullptr, nullptr, nullptr, nullptr, 0, 4096, 1e-6f, nullptr);
  gpu::silu_and_mul(nullptr, nullptr, 0, 4096, nullptr);
  gpu::rope_store_kv(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                     gpu::RopeStoreKvShape{0, 32, 8, 128, 1e-6f}, nullptr);
  TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(ElementwiseKernels, RejectShapesTheVectorLoadsCannotServe) {
  EXPECT_THROW(gpu::embedding(nullptr, nullptr, nullptr, 1, 12, nullptr), Error);
  EXPECT_THROW(gpu::rms_norm(nullptr, nullptr, nullptr, 1, 12, 1e-6f, nullptr), Error);
  EXPECT_THROW(gpu::rms_norm(nullptr, nullptr, nullptr, 1, 32776, 1e-6f, nullptr), Error);
  EXPECT_THROW(gpu::silu_and_mul(nullptr, nullptr, 1, 100, nullptr), Error);
  EXPECT_THROW(gpu::rope_store_kv(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                  gpu::RopeStoreKvShape{1, 8, 2, 96, 1e-6f}, nullptr),
               Error);
}

// --- rope_store_kv: q/k norm + RoPE + paged K/V write, against rms_norm, apply_rope and
// store_kv_paged of the CPU reference.

struct RopeCase {
  int32_t head_dim, num_heads, num_kv_heads;
};

// A model's inv_freq table: Qwen3-like (theta 1e6) or Llama-3.1-like (theta 5e5, llama3
// scaling); the kernel must only read the table, whatever made it.
std::vector<float> inv_freq_for(int32_t head_dim, bool llama3) {
  model::ModelConfig config;
  config.head_dim = head_dim;
  config.rope_theta = llama3 ? 500000.0 : 1000000.0;
  if (llama3) {
    config.rope_scaling.type = model::RopeScalingType::kLlama3;
    config.rope_scaling.factor = 8.0;
    config.rope_scaling.low_freq_factor = 1.0;
    config.rope_scaling.high_freq_factor = 4.0;
    config.rope_scaling.original_max_position_embeddings = 8192;
  }
  return model::rope_inv_freq(config);
}

void check_rope_store_kv(const RopeCase& c, int64_t tokens, bool qk_norm, bool llama3, std::mt19937_64& gen) {
  const int64_t d = c.head_dim, q_size = c.num_heads * d, kv_size = c.num_kv_heads * d;
  const int64_t row = q_size + 2 * kv_size, num_slots = 2 * tokens + 5;
  const float eps = 1e-6f;
  const std::vector<float> qkv = random_bf16_values(gen, tokens * row, 2.0f);
  std::vector<float> q_norm = random_floats(gen, d, 0.3f), k_norm = random_floats(gen, d, 0.3f);
  for (float& w : q_norm) w += 1.0f;
  for (float& w : k_norm) w += 1.0f;
  q_norm = round_to_bf16(q_norm);
  k_norm = round_to_bf16(k_norm);
  const std::vector<float> inv_freq = inv_freq_for(c.head_dim, llama3);
  std::vector<int32_t> positions(tokens);
  std::uniform_int_distribution<int32_t> pick_position(0, 100000);
  for (int32_t& p : positions) p = pick_position(gen);
  positions.front() = 100000;  // the largest angles, where a fast sin would fail
  // Distinct slots out of twice as many (the rest must stay poisoned); every 5th token is padding.
  std::vector<int32_t> slots(num_slots);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), gen);
  slots.resize(tokens);
  for (int64_t t = 2; t < tokens; t += 5) slots[t] = -1;

  // CPU reference: split the rows, norm, rotate; v as given.
  std::vector<float> q(tokens * q_size), k(tokens * kv_size), v(tokens * kv_size);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* src = qkv.data() + t * row;
    std::copy(src, src + q_size, q.begin() + t * q_size);
    std::copy(src + q_size, src + q_size + kv_size, k.begin() + t * kv_size);
    std::copy(src + q_size + kv_size, src + row, v.begin() + t * kv_size);
  }
  if (qk_norm) {
    cpu::rms_norm(q.data(), q.data(), q_norm.data(), tokens * c.num_heads, d, eps);
    cpu::rms_norm(k.data(), k.data(), k_norm.data(), tokens * c.num_kv_heads, d, eps);
  }
  const std::vector<int64_t> positions64(positions.begin(), positions.end());
  cpu::apply_rope(q.data(), positions64.data(), inv_freq.data(), tokens, c.num_heads, d);
  cpu::apply_rope(k.data(), positions64.data(), inv_freq.data(), tokens, c.num_kv_heads, d);

  DeviceArray<bf16> qkv_d = upload_bf16(qkv), q_norm_d = upload_bf16(q_norm), k_norm_d = upload_bf16(k_norm);
  DeviceArray<float> inv_freq_d = upload(inv_freq);
  DeviceArray<int32_t> positions_d = upload(positions), slots_d = upload(slots);
  DeviceArray<bf16> q_out(tokens * q_size), k_cache(num_slots * kv_size), v_cache(num_slots * kv_size);
  const gpu::RopeStoreKvShape shape{tokens, c.num_heads, c.num_kv_heads, c.head_dim, eps};
  gpu::rope_store_kv(q_out.data(), k_cache.data(), v_cache.data(), qkv_d.data(), qk_norm ? q_norm_d.data() : nullptr,
                     qk_norm ? k_norm_d.data() : nullptr, inv_freq_d.data(), positions_d.data(), slots_d.data(), shape,
                     nullptr);

  // q: every token's row, each within tolerance (a wrong large angle shows in its own row).
  const std::vector<float> q_gpu = download_f32(q_out);
  EXPECT_LT(relative_error(q_gpu, q), kBf16Tolerance);
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<float> got(q_gpu.begin() + t * q_size, q_gpu.begin() + (t + 1) * q_size);
    const std::vector<float> want(q.begin() + t * q_size, q.begin() + (t + 1) * q_size);
    EXPECT_LT(relative_error(got, want), kBf16Tolerance) << "q of token " << t << " at " << positions[t];
  }
  // Cache rows: written ones match (k within tolerance, v bit-exact), the others keep their poison.
  std::vector<int64_t> token_of_slot(num_slots, -1);
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] >= 0) token_of_slot[slots[t]] = t;
  }
  const std::vector<bf16> k_bits = k_cache.download(), v_bits = v_cache.download();
  int64_t untouched_changed = 0;
  for (int64_t s = 0; s < num_slots; ++s) {
    const int64_t t = token_of_slot[s];
    if (t < 0) {
      for (int64_t i = s * kv_size; i < (s + 1) * kv_size; ++i) {
        untouched_changed += bits_of(k_bits[i]) != 0xFFFF || bits_of(v_bits[i]) != 0xFFFF;
      }
      continue;
    }
    std::vector<float> k_got(kv_size), v_got(kv_size);
    for (int64_t i = 0; i < kv_size; ++i) {
      k_got[i] = __bfloat162float(k_bits[s * kv_size + i]);
      v_got[i] = __bfloat162float(v_bits[s * kv_size + i]);
    }
    const std::vector<float> k_want(k.begin() + t * kv_size, k.begin() + (t + 1) * kv_size);
    const std::vector<float> v_want(v.begin() + t * kv_size, v.begin() + (t + 1) * kv_size);
    EXPECT_LT(relative_error(k_got, k_want), kBf16Tolerance) << "k of token " << t << " at " << positions[t];
    EXPECT_TRUE(v_got == v_want) << "v of token " << t;
  }
  EXPECT_EQ(untouched_changed, 0) << "elements written in cache rows no token maps to";
}

TEST(RopeStoreKv, MatchesNormRopeAndStoreOfTheCpu) {
  auto gen = rng(5);
  // Qwen2-0.5B (14/2 x 64), GQA 4:1 and 4:1 at 32 heads, MHA, head_dim 256, and 80 heads of 256
  // (more lanes than a block holds, so the kernel loops over heads).
  const std::vector<RopeCase> cases = {{64, 14, 2}, {128, 8, 2}, {128, 32, 8}, {128, 16, 16}, {256, 8, 2}, {256, 64, 8}};
  for (const RopeCase& c : cases) {
    for (int64_t tokens : kRows) {
      for (bool qk_norm : {false, true}) {
        for (bool llama3 : {false, true}) {
          SCOPED_TRACE(testing::Message() << "head_dim " << c.head_dim << " heads " << c.num_heads << "/"
                                          << c.num_kv_heads << " tokens " << tokens << " qk_norm " << qk_norm
                                          << " llama3 " << llama3);
          check_rope_store_kv(c, tokens, qk_norm, llama3, gen);
        }
      }
    }
  }
}

// rope_store_kv_fp8 writes the FP8 cache: q bit for bit as rope_store_kv writes it, and per
// (slot, kv head) the codes and factor the CPU codec (tensor/fp8.h) gives for the bf16 row
// rope_store_kv writes, byte for byte; rows no token maps to keep their poison.
void check_rope_store_kv_fp8(const RopeCase& c, int64_t tokens, bool qk_norm, std::mt19937_64& gen) {
  const int64_t d = c.head_dim, q_size = c.num_heads * d, kv_size = c.num_kv_heads * d;
  const int64_t row = q_size + 2 * kv_size, num_slots = 2 * tokens + 5;
  std::vector<float> qkv = random_bf16_values(gen, tokens * row, 2.0f);
  for (int64_t i = q_size; i < q_size + d; ++i) qkv[i] = 0.0f;  // token 0's first k head: an all-zero row, factor 1
  std::vector<float> norm = random_floats(gen, d, 0.3f);
  for (float& w : norm) w += 1.0f;
  norm = round_to_bf16(norm);
  const std::vector<float> inv_freq = inv_freq_for(c.head_dim, true);
  std::vector<int32_t> positions(tokens);
  std::uniform_int_distribution<int32_t> pick_position(0, 100000);
  for (int32_t& p : positions) p = pick_position(gen);
  std::vector<int32_t> slots(num_slots);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), gen);
  slots.resize(tokens);
  for (int64_t t = 2; t < tokens; t += 5) slots[t] = -1;

  DeviceArray<bf16> qkv_d = upload_bf16(qkv), norm_d = upload_bf16(norm);
  DeviceArray<float> inv_freq_d = upload(inv_freq);
  DeviceArray<int32_t> positions_d = upload(positions), slots_d = upload(slots);
  const gpu::RopeStoreKvShape shape{tokens, c.num_heads, c.num_kv_heads, c.head_dim, 1e-6f};
  const bf16* qk_norm_d = qk_norm ? norm_d.data() : nullptr;
  DeviceArray<bf16> q_bf16(tokens * q_size), k_bf16(num_slots * kv_size), v_bf16(num_slots * kv_size);
  gpu::rope_store_kv(q_bf16.data(), k_bf16.data(), v_bf16.data(), qkv_d.data(), qk_norm_d, qk_norm_d, inv_freq_d.data(),
                     positions_d.data(), slots_d.data(), shape, nullptr);
  DeviceArray<bf16> q_fp8(tokens * q_size);
  DeviceArray<uint8_t> k_codes(num_slots * kv_size), v_codes(num_slots * kv_size);
  DeviceArray<float> k_factors(num_slots * c.num_kv_heads), v_factors(num_slots * c.num_kv_heads);
  gpu::rope_store_kv_fp8(q_fp8.data(), {k_codes.data(), v_codes.data(), k_factors.data(), v_factors.data()},
                         qkv_d.data(), qk_norm_d, qk_norm_d, inv_freq_d.data(), positions_d.data(), slots_d.data(),
                         shape, nullptr);

  const std::vector<bf16> q_want = q_bf16.download(), q_got = q_fp8.download();
  int64_t q_differs = 0;
  for (size_t i = 0; i < q_want.size(); ++i) q_differs += bits_of(q_want[i]) != bits_of(q_got[i]);
  EXPECT_EQ(q_differs, 0) << "q differs from rope_store_kv's";

  std::vector<bool> written(num_slots, false);
  for (int32_t slot : slots) {
    if (slot >= 0) written[slot] = true;
  }
  const std::vector<bf16> k_rows = k_bf16.download(), v_rows = v_bf16.download();
  const std::vector<uint8_t> k_got = k_codes.download(), v_got = v_codes.download();
  const std::vector<float> kf_got = k_factors.download(), vf_got = v_factors.download();
  int64_t code_mismatches = 0, factor_mismatches = 0, untouched_changed = 0;
  for (int64_t s = 0; s < num_slots; ++s) {
    for (int64_t h = 0; h < c.num_kv_heads; ++h) {
      const int64_t at = (s * c.num_kv_heads + h) * d, factor_at = s * c.num_kv_heads + h;
      for (int which = 0; which < 2; ++which) {
        const std::vector<uint8_t>& got = which == 0 ? k_got : v_got;
        const float factor = (which == 0 ? kf_got : vf_got)[factor_at];
        if (!written[s]) {
          for (int64_t i = 0; i < d; ++i) untouched_changed += got[at + i] != 0xFF;
          untouched_changed += !std::isnan(factor);
          continue;
        }
        const std::vector<bf16>& rows = which == 0 ? k_rows : v_rows;
        std::vector<float> values(d);
        for (int64_t i = 0; i < d; ++i) values[i] = __bfloat162float(rows[at + i]);
        const Fp8BlockWeight want = quantize_fp8_blocks(values, 1, d, 1, d);
        for (int64_t i = 0; i < d; ++i) code_mismatches += got[at + i] != want.data[i];
        factor_mismatches += factor != want.scale_inv[0];
      }
    }
  }
  EXPECT_EQ(code_mismatches, 0);
  EXPECT_EQ(factor_mismatches, 0);
  EXPECT_EQ(untouched_changed, 0) << "bytes written in cache rows no token maps to";
}

TEST(RopeStoreKvFp8, CodesAndFactorsAreTheCpuCodecsOfTheBf16Rows) {
  auto gen = rng(6);
  const std::vector<RopeCase> cases = {{64, 14, 2}, {128, 32, 8}, {128, 16, 16}, {256, 64, 8}};
  for (const RopeCase& c : cases) {
    for (int64_t tokens : kRows) {
      for (bool qk_norm : {false, true}) {
        SCOPED_TRACE(testing::Message() << "head_dim " << c.head_dim << " heads " << c.num_heads << "/"
                                        << c.num_kv_heads << " tokens " << tokens << " qk_norm " << qk_norm);
        check_rope_store_kv_fp8(c, tokens, qk_norm, gen);
      }
    }
  }
}

}  // namespace
}  // namespace tachyon::gpu_test
