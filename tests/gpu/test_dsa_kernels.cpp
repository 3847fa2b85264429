// The lightning indexer's GPU kernels (kernels/cuda/dsa_indexer.h) against their CPU twins:
// the key store and the query rope against model/dsa_indexer.cpp's LayerNorm (replicated here,
// it is file-local there) and kernels::cpu::apply_rope on the leading dims; the scores against
// kernels::cpu::paged_dsa_index_scores per sequence (f32 tolerance: the dots run in another
// order on the tensor cores); the top-k against kernels::cpu::dsa_select_topk fed the very same
// f32 scores, which must give identical kept arrays. Caches are built the hard way: shuffled
// block tables, garbage in unused blocks and NaN in owned slots past each context (a kernel
// reading them shows as NaN). Outputs are poisoned (NaN / -1 bit patterns) before each launch.
// The top-k also runs alone on score patterns made to break it (ties at the threshold and across
// chunk edges, rows of zeros, one-binade and few-ulp ranges), both with rows split across CTAs
// (few long rows) and one CTA a row (many rows), with graph-padding rows that must stay -1.
// FP8 keys (--kv-cache-dtype fp8): the FP8 store against the CPU's cache row (fp8_block_round_trip
// of the f32 key, one factor per key), and the scores and top-k over FP8 caches built with the
// CPU codec against the CPU over the dequantized keys, a DCP rank's local cache included.
// Run on the GPU machine: build/tests/gpu_dsa_kernels (TACHYON_TEST_SEED replays a run).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/kernels/cuda/dsa_indexer.h"
#include "tachyon/kernels/dsa_indexer.h"
#include "tachyon/kernels/rope.h"
#include "tachyon/tensor/fp8.h"

namespace tachyon::gpu_test {
namespace {

namespace cpu = kernels::cpu;
namespace gpu = kernels::cuda;
using kernels::DcpLayout;

// Scores are f32 sums of products of bf16 values: only the summation order differs.
constexpr double kScoreTolerance = 1e-4;
// The key store and rope round once to bf16 (half an ulp, 2^-9 relative).
constexpr double kRoundTolerance = 4e-3;

std::vector<float> inv_freq_of(int32_t rope_dim) {
  std::vector<float> inv_freq(rope_dim / 2);
  for (int32_t i = 0; i < rope_dim / 2; ++i) {
    inv_freq[i] = 1.0f / std::pow(10000.0f, static_cast<float>(2 * i) / static_cast<float>(rope_dim));
  }
  return inv_freq;
}

// x: [rows, heads, dim] in place: apply_rope on each head's dims [0, rope).
void rope_leading(float* x, const std::vector<int32_t>& positions, const std::vector<float>& inv_freq, int64_t heads,
                  int64_t dim, int64_t rope, float scaling) {
  const int64_t n = static_cast<int64_t>(positions.size());
  if (rope == 0) return;
  std::vector<int64_t> pos64(positions.begin(), positions.end());
  std::vector<float> pe(static_cast<size_t>(n * heads * rope));
  for (int64_t i = 0; i < n * heads; ++i) std::copy_n(x + i * dim, rope, pe.data() + i * rope);
  cpu::apply_rope(pe.data(), pos64.data(), inv_freq.data(), n, heads, rope, scaling);
  for (int64_t i = 0; i < n * heads; ++i) std::copy_n(pe.data() + i * rope, rope, x + i * dim);
}

std::vector<int32_t> random_positions(std::mt19937_64& gen, size_t n) {
  std::uniform_int_distribution<int32_t> dist(0, 150000);
  std::vector<int32_t> positions(n);
  for (int32_t& p : positions) p = dist(gen);
  positions[0] = 0;
  return positions;
}

// --- key store and query rope ---

// One key-store launch: its inputs, and the CPU's keys for them.
struct KeyStoreCase {
  int32_t dim = 0, rope = 0;
  int64_t n = 0, num_slots = 0;
  float scaling = 1.25f;
  std::vector<float> k_raw, weight, bias, inv_freq;  // [n, dim], [dim], [dim], [rope / 2]
  std::vector<int32_t> positions, slots;             // [n]; slots shuffled, every 11th from 3 on -1
  std::vector<float> ref;  // [n, dim]: model/dsa_indexer.cpp's LayerNorm (double statistics), then the rope
};

KeyStoreCase make_key_store_case(std::mt19937_64& gen, int32_t dim, int32_t rope, int64_t n) {
  KeyStoreCase c{.dim = dim, .rope = rope, .n = n, .num_slots = n + 7};
  c.k_raw = random_bf16_values(gen, n * dim, 2.0f);
  c.weight = random_bf16_values(gen, dim, 0.5f);
  c.bias = random_bf16_values(gen, dim, 0.3f);
  for (float& w : c.weight) w = bf16_to_f32(f32_to_bf16(w + 1.0f));
  c.inv_freq = inv_freq_of(rope);
  c.positions = random_positions(gen, n);
  std::vector<int32_t> order(c.num_slots);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), gen);
  c.slots.assign(order.begin(), order.begin() + n);
  for (int64_t t = 3; t < n; t += 11) c.slots[t] = -1;  // padding tokens write nothing

  c.ref = c.k_raw;
  for (int64_t t = 0; t < n; ++t) {
    float* v = c.ref.data() + t * dim;
    double mean = 0.0, variance = 0.0;
    for (int32_t d = 0; d < dim; ++d) mean += v[d];
    mean /= dim;
    for (int32_t d = 0; d < dim; ++d) variance += (v[d] - mean) * (v[d] - mean);
    variance /= dim;
    const double inv_std = 1.0 / std::sqrt(variance + 1e-6);
    for (int32_t d = 0; d < dim; ++d) v[d] = static_cast<float>((v[d] - mean) * inv_std) * c.weight[d] + c.bias[d];
  }
  rope_leading(c.ref.data(), c.positions, c.inv_freq, 1, dim, rope, c.scaling);
  return c;
}

