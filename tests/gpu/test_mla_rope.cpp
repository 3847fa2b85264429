// MLA's latent store and query rope (kernels/cuda/mla_rope.h) against the CPU model itself:
// model::mla_project_latent runs on weights that make its projections selections
// (kv_a_proj_with_mqa picks x's first rank + rope values, q_proj the rest, each weight 1 or 0,
// so the f32 products are exact), which turns its input x = [kv_a | q] into exactly the bf16
// rows the GPU kernels read. Its `latent` rows are what the CPU cache holds and its q_pe what
// the absorbed query carries, so the GPU cache must hold the same values to bf16 rounding:
// c_kv to kBf16Tolerance (HF's two bf16 roundings in the norm), k_pe and q_pe to one rounding
// (2^-9 per element, 2.5e-3 with margin for the cos/sin ulps), interleaved or not, with and
// without YaRN's attention scaling. Rows no token maps to, padding tokens' rows and q's nope
// part stay poisoned. Run on the GPU machine: build/tests/gpu_mla_rope (TACHYON_TEST_SEED
// replays a run).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/kernels/cuda/mla_rope.h"
#include "tachyon/model/mla.h"
#include "tachyon/model/rope.h"
#include "tachyon/tensor/fp8.h"

namespace tachyon::gpu_test {
namespace {

namespace gpu = kernels::cuda;

// The rotated parts are rounded to bf16 once, from f32 values that may differ from the CPU's in the
// last f32 bit (sincosf at angles near 1e5 rad); a value next to a rounding boundary then lands one
// bf16 ulp (2^-8 relative) away. Over 8 values that reads as up to ~3.2e-3; a wrong layout is O(1).
constexpr double kOneRounding = 4e-3;

struct MlaShape {
  int32_t rank, rope, heads, nope;
};

uint16_t bits_of(bf16 value) {
  uint16_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

std::vector<float> slice(const std::vector<float>& v, int64_t begin, int64_t count) {
  return std::vector<float>(v.begin() + begin, v.begin() + begin + count);
}

model::ModelConfig mla_config(const MlaShape& s, bool interleave, bool yarn) {
  model::ModelConfig c;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.heads;
  c.qk_nope_head_dim = s.nope;
  c.qk_rope_head_dim = s.rope;
  c.head_dim = s.nope + s.rope;
  c.v_head_dim = s.nope;
  c.kv_lora_rank = s.rank;
  c.q_lora_rank = 0;
  c.hidden_size = (s.rank + s.rope) + s.heads * c.head_dim;  // x = [kv_a | q]
  c.rms_norm_eps = 1e-5;  // the decoder norms'; the latent norms use kMlaLatentNormEps whatever this says
  c.rope_theta = 10000.0;
  c.rope_interleave = interleave;
  if (yarn) {  // DeepSeek-V3's yarn, but without mscale_all_dim, so that attention_scaling != 1
    c.rope_scaling.type = model::RopeScalingType::kYarn;
    c.rope_scaling.factor = 40.0;
    c.rope_scaling.original_max_position_embeddings = 4096;
    c.rope_scaling.beta_fast = 32.0;
    c.rope_scaling.beta_slow = 1.0;
    c.rope_scaling.mscale = 1.0;
  }
  return c;
}

// Selection weights: kv_a_proj row r reads x[r], q_proj row r reads x[rank + rope + r].
model::LayerWeights selection_weights(const model::ModelConfig& c, std::mt19937_64& gen) {
  const int64_t hidden = c.hidden_size, latent_width = c.kv_lora_rank + c.qk_rope_head_dim;
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  model::LayerWeights w;
  w.kv_a_proj.assign(static_cast<size_t>(latent_width * hidden), 0.0f);
  for (int64_t r = 0; r < latent_width; ++r) w.kv_a_proj[static_cast<size_t>(r * hidden + r)] = 1.0f;
  w.q_b_proj.assign(static_cast<size_t>(q_width * hidden), 0.0f);
  for (int64_t r = 0; r < q_width; ++r) w.q_b_proj[static_cast<size_t>(r * hidden + latent_width + r)] = 1.0f;
  w.kv_a_norm = random_floats(gen, static_cast<size_t>(c.kv_lora_rank), 0.3f);
  for (float& v : w.kv_a_norm) v += 1.0f;
  w.kv_a_norm = round_to_bf16(w.kv_a_norm);
  w.kv_b_proj.assign(static_cast<size_t>(c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank),
                     0.0f);  // unused by mla_project_latent; sized for its check
  return w;
}

// The FP8 cache's store (mla_store_latent_fp8, run by `store` into poisoned planes) of the rows
// whose bf16 store gave `bf16_cache`: it quantizes exactly that bf16 c_kv, so each group's factor
// (amax / 448) and every code (RNE of value / factor, tensor/fp8.h's codec) are recomputed here
// bit for bit; k_pe is bit-identical to the bf16 store's; slots no token maps to stay poisoned.
// Against the CPU model's f32 latent put through the CPU cache's FP8 round trip, the stored rows
// (all tokens together) must be within kFp8Tolerance: the bf16 roundings move a value next to an
// E4M3 rounding boundary one step (2^-4 .. 2^-3) away, which in one 16-value row reads as up to
// ~5%; a wrong group, factor or layout is O(1).
constexpr double kFp8Tolerance = 4e-2;

template <typename Store>
void check_fp8_store(const MlaShape& s, const std::vector<float>& want_latent, const std::vector<bf16>& bf16_cache,
                     const std::vector<int64_t>& token_of_slot, Store store) {
  const int64_t num_slots = static_cast<int64_t>(token_of_slot.size()), width = s.rank + s.rope;
  const int32_t stride = gpu::fp8_latent_scale_stride(s.rank), groups = (s.rank + 127) / 128;
  DeviceArray<uint8_t> codes_d(num_slots * s.rank);
  DeviceArray<float> scales_d(num_slots * stride);
  DeviceArray<bf16> rope_d(num_slots * s.rope);
  store(codes_d.data(), scales_d.data(), rope_d.data());
  const std::vector<uint8_t> codes = codes_d.download();
  const std::vector<float> scales = scales_d.download();
  const std::vector<bf16> rope = rope_d.download();
  int64_t untouched_changed = 0, rope_differs = 0, codes_differ = 0, factors_differ = 0;
  std::vector<float> all_got, all_want;
  for (int64_t slot = 0; slot < num_slots; ++slot) {
    const int64_t t = token_of_slot[slot];
    if (t < 0) {
      for (int64_t i = 0; i < s.rank; ++i) untouched_changed += codes[slot * s.rank + i] != 0xFF;
      for (int32_t g = 0; g < stride; ++g) untouched_changed += !std::isnan(scales[slot * stride + g]);
      for (int64_t i = 0; i < s.rope; ++i) untouched_changed += bits_of(rope[slot * s.rope + i]) != 0xFFFF;
      continue;
    }
    std::vector<float> stored(static_cast<size_t>(s.rank)), got(static_cast<size_t>(s.rank));
    for (int64_t i = 0; i < s.rank; ++i) stored[i] = __bfloat162float(bf16_cache[slot * width + i]);
    for (int32_t g = 0; g < groups; ++g) {
      const int64_t begin = g * 128, end = std::min<int64_t>(s.rank, begin + 128);
      float amax = 0.0f;
      for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(stored[i]));
      const float factor = amax > 0.0f ? amax / kFp8E4m3Max : 1.0f;
      factors_differ += scales[slot * stride + g] != factor;
      for (int64_t i = begin; i < end; ++i) {
        codes_differ += codes[slot * s.rank + i] != f32_to_fp8_e4m3(stored[i] / factor);
        got[i] = fp8_e4m3_to_f32(codes[slot * s.rank + i]) * scales[slot * stride + g];
      }
    }
    std::vector<float> want = slice(want_latent, t * width, s.rank);
    fp8_block_round_trip(want, 1, s.rank, 1, 128);
    all_got.insert(all_got.end(), got.begin(), got.end());
    all_want.insert(all_want.end(), want.begin(), want.end());
    for (int64_t i = 0; i < s.rope; ++i) {
      rope_differs += bits_of(rope[slot * s.rope + i]) != bits_of(bf16_cache[slot * width + s.rank + i]);
    }
  }
  EXPECT_LT(relative_error(all_got, all_want), kFp8Tolerance) << "c_kv against the CPU cache's FP8 rows";
  EXPECT_EQ(untouched_changed, 0) << "FP8 planes written in slots no token maps to";
  EXPECT_EQ(factors_differ, 0) << "factors other than amax / 448 of the bf16 row's groups";
  EXPECT_EQ(codes_differ, 0) << "codes other than the bf16 row's, rounded to nearest even";
  EXPECT_EQ(rope_differs, 0) << "k_pe of the FP8 store differs from the bf16 store's";
}

void check_mla_rope(const MlaShape& s, const model::ModelConfig& c, const model::LayerWeights& w, int64_t tokens,
                    std::mt19937_64& gen) {
  const int64_t latent_width = s.rank + s.rope, qk = s.nope + s.rope, q_width = s.heads * qk;
  const int64_t absorbed_width = s.rank + s.rope, num_slots = 2 * tokens + 5;
  const std::vector<float> x = random_bf16_values(gen, static_cast<size_t>(tokens * c.hidden_size), 2.0f);
  std::vector<int32_t> positions(static_cast<size_t>(tokens));
  std::uniform_int_distribution<int32_t> pick_position(0, 160000);
  for (int32_t& p : positions) p = pick_position(gen);
  positions.front() = 160000;  // the largest angles, where a fast sin would fail
  if (tokens > 1) positions.back() = 0;
  std::vector<int32_t> slots(static_cast<size_t>(num_slots));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), gen);
  slots.resize(static_cast<size_t>(tokens));
  for (int64_t t = 2; t < tokens; t += 5) slots[static_cast<size_t>(t)] = -1;