// A KeyStoreCase's inputs on the device.
struct KeyStoreInputs {
  DeviceArray<bf16> k_raw, weight, bias;
  DeviceArray<float> inv_freq;
  DeviceArray<int32_t> positions, slots;
};

KeyStoreInputs upload_inputs(const KeyStoreCase& c) {
  return {upload_bf16(c.k_raw), upload_bf16(c.weight), upload_bf16(c.bias),
          upload(c.inv_freq.empty() ? std::vector<float>{1.0f} : c.inv_freq),  // rope 0: unread
          upload(c.positions), upload(c.slots)};
}

void check_store_keys(std::mt19937_64& gen, int32_t dim, int32_t rope, int64_t n) {
  SCOPED_TRACE(testing::Message() << "head_dim " << dim << " rope " << rope << " tokens " << n);
  const KeyStoreCase c = make_key_store_case(gen, dim, rope, n);
  const KeyStoreInputs in = upload_inputs(c);
  DeviceArray<bf16> cache(c.num_slots * dim);
  gpu::dsa_store_index_keys(cache.data(), in.k_raw.data(), in.weight.data(), in.bias.data(), in.inv_freq.data(),
                            c.scaling, in.positions.data(), in.slots.data(), n, dim, rope, nullptr);
  const std::vector<float> out = download_f32(cache);
  std::vector<float> got, want;
  std::vector<bool> written(c.num_slots, false);
  for (int64_t t = 0; t < n; ++t) {
    const int32_t slot = c.slots[t];
    if (slot < 0) continue;
    written[slot] = true;
    got.insert(got.end(), out.begin() + slot * dim, out.begin() + (slot + 1) * dim);
    want.insert(want.end(), c.ref.begin() + t * dim, c.ref.begin() + (t + 1) * dim);
  }
  EXPECT_LT(relative_error(got, want), kRoundTolerance);
  for (int64_t s = 0; s < c.num_slots; ++s) {
    if (written[s]) continue;
    for (int32_t d = 0; d < dim; ++d) ASSERT_TRUE(std::isnan(out[s * dim + d])) << "slot " << s << " was written";
  }
}

TEST(DsaStoreIndexKeys, MatchesCpuLayerNormAndRope) {
  auto gen = rng(701);
  check_store_keys(gen, 16, 8, 40);     // the tiny model
  check_store_keys(gen, 128, 64, 97);   // DeepSeek-V3.2
  check_store_keys(gen, 24, 10, 17);    // awkward
  check_store_keys(gen, 128, 0, 5);     // norm only
}

// The spacing of E4M3 values at magnitude c (in code units, |x| / factor): 2^-9 among the
// subnormals (below 2^-6), else 2^(exponent - 3).
float e4m3_step(float c) { return c < 0x1p-6f ? 0x1p-9f : std::ldexp(1.0f, std::ilogb(c) - 3); }

// The FP8 store against the CPU's FP8 cache row: fp8_block_round_trip of the f32 key with one
// block per key (runner/paged_attention_backend.cpp's fp8_cache_rows). The GPU's f32 key differs
// from the CPU's by a few ulps (f32 vs double LayerNorm statistics, sincosf), so its factor
// matches to 1e-5 relative and its codes match but where an ulp crosses a rounding boundary:
// then the value is one E4M3 step away, which the bound below allows for 2 + 0.1% of the
// values (a few ulps against steps of 2^-4 relative: ~1e-5 of the values expected).
void check_store_keys_fp8(std::mt19937_64& gen, int32_t dim, int32_t rope, int64_t n) {
  SCOPED_TRACE(testing::Message() << "FP8 head_dim " << dim << " rope " << rope << " tokens " << n);
  const KeyStoreCase c = make_key_store_case(gen, dim, rope, n);
  const KeyStoreInputs in = upload_inputs(c);
  DeviceArray<uint8_t> codes(c.num_slots * dim);  // poisoned: 0xFF is an E4M3 NaN
  DeviceArray<float> scales(c.num_slots);         // poisoned: NaN
  gpu::dsa_store_index_keys_fp8(codes.data(), scales.data(), in.k_raw.data(), in.weight.data(), in.bias.data(),
                                in.inv_freq.data(), c.scaling, in.positions.data(), in.slots.data(), n, dim, rope,
                                nullptr);
  const std::vector<uint8_t> got_codes = codes.download();
  const std::vector<float> got_scales = scales.download();
  std::vector<bool> written(c.num_slots, false);
  int64_t values = 0, steps_apart = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int32_t slot = c.slots[t];
    if (slot < 0) continue;
    written[slot] = true;
    std::vector<float> want(c.ref.begin() + t * dim, c.ref.begin() + (t + 1) * dim);
    float amax = 0.0f;
    for (float v : want) amax = std::max(amax, std::abs(v));
    const float factor = amax / kFp8E4m3Max;  // the CPU's (amax > 0 for these keys)
    fp8_block_round_trip(want, 1, dim, 1, dim);
    const float scale = got_scales[slot];
    ASSERT_LE(std::abs(scale - factor), 1e-5f * factor) << "token " << t << ": factor " << scale << ", CPU " << factor;
    for (int32_t d = 0; d < dim; ++d) {
      const float got = fp8_e4m3_to_f32(got_codes[slot * dim + d]) * scale;
      ASSERT_TRUE(std::isfinite(got)) << "token " << t << " dim " << d << " not written";
      ++values;
      const float diff = std::abs(got - want[d]);
      if (diff <= 1e-5f * amax) continue;  // the same code (the factors may differ by ulps)
      ++steps_apart;
      const float step = e4m3_step(std::max(std::abs(got), std::abs(want[d])) / factor) * factor;
      ASSERT_LE(diff, step * (1.0f + 1e-5f) + 1e-5f * amax)
          << "token " << t << " dim " << d << ": " << got << ", the CPU stores " << want[d];
    }
  }
  EXPECT_LE(steps_apart, 2 + values / 1000) << steps_apart << " of " << values << " values one E4M3 step apart";
  for (int64_t s = 0; s < c.num_slots; ++s) {
    if (written[s]) continue;
    ASSERT_TRUE(std::isnan(got_scales[s])) << "slot " << s << "'s factor was written";
    for (int32_t d = 0; d < dim; ++d) ASSERT_EQ(got_codes[s * dim + d], 0xFF) << "slot " << s << " was written";
  }
}

TEST(DsaStoreIndexKeys, Fp8MatchesCpuCacheRows) {
  auto gen = rng(710);
  check_store_keys_fp8(gen, 16, 8, 40);
  check_store_keys_fp8(gen, 128, 64, 97);
  check_store_keys_fp8(gen, 128, 64, 600);  // 60k values: the one-step bound has data
  check_store_keys_fp8(gen, 24, 10, 17);
  check_store_keys_fp8(gen, 128, 0, 5);
}

void check_rope_queries(std::mt19937_64& gen, int32_t heads, int32_t dim, int32_t rope, int64_t n) {
  SCOPED_TRACE(testing::Message() << "heads " << heads << " head_dim " << dim << " rope " << rope << " tokens " << n);
  const float scaling = 0.9f;
  const std::vector<float> q = random_bf16_values(gen, n * heads * dim, 1.5f);
  const std::vector<float> inv_freq = inv_freq_of(rope);
  const std::vector<int32_t> positions = random_positions(gen, n);
  std::vector<float> ref = q;
  rope_leading(ref.data(), positions, inv_freq, heads, dim, rope, scaling);
  DeviceArray<bf16> q_d = upload_bf16(q);
  DeviceArray<float> inv_freq_d = upload(inv_freq);
  DeviceArray<int32_t> positions_d = upload(positions);
  gpu::dsa_rope_index_queries(q_d.data(), inv_freq_d.data(), scaling, positions_d.data(), n, heads, dim, rope, nullptr);
  const std::vector<float> out = download_f32(q_d);
  EXPECT_LT(relative_error(out, ref), kRoundTolerance);
  for (int64_t i = 0; i < n * heads; ++i) {  // dims past the rope are untouched, bit for bit
    for (int32_t d = rope; d < dim; ++d) ASSERT_EQ(out[i * dim + d], q[i * dim + d]) << "row " << i << " dim " << d;
  }
}

TEST(DsaRopeIndexQueries, MatchesCpuRopeOnLeadingDims) {
  auto gen = rng(702);
  check_rope_queries(gen, 4, 16, 8, 40);
  check_rope_queries(gen, 64, 128, 64, 33);
  check_rope_queries(gen, 5, 24, 10, 7);
}

// --- scores and top-k ---

struct Batch {
  std::vector<int32_t> contexts;  // tokens in the cache per sequence, this step's included
  std::vector<int32_t> rows;      // query rows per sequence (the last rows[s] positions)
};

// How the key cache holds its keys: bf16, or E4M3 codes with one f32 factor per key
// (--kv-cache-dtype fp8, PagedIndexKeyView::codes).
enum class KeyFormat { kBf16, kFp8 };

struct IndexerShape {
  int32_t num_heads = 64;
  int32_t head_dim = 128;
  int32_t block_size = 64;
  int32_t topk = 2048;
  KeyFormat keys = KeyFormat::kBf16;
};