  // CPU: the model's own projections, norm and rope.
  const std::vector<float> inv_freq = model::rope_inv_freq(c);
  const auto attention_scaling = static_cast<float>(model::rope_attention_scaling(c));
  const std::vector<int64_t> positions64(positions.begin(), positions.end());
  const model::MlaLatentProjections want = model::mla_project_latent(c, w, inv_freq, x, positions64);

  // GPU inputs: the same x split into kv_a [T, rank + rope] and q [T, heads, qk].
  std::vector<float> kv_a(static_cast<size_t>(tokens * latent_width)), q(static_cast<size_t>(tokens * q_width));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = x.data() + t * c.hidden_size;
    std::copy_n(row, latent_width, kv_a.begin() + t * latent_width);
    std::copy_n(row + latent_width, q_width, q.begin() + t * q_width);
  }
  DeviceArray<bf16> kv_a_d = upload_bf16(kv_a), q_d = upload_bf16(q), norm_d = upload_bf16(w.kv_a_norm);
  DeviceArray<float> inv_freq_d = upload(inv_freq);
  DeviceArray<int32_t> positions_d = upload(positions), slots_d = upload(slots);
  DeviceArray<bf16> cache(num_slots * latent_width), q_absorbed(tokens * s.heads * absorbed_width);
  gpu::mla_store_latent(cache.data(), kv_a_d.data(), norm_d.data(), model::kMlaLatentNormEps,
                        inv_freq_d.data(), attention_scaling, c.rope_interleave, positions_d.data(), slots_d.data(),
                        tokens, s.rank, s.rope, nullptr);
  gpu::mla_rope_queries(q_absorbed.data(), q_d.data(), inv_freq_d.data(), attention_scaling, c.rope_interleave,
                        positions_d.data(), tokens, s.heads, s.nope, s.rank, s.rope, nullptr);

  // Cache rows: [c_kv | k_pe] of the token mapped to them, or untouched.
  std::vector<int64_t> token_of_slot(static_cast<size_t>(num_slots), -1);
  for (int64_t t = 0; t < tokens; ++t) {
    if (slots[t] >= 0) token_of_slot[slots[t]] = t;
  }
  const std::vector<bf16> cache_bits = cache.download();
  int64_t untouched_changed = 0;
  for (int64_t slot = 0; slot < num_slots; ++slot) {
    const int64_t t = token_of_slot[slot];
    if (t < 0) {
      for (int64_t i = slot * latent_width; i < (slot + 1) * latent_width; ++i) {
        untouched_changed += bits_of(cache_bits[i]) != 0xFFFF;
      }
      continue;
    }
    std::vector<float> got(static_cast<size_t>(latent_width));
    for (int64_t i = 0; i < latent_width; ++i) got[i] = __bfloat162float(cache_bits[slot * latent_width + i]);
    EXPECT_LT(relative_error(slice(got, 0, s.rank), slice(want.latent, t * latent_width, s.rank)), kBf16Tolerance)
        << "c_kv of token " << t;
    EXPECT_LT(relative_error(slice(got, s.rank, s.rope), slice(want.latent, t * latent_width + s.rank, s.rope)),
              kOneRounding)
        << "k_pe of token " << t << " at " << positions[t];
  }
  EXPECT_EQ(untouched_changed, 0) << "elements written in cache rows no token maps to";
  check_fp8_store(s, want.latent, cache_bits, token_of_slot, [&](uint8_t* codes, float* scales, bf16* rope) {
    gpu::mla_store_latent_fp8(codes, scales, rope, kv_a_d.data(), norm_d.data(), model::kMlaLatentNormEps,
                              inv_freq_d.data(), attention_scaling, c.rope_interleave, positions_d.data(),
                              slots_d.data(), tokens, s.rank, s.rope, nullptr);
  });

  // Queries: the rope part is the CPU's rotated q_pe; the nope part keeps its poison.
  const std::vector<bf16> q_bits = q_absorbed.download();
  int64_t nope_changed = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t base = (t * s.heads + h) * absorbed_width;
      for (int64_t i = 0; i < s.rank; ++i) nope_changed += bits_of(q_bits[base + i]) != 0xFFFF;
      std::vector<float> got(static_cast<size_t>(s.rope));
      for (int64_t i = 0; i < s.rope; ++i) got[i] = __bfloat162float(q_bits[base + s.rank + i]);
      EXPECT_LT(relative_error(got, slice(want.q, (t * s.heads + h) * qk + s.nope, s.rope)), kOneRounding)
          << "q_pe of token " << t << " head " << h << " at " << positions[t];
    }
  }
  EXPECT_EQ(nope_changed, 0) << "elements written in q_absorbed's latent part";
}