// Index keys of several sequences in one paged cache: host f32 (the values the CPU scores) and
// the device cache: bf16 keys, or for kFp8 the CPU codec's codes and factors of keys spread over
// magnitudes 2^-3 .. 2^3 (so each key's factor matters), host values dequantized.
class IndexKeyCache {
 public:
  IndexKeyCache(std::mt19937_64& gen, const std::vector<int32_t>& contexts, int32_t block_size, int32_t dim,
                KeyFormat format = KeyFormat::kBf16)
      : block_size_(block_size), dim_(dim), format_(format) {
    int32_t needed = 0, longest = 0;
    for (int32_t ctx : contexts) {
      needed += (ctx + block_size - 1) / block_size;
      longest = std::max(longest, (ctx + block_size - 1) / block_size);
    }
    stride_ = longest + 1;
    const int32_t garbage = 3;
    const int32_t num_blocks = needed + garbage;
    std::vector<int32_t> pool(num_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), gen);
    const size_t block_elems = static_cast<size_t>(block_size) * dim;
    keys_ = random_bf16_values(gen, num_blocks * block_elems, 40.0f);  // garbage unless owned
    tables_.assign(contexts.size() * stride_, 0);
    size_t next = 0;
    for (size_t s = 0; s < contexts.size(); ++s) {
      const int32_t blocks = (contexts[s] + block_size - 1) / block_size;
      for (int32_t b = 0; b < stride_; ++b) {
        tables_[s * stride_ + b] = b < blocks ? pool[next++] : pool[needed + (s + b) % garbage];
      }
      for (int32_t b = 0; b < blocks; ++b) {
        const std::vector<float> k = random_bf16_values(gen, block_elems);
        const size_t at = static_cast<size_t>(tables_[s * stride_ + b]) * block_elems;
        for (size_t i = 0; i < block_elems; ++i) {
          const bool owned = b * block_size + static_cast<int32_t>(i / dim) < contexts[s];
          keys_[at + i] = owned ? k[i] : NAN;
        }
      }
    }
    if (format == KeyFormat::kFp8) {
      quantize_rows(gen);
    } else {
      keys_d_.emplace(upload_bf16(keys_));
    }
    tables_d_.emplace(upload(tables_));
  }

  gpu::PagedIndexKeyView view() const {
    if (format_ == KeyFormat::kFp8) {  // no bf16 keys at all: the kernel must read the codes
      gpu::PagedIndexKeyView view{nullptr, tables_d_->data(), stride_, block_size_, dim_};
      view.codes = codes_d_->data();
      view.scales = scales_d_->data();
      return view;
    }
    return gpu::PagedIndexKeyView{keys_d_->data(), tables_d_->data(), stride_, block_size_, dim_};
  }
  const float* keys() const { return keys_.data(); }
  const int32_t* table(size_t s) const { return tables_.data() + s * stride_; }

 private:
  // Each key, scaled by 2^U(-3, 3), -> E4M3 codes and its factor by the CPU codec (as the CPU
  // reference's FP8 cache rounds a key); keys_ becomes the dequantized key. A key holding NaN
  // (an owned slot past the context) gets NaN codes (0x7f) and a NaN factor.
  void quantize_rows(std::mt19937_64& gen) {
    const size_t rows = keys_.size() / dim_;
    std::vector<uint8_t> codes(keys_.size());
    std::vector<float> scales(rows);
    std::uniform_real_distribution<float> exponent(-3.0f, 3.0f);
    for (size_t r = 0; r < rows; ++r) {
      std::span<float> row(keys_.data() + r * dim_, dim_);
      if (std::any_of(row.begin(), row.end(), [](float x) { return std::isnan(x); })) {
        std::fill_n(codes.begin() + r * dim_, dim_, uint8_t{0x7f});
        scales[r] = NAN;
        continue;
      }
      const float magnitude = std::exp2(exponent(gen));
      for (float& x : row) x *= magnitude;
      const Fp8BlockWeight q = quantize_fp8_blocks(row, 1, dim_, 1, dim_);
      std::copy(q.data.begin(), q.data.end(), codes.begin() + r * dim_);
      scales[r] = q.scale_inv[0];
      dequantize_fp8_blocks(q.data, q.scale_inv, 1, dim_, 1, dim_, row);
    }
    codes_d_.emplace(upload(codes));
    scales_d_.emplace(upload(scales));
  }

  int32_t block_size_, dim_, stride_ = 0;
  KeyFormat format_;
  std::vector<float> keys_;      // [num_blocks * block_size, dim]
  std::vector<int32_t> tables_;  // [num_seqs, stride_]
  std::optional<DeviceArray<bf16>> keys_d_;      // bf16 keys
  std::optional<DeviceArray<uint8_t>> codes_d_;  // FP8 keys: [num_blocks * block_size, dim] E4M3
  std::optional<DeviceArray<float>> scales_d_;   // and [num_blocks * block_size] f32 factors
  std::optional<DeviceArray<int32_t>> tables_d_;
};

std::vector<int32_t> query_starts_of(const Batch& batch) {
  std::vector<int32_t> starts(batch.rows.size() + 1, 0);
  for (size_t s = 0; s < batch.rows.size(); ++s) starts[s + 1] = starts[s] + batch.rows[s];
  return starts;
}

// Runs the GPU top-k on device scores and checks it against the CPU selection over the same
// (downloaded) scores, sequence by sequence. `padding_rows` more rows past the batch's (graph
// padding, scores of NaN) must come back all -1. The workspace starts as garbage (0xFF bytes).
void check_topk(const std::vector<float>& scores, const DeviceArray<float>& scores_d, int64_t stride,
                const Batch& batch, int32_t max_context_len, int32_t topk, int32_t padding_rows = 0) {
  const std::vector<int32_t> starts = query_starts_of(batch);
  const int32_t num_seqs = static_cast<int32_t>(batch.rows.size());
  const int32_t num_rows = starts.back() + padding_rows;
  DeviceArray<int32_t> starts_d = upload(starts), contexts_d = upload(batch.contexts);
  DeviceArray<int32_t> kept_d(static_cast<size_t>(num_rows) * topk);
  TACHYON_CUDA_CHECK(cudaMemset(kept_d.data(), 0x7f, kept_d.size() * sizeof(int32_t)));  // poison: not -1, not valid
  const size_t workspace_bytes = gpu::dsa_topk_workspace_bytes(num_rows, max_context_len, topk);
  DeviceArray<uint8_t> workspace(std::max<size_t>(workspace_bytes, 1));
  gpu::dsa_select_topk(kept_d.data(), scores_d.data(), stride, starts_d.data(), contexts_d.data(), num_seqs, num_rows,
                       max_context_len, topk, workspace.data(), workspace_bytes, nullptr);
  const std::vector<int32_t> kept = kept_d.download();
  for (int64_t i = static_cast<int64_t>(starts.back()) * topk; i < static_cast<int64_t>(num_rows) * topk; ++i) {
    ASSERT_EQ(kept[i], -1) << "padding row " << i / topk << " entry " << i % topk;
  }
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t rows = batch.rows[s], ctx = batch.contexts[s];
    if (rows == 0) continue;
    SCOPED_TRACE(testing::Message() << "top-k sequence " << s << " context " << ctx << " rows " << rows);
    const cpu::DsaIndexerShape shape{rows, ctx - rows, 0, 0, topk, 1.0f};
    std::vector<float> seq_scores(static_cast<size_t>(rows) * ctx);
    for (int32_t i = 0; i < rows; ++i) {
      std::copy_n(scores.begin() + (starts[s] + i) * stride, ctx, seq_scores.begin() + static_cast<size_t>(i) * ctx);
    }
    std::vector<int32_t> ref(static_cast<size_t>(rows) * topk);
    cpu::dsa_select_topk(ref.data(), seq_scores.data(), shape);
    for (int32_t i = 0; i < rows; ++i) {
      const auto got = kept.begin() + (starts[s] + i) * static_cast<int64_t>(topk);
      const auto want = ref.begin() + static_cast<int64_t>(i) * topk;
      const auto [g, w] = std::mismatch(got, got + topk, want);
      ASSERT_TRUE(g == got + topk) << "row " << i << " (position " << ctx - rows + i << "): entry " << (g - got)
                                   << " is " << *g << ", the CPU keeps " << *w;
    }
  }
}

// Scores of `batch` on the GPU against the CPU per sequence, then the top-k on those scores.
void check_scores_and_topk(std::mt19937_64& gen, const Batch& batch, const IndexerShape& shape, int32_t slack = 0) {
  SCOPED_TRACE(testing::Message() << (shape.keys == KeyFormat::kFp8 ? "FP8 keys" : "bf16 keys") << " heads "
                                  << shape.num_heads << " head_dim " << shape.head_dim << " block " << shape.block_size
                                  << " topk " << shape.topk << " sequences " << batch.contexts.size() << " slack "
                                  << slack);
  const IndexKeyCache cache(gen, batch.contexts, shape.block_size, shape.head_dim, shape.keys);
  const std::vector<int32_t> starts = query_starts_of(batch);
  const int32_t num_rows = starts.back(), num_seqs = static_cast<int32_t>(batch.rows.size());
  const int32_t max_context_len = *std::max_element(batch.contexts.begin(), batch.contexts.end()) + slack;
  const int64_t stride = max_context_len + 3;
  const size_t head_elems = static_cast<size_t>(shape.num_heads) * shape.head_dim;
  const std::vector<float> q = random_bf16_values(gen, num_rows * head_elems);
  std::vector<float> weights = random_floats(gen, static_cast<size_t>(num_rows) * shape.num_heads);
  const gpu::DsaIndexerParams params{shape.num_heads, shape.head_dim, shape.topk,
                                     1.0f / std::sqrt(static_cast<float>(shape.head_dim)),
                                     1.0f / std::sqrt(static_cast<float>(shape.num_heads))};

  DeviceArray<float> scores_d(static_cast<size_t>(num_rows) * stride);
  DeviceArray<bf16> q_d = upload_bf16(q);
  DeviceArray<float> weights_d = upload(weights);
  DeviceArray<int32_t> starts_d = upload(starts), contexts_d = upload(batch.contexts);
  gpu::dsa_index_scores(scores_d.data(), stride, q_d.data(), weights_d.data(), cache.view(), starts_d.data(),
                        contexts_d.data(), num_seqs, num_rows, max_context_len, params, nullptr);
  const std::vector<float> scores = scores_d.download();

  // The CPU takes the weights with weight_scale folded in (as model/dsa_indexer.cpp folds it).
  for (float& w : weights) w *= params.weight_scale;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t rows = batch.rows[s], ctx = batch.contexts[s];
    if (rows == 0) continue;
    SCOPED_TRACE(testing::Message() << "scores sequence " << s << " context " << ctx << " rows " << rows);
    const cpu::DsaIndexerShape cpu_shape{rows, ctx - rows, shape.num_heads, shape.head_dim, shape.topk, params.scale};
    std::vector<float> ref(static_cast<size_t>(rows) * ctx);
    cpu::paged_dsa_index_scores(ref.data(), q.data() + starts[s] * head_elems,
                                weights.data() + static_cast<size_t>(starts[s]) * shape.num_heads, cache.keys(),
                                cache.table(s), shape.block_size, cpu_shape);
    std::vector<float> got, want;
    for (int32_t i = 0; i < rows; ++i) {
      const int32_t position = ctx - rows + i;
      const float* row = scores.data() + (starts[s] + i) * stride;
      for (int32_t j = 0; j <= position; ++j) {
        got.push_back(row[j]);
        want.push_back(ref[static_cast<size_t>(i) * ctx + j]);
      }
      for (int32_t j = position + 1; j < max_context_len; ++j) {
        ASSERT_TRUE(std::isinf(row[j]) && row[j] < 0) << "row " << i << " column " << j << " is " << row[j];
      }
    }
    EXPECT_LT(relative_error(got, want), kScoreTolerance);
  }
  check_topk(scores, scores_d, stride, batch, max_context_len, shape.topk);
}

// The tiny model: 4 heads of 16, top-8; a whole 40-token prompt, then a mixed batch of
// chunked prefills and decodes, for block sizes 1, 16 and 64.
TEST(DsaIndexScores, TinyModelShapes) {
  auto gen = rng(703);
  const IndexerShape base{4, 16, 1, 8};
  for (int32_t block_size : {1, 16, 64}) {
    IndexerShape shape = base;
    shape.block_size = block_size;
    check_scores_and_topk(gen, Batch{{40}, {40}}, shape);
    check_scores_and_topk(gen, Batch{{40, 17, 3, 1, 9, 60}, {1, 5, 3, 1, 0, 23}}, shape, 5);
  }
}

// DeepSeek-V3.2: 64 heads of 128, top-2048: contexts around the top-k and one long prompt chunk.
TEST(DsaIndexScores, DeepSeekV32Shapes) {
  auto gen = rng(704);
  for (int32_t block_size : {64, 16}) {
    const IndexerShape shape{64, 128, block_size, 2048};
    check_scores_and_topk(gen, Batch{{100, 2048, 2049, 9000, 50}, {100, 1, 33, 20, 0}}, shape);
    check_scores_and_topk(gen, Batch{{2049, 2050, 4100}, {200, 2, 37}}, shape, 130);
  }
}