TEST(MlaRope, CacheAndQueriesHoldWhatTheCpuModelComputes) {
  auto gen = rng(60);
  // DeepSeek-V3's per-rank shape (16 of its 128 heads) and a tiny one.
  for (const MlaShape& s : {MlaShape{512, 64, 16, 128}, MlaShape{16, 8, 4, 8}}) {
    const model::LayerWeights w = selection_weights(mla_config(s, false, false), gen);
    for (bool interleave : {true, false}) {
      for (bool yarn : {true, false}) {
        const model::ModelConfig c = mla_config(s, interleave, yarn);
        if (yarn) {
          ASSERT_GT(model::rope_attention_scaling(c), 1.1);
        }
        for (int64_t tokens : {1, 17, 97}) {
          SCOPED_TRACE(testing::Message() << "rank " << s.rank << " rope " << s.rope << " heads " << s.heads
                                          << ", interleave " << interleave << ", yarn " << yarn << ", " << tokens
                                          << " tokens");
          check_mla_rope(s, c, w, tokens, gen);
        }
      }
    }
  }
}

TEST(MlaRope, EmptyInputsLaunchNothingAndBadShapesThrow) {
  gpu::mla_store_latent(nullptr, nullptr, nullptr, 1e-6f, nullptr, 1.0f, true, nullptr, nullptr, 0, 512, 64, nullptr);
  gpu::mla_rope_queries(nullptr, nullptr, nullptr, 1.0f, true, nullptr, 0, 16, 128, 512, 64, nullptr);
  TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_THROW(gpu::mla_store_latent(nullptr, nullptr, nullptr, 1e-6f, nullptr, 1.0f, true, nullptr, nullptr, 1, 500,
                                     64, nullptr),
               Error);  // rank not a multiple of 8
  EXPECT_THROW(gpu::mla_store_latent(nullptr, nullptr, nullptr, 1e-6f, nullptr, 1.0f, true, nullptr, nullptr, 1, 2048,
                                     64, nullptr),
               Error);  // rank over 1024
  EXPECT_THROW(gpu::mla_store_latent_fp8(nullptr, nullptr, nullptr, nullptr, nullptr, 1e-6f, nullptr, 1.0f, true, nullptr,
                                         nullptr, 1, 8, 8, nullptr),
               Error);  // FP8 codes of a rank not a multiple of 16
  EXPECT_THROW(gpu::mla_rope_queries(nullptr, nullptr, nullptr, 1.0f, true, nullptr, 1, 16, 128, 512, 63, nullptr),
               Error);  // odd rope_dim
}

}  // namespace
}  // namespace tachyon::gpu_test