// Padded shapes: head_dim 24 (padded to 32 inside), 5 heads (padded to 16), block size 1.
TEST(DsaIndexScores, AwkwardShapes) {
  auto gen = rng(705);
  check_scores_and_topk(gen, Batch{{300, 129, 77}, {37, 129, 1}}, IndexerShape{5, 24, 1, 64});
  check_scores_and_topk(gen, Batch{{300, 129}, {17, 100}}, IndexerShape{20, 64, 16, 100}, 1);
}

// One decode row at the full 128K context.
TEST(DsaIndexScores, LongContextDecode) {
  auto gen = rng(706);
  check_scores_and_topk(gen, Batch{{131072}, {1}}, IndexerShape{64, 128, 64, 2048});
}

// FP8 keys: the codes scored on the tensor cores, each dot times its key's factor, against the
// CPU over the dequantized keys (the same f32 tolerance), and the top-k over those scores.
TEST(DsaIndexScoresFp8, TinyModelShapes) {
  auto gen = rng(711);
  for (int32_t block_size : {1, 16, 64}) {
    const IndexerShape shape{4, 16, block_size, 8, KeyFormat::kFp8};
    check_scores_and_topk(gen, Batch{{40}, {40}}, shape);
    check_scores_and_topk(gen, Batch{{40, 17, 3, 1, 9, 60}, {1, 5, 3, 1, 0, 23}}, shape, 5);
  }
}

TEST(DsaIndexScoresFp8, DeepSeekV32Shapes) {
  auto gen = rng(712);
  const IndexerShape shape{64, 128, 64, 2048, KeyFormat::kFp8};
  check_scores_and_topk(gen, Batch{{100, 2048, 2049, 9000, 50}, {100, 1, 33, 20, 0}}, shape);
  check_scores_and_topk(gen, Batch{{2049, 2050, 4100}, {200, 2, 37}}, shape, 130);
  check_scores_and_topk(gen, Batch{{131072}, {1}}, shape);
}

// Padded shapes: head_dim 48 (padded to 64) of 5 heads (padded to 16) at block size 1, head_dim 80
// (padded to 128) of 20 heads.
TEST(DsaIndexScoresFp8, AwkwardShapes) {
  auto gen = rng(713);
  check_scores_and_topk(gen, Batch{{300, 129, 77}, {37, 129, 1}}, IndexerShape{5, 48, 1, 64, KeyFormat::kFp8});
  check_scores_and_topk(gen, Batch{{300, 129}, {17, 100}}, IndexerShape{20, 80, 16, 100, KeyFormat::kFp8}, 1);
}

// Under DCP a rank's FP8 cache holds only its tokens (kernels/dcp_layout.h): the row at global
// position p scores local keys 0 .. local_count(p + 1) - 1, -inf after, each score the CPU's over
// that dequantized local key, and the top-k (local indices) is the CPU's selection over the row.
TEST(DsaIndexScoresFp8, DcpRanksScoreTheirLocalKeys) {
  auto gen = rng(714);
  const int32_t heads = 16, dim = 64, context = 700, rows = 9, topk = 40;
  for (const DcpLayout group : {DcpLayout{.size = 2, .interleave = 1}, DcpLayout{.size = 4, .interleave = 2}}) {
    for (int rank = 0; rank < group.size; ++rank) {
      const DcpLayout d{.size = group.size, .rank = rank, .interleave = group.interleave};
      SCOPED_TRACE(testing::Message() << "DCP size " << d.size << " rank " << d.rank << " interleave " << d.interleave);
      const int32_t local_block = 4 * d.interleave;  // the engine's block of 4 * interleave * size tokens
      const IndexKeyCache cache(gen, {static_cast<int32_t>(d.local_count(context))}, local_block, dim, KeyFormat::kFp8);
      const std::vector<float> q = random_bf16_values(gen, static_cast<size_t>(rows) * heads * dim);
      std::vector<float> weights = random_floats(gen, static_cast<size_t>(rows) * heads);
      const gpu::DsaIndexerParams params{.num_heads = heads, .head_dim = dim, .topk = topk, .scale = 0.125f,
                                         .weight_scale = 0.25f, .dcp = d};
      DeviceArray<float> scores_d(static_cast<size_t>(rows) * context);
      const DeviceArray<bf16> q_d = upload_bf16(q);
      const DeviceArray<float> weights_d = upload(weights);
      const DeviceArray<int32_t> starts_d = upload(std::vector<int32_t>{0, rows});
      const DeviceArray<int32_t> contexts_d = upload(std::vector<int32_t>{context});
      gpu::dsa_index_scores(scores_d.data(), context, q_d.data(), weights_d.data(), cache.view(), starts_d.data(),
                            contexts_d.data(), 1, rows, context, params, nullptr);
      DeviceArray<int32_t> kept_d(static_cast<size_t>(rows) * topk);
      const size_t workspace_bytes = gpu::dsa_topk_workspace_bytes(rows, context, topk);
      DeviceArray<uint8_t> workspace(std::max<size_t>(workspace_bytes, 1));
      gpu::dsa_select_topk(kept_d.data(), scores_d.data(), context, starts_d.data(), contexts_d.data(), 1, rows,
                           context, topk, workspace.data(), workspace_bytes, nullptr, d);
      const std::vector<float> scores = scores_d.download();
      const std::vector<int32_t> kept = kept_d.download();

      for (float& w : weights) w *= params.weight_scale;
      std::vector<float> got, want;
      for (int32_t t = 0; t < rows; ++t) {
        const int64_t visible = d.local_count(context - rows + t + 1);
        const float* row = scores.data() + static_cast<size_t>(t) * context;
        // The CPU twin on the local keys alone: one query at local position visible - 1.
        const cpu::DsaIndexerShape shape{1, visible - 1, heads, dim, topk, params.scale};
        std::vector<float> ref(static_cast<size_t>(visible));
        cpu::paged_dsa_index_scores(ref.data(), q.data() + static_cast<size_t>(t) * heads * dim,
                                    weights.data() + static_cast<size_t>(t) * heads, cache.keys(), cache.table(0),
                                    local_block, shape);
        got.insert(got.end(), row, row + visible);
        want.insert(want.end(), ref.begin(), ref.end());
        for (int64_t k = visible; k < context; ++k) {
          ASSERT_EQ(row[k], -INFINITY) << "row " << t << " column " << k << " is past its " << visible << " keys";
        }
        std::vector<int32_t> ref_kept(topk);
        cpu::dsa_select_topk(ref_kept.data(), row, shape);
        const auto got_kept = kept.begin() + static_cast<int64_t>(t) * topk;
        const auto [g, w] = std::mismatch(got_kept, got_kept + topk, ref_kept.begin());
        ASSERT_TRUE(g == got_kept + topk) << "row " << t << ": entry " << (g - got_kept) << " is " << *g
                                          << ", the CPU keeps " << *w;
      }
      EXPECT_LT(relative_error(got, want), kScoreTolerance);
    }
  }
}

// What the scores refuse for FP8 keys, in the words the caller reads.
TEST(DsaIndexScoresFp8, RejectsBadKeyViews) {
  const DeviceArray<uint8_t> codes(64 * 32);
  const DeviceArray<float> scales(64), scores(64), weights(4);
  const DeviceArray<bf16> q(4 * 32);
  const DeviceArray<int32_t> table = upload(std::vector<int32_t>{0}), starts = upload(std::vector<int32_t>{0, 1}),
                             contexts = upload(std::vector<int32_t>{1});
  auto scores_with = [&](int32_t dim, const float* factors) {
    gpu::PagedIndexKeyView view{nullptr, table.data(), 1, 64, dim};
    view.codes = codes.data();
    view.scales = factors;
    const gpu::DsaIndexerParams params{.num_heads = 4, .head_dim = dim, .topk = 8};
    return error_of([&] {
      gpu::dsa_index_scores(scores.data(), 64, q.data(), weights.data(), view, starts.data(), contexts.data(), 1, 1,
                            1, params, nullptr);
    });
  };
  EXPECT_NE(scores_with(24, scales.data()).find("head_dim a multiple of 16"), std::string::npos);
  EXPECT_NE(scores_with(32, nullptr).find("need their factors (scales)"), std::string::npos);
  EXPECT_EQ(scores_with(32, scales.data()), "");
}

// Top-k alone on scores full of ties (few distinct values, +0 and -0 among them, whole rows of
// one value) and with -inf past each row's position, against the CPU rule.
TEST(DsaSelectTopk, TiesGoToEarlierPositions) {
  auto gen = rng(707);
  struct Case {
    Batch batch;
    int32_t topk;
  };
  const Case cases[] = {{{{40}, {40}}, 8},
                        {{{40, 12, 100}, {3, 12, 1}}, 8},
                        {{{9000, 2049, 2048, 100}, {5, 2, 1, 100}}, 2048},
                        {{{131072}, {1}}, 2048}};
  const float palette[] = {-3.0f, -1.0f, -0.0f, 0.0f, 0.5f, 1.0f, 2.0f, 7.0f, -INFINITY};
  for (const Case& c : cases) {
    for (int mode = 0; mode < 3; ++mode) {
      SCOPED_TRACE(testing::Message() << "mode " << mode << " topk " << c.topk);
      const std::vector<int32_t> starts = query_starts_of(c.batch);
      const int32_t num_rows = starts.back();
      const int32_t max_context_len = *std::max_element(c.batch.contexts.begin(), c.batch.contexts.end());
      const int64_t stride = max_context_len + 1;
      std::vector<float> scores(static_cast<size_t>(num_rows) * stride, NAN);
      std::uniform_int_distribution<int> pick(0, 7);  // finite palette entries
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (size_t s = 0; s < c.batch.rows.size(); ++s) {
        for (int32_t i = 0; i < c.batch.rows[s]; ++i) {
          const int32_t position = c.batch.contexts[s] - c.batch.rows[s] + i;
          float* row = scores.data() + (starts[s] + i) * stride;
          for (int32_t j = 0; j < max_context_len; ++j) {
            float v = mode == 0 ? palette[pick(gen)] : mode == 1 ? 1.5f : normal(gen);
            if (mode == 2 && j % 3 == 0) v = palette[pick(gen)];  // ties among distinct values
            row[j] = j <= position ? v : -INFINITY;
          }
        }
      }
      DeviceArray<float> scores_d = upload(scores);
      check_topk(scores, scores_d, stride, c.batch, max_context_len, c.topk);
    }
  }
}

// Score patterns that the selection must get exactly right (each a score for column j):
// - kOneBinade: all in [1, 2): one sign and exponent, so a fixed leading digit would not spread.
// - kSparseRelu: sums of relus that are mostly exactly 0, so the threshold is 0 itself and the
//   earliest zeros fill the top-k.
// - kSignedZeros: every score +0 or -0: one tie across the whole row.
// - kTiesAtThreshold: 0.5% of 3.0, 30% of 1.0, the rest below: ties straddle the threshold in
//   every chunk of a split row and in the row.
// - kPlateaus: runs of 1000 equal scores (2.0) across every multiple of 4096 (chunk edges) and
//   0.75% of 5.0 above them; the rest below.
// - kFewUlps: 1.0 plus 0..999 ulps: distinct scores that one radix digit tells apart.
enum class Pattern { kOneBinade, kSparseRelu, kSignedZeros, kTiesAtThreshold, kPlateaus, kFewUlps };
constexpr Pattern kPatterns[] = {Pattern::kOneBinade,        Pattern::kSparseRelu, Pattern::kSignedZeros,
                                 Pattern::kTiesAtThreshold, Pattern::kPlateaus,   Pattern::kFewUlps};

float pattern_score(Pattern pattern, std::mt19937_64& gen, int32_t j) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  switch (pattern) {
    case Pattern::kOneBinade:
      return std::min(1.0f + 0.1f * std::abs(normal(gen)), 1.9999999f);
    case Pattern::kSparseRelu: {
      float sum = 0.0f;
      for (int h = 0; h < 3; ++h) sum += std::max(normal(gen) - 2.8f, 0.0f);
      return sum;
    }
    case Pattern::kSignedZeros:
      return uniform(gen) < 0.5f ? -0.0f : 0.0f;
    case Pattern::kTiesAtThreshold: {
      const float u = uniform(gen);
      return u < 0.005f ? 3.0f : u < 0.305f ? 1.0f : 1.9f * uniform(gen) - 1.0f;
    }
    case Pattern::kPlateaus: {
      if (j % 4096 < 500 || j % 4096 >= 3596) return 2.0f;
      return uniform(gen) < 0.0075f ? 5.0f : std::min(0.3f * normal(gen), 1.9f);
    }
    case Pattern::kFewUlps: {
      const uint32_t ulps = std::uniform_int_distribution<uint32_t>(0, 999)(gen);
      float value = 0.0f;
      const uint32_t bits = 0x3f800000u + ulps;  // 1.0f + ulps
      std::memcpy(&value, &bits, sizeof(value));
      return value;
    }
  }
  return 0.0f;
}

// Host scores of `batch` plus `padding_rows` rows of NaN: the pattern at the columns j <= each
// row's position, -inf past it up to max_context_len, NaN in the stride's slack.
std::vector<float> pattern_scores(std::mt19937_64& gen, Pattern pattern, const Batch& batch, int64_t stride,
                                  int32_t max_context_len, int32_t padding_rows) {
  const std::vector<int32_t> starts = query_starts_of(batch);
  std::vector<float> scores(static_cast<size_t>(starts.back() + padding_rows) * stride, NAN);
  for (size_t s = 0; s < batch.rows.size(); ++s) {
    for (int32_t i = 0; i < batch.rows[s]; ++i) {
      const int32_t position = batch.contexts[s] - batch.rows[s] + i;
      float* row = scores.data() + (starts[s] + i) * stride;
      for (int32_t j = 0; j < max_context_len; ++j) row[j] = j <= position ? pattern_score(pattern, gen, j) : -INFINITY;
    }
  }
  return scores;
}

// Every pattern on `batch` (max_context_len: the longest context plus `slack`), against the CPU.
void check_topk_patterns(std::mt19937_64& gen, const Batch& batch, int32_t topk, int32_t padding_rows,
                         int32_t slack = 0) {
  const int32_t max_context_len = *std::max_element(batch.contexts.begin(), batch.contexts.end()) + slack;
  const int64_t stride = max_context_len + 5;
  for (Pattern pattern : kPatterns) {
    SCOPED_TRACE(testing::Message() << "pattern " << static_cast<int>(pattern) << " topk " << topk << " max_context_len "
                                    << max_context_len << " padding rows " << padding_rows);
    const std::vector<float> scores = pattern_scores(gen, pattern, batch, stride, max_context_len, padding_rows);
    DeviceArray<float> scores_d = upload(scores);
    check_topk(scores, scores_d, stride, batch, max_context_len, topk, padding_rows);
  }
}

// Few long rows: each row is split across CTAs (chunk-local top-k, then one merge a row).
// dsa_topk.cu's plan on a 132-SM H200: 8 chunks of 16384 for the 131072-wide cases, 4 of 5024
// at topk 64, 7 of 7168 at topk 1000, and at topk 16384 two chunks of 65536, longer than the
// shared memory holds (read from global memory).
TEST(DsaSelectTopk, SplitRowsMatchCpu) {
  auto gen = rng(708);
  check_topk_patterns(gen, Batch{{131072}, {1}}, 2048, 0);
  // Contexts that differ (empty later chunks), p + 1 <= topk, p + 1 = topk + 1, a prefill
  // chunk of 3 rows, and graph padding.
  check_topk_patterns(gen, Batch{{131072, 100000, 2049, 100, 131072, 40000}, {1, 1, 1, 1, 3, 2}}, 2048, 3);
  check_topk_patterns(gen, Batch{{20000, 9000, 20000, 4000}, {1, 1, 2, 1}}, 64, 1);
  check_topk_patterns(gen, Batch{{50000, 7777}, {2, 1}}, 1000, 0, 13);
  check_topk_patterns(gen, Batch{{131072}, {1}}, 16384, 2);
}

// Many rows keep one CTA a row: a prefill chunk staged in shared memory (contexts too short to
// split), more rows than SMs (140 > 132: splitting could not add a wave's worth), and rows
// longer than the shared memory with a top-k too large to split (8000 over 60000), read from
// global memory.
TEST(DsaSelectTopk, UnsplitRowsMatchCpu) {
  auto gen = rng(709);
  check_topk_patterns(gen, Batch{{9000, 3000, 9000, 2500}, {200, 1, 1, 40}}, 2048, 5);
  check_topk_patterns(gen, Batch{{17000, 16500}, {100, 40}}, 2048, 0);
  check_topk_patterns(gen, Batch{{60000, 30000, 10000}, {2, 1, 1}}, 8000, 2);
}

}  // namespace
}  // namespace tachyon::gpu_test
