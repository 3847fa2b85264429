// The MLA latent-attention kernels (decode, prefill, sparse) against the CPU paged_mla_attention
// and paged_sparse_mla_attention (the spec), fed the same bf16-rounded q and latent rows. The
// cache is built the hard way, as in test_attention_kernels.cpp: shuffled block tables, block
// sizes 1, 16 and 64, unused blocks full of large garbage (wrong indexing shows as a large error)
// and owned slots past each sequence's last token full of NaN (a kernel that lets them into the
// math shows as an infinite error). Shapes: DeepSeek's rank 512 + rope 64 at 16, 40 and 128
// heads, and the tiny rank 16 / 64 + rope 8 of the test models. Decode and (at few tokens)
// sparse split their keys across CTAs: the split tests leave whole splits without a key, run
// each launch twice for the same bits, and run a prefill-sized sparse step without a workspace.
// Outputs must be within kBf16Tolerance overall and per sequence, and start poisoned (NaN), as
// does the split workspace. The expanded prefill (mla_expand.h) runs whole: gathered contexts,
// per-head decompression by random kv_b_proj rows, the dense prefill kernel, the output copy. Their timing lives in bench/kernels/bench_mla_dsa.cpp.
// Run on the GPU machine: build/tests/gpu_mla_kernels (TACHYON_TEST_SEED replays a run).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/kernels/cuda/attention.h"
#include "tachyon/kernels/cuda/head_gemm.h"
#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/kernels/cuda/mla_expand.h"
#include "tachyon/kernels/mla_attention.h"
#include "tachyon/kernels/sparse_mla_attention.h"
#include "tachyon/tensor/fp8.h"

namespace tachyon::gpu_test {
namespace {

namespace cpu = kernels::cpu;
namespace gpu = kernels::cuda;

struct LatentShape {
  int32_t num_heads = 16;
  int32_t rank = 512;
  int32_t rope = 64;
  int32_t block_size = 16;
  bool fp8 = false;  // the FP8 cache (--kv-cache-dtype fp8): codes, factors and bf16 k_pe planes
  int32_t width() const { return rank + rope; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(rank + rope)); }
};

std::ostream& operator<<(std::ostream& os, const LatentShape& s) {
  return os << "heads " << s.num_heads << " rank " << s.rank << " rope " << s.rope << " block " << s.block_size
            << (s.fp8 ? " fp8" : "");
}

// Latent rows of several sequences in one paged cache, host f32 (for the reference) and device bf16.
class LatentCache {
 public:
  // contexts[s]: tokens of sequence s. Its block table row lists ceil(contexts[s] / block_size)
  // blocks drawn from a shuffled pool, then garbage blocks up to the row stride.
  LatentCache(std::mt19937_64& gen, const std::vector<int32_t>& contexts, const LatentShape& shape) : shape_(shape) {
    const int32_t bs = shape.block_size;
    int32_t needed = 0, longest = 0;
    for (int32_t ctx : contexts) {
      needed += (ctx + bs - 1) / bs;
      longest = std::max(longest, (ctx + bs - 1) / bs);
    }
    stride_ = longest + 2;
    const int32_t garbage = needed / 2 + 3;
    const int32_t num_blocks = needed + garbage;
    std::vector<int32_t> pool(num_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), gen);
    const size_t row = shape.width();
    const size_t block_elems = bs * row;
    cache_ = random_bf16_values(gen, num_blocks * block_elems, 50.0f);
    tables_.assign(contexts.size() * stride_, 0);
    size_t next = 0;
    for (size_t s = 0; s < contexts.size(); ++s) {
      const int32_t blocks = (contexts[s] + bs - 1) / bs;
      for (int32_t b = 0; b < stride_; ++b) {
        tables_[s * stride_ + b] = b < blocks ? pool[next++] : pool[needed + (s + b) % garbage];
      }
      for (int32_t b = 0; b < blocks; ++b) {
        const std::vector<float> values = random_bf16_values(gen, block_elems);
        const size_t at = static_cast<size_t>(tables_[s * stride_ + b]) * block_elems;
        for (size_t i = 0; i < block_elems; ++i) {
          const bool owned = b * bs + static_cast<int32_t>(i / row) < contexts[s];
          cache_[at + i] = owned ? values[i] : NAN;
        }
      }
    }
    if (shape.fp8) {
      store_fp8(static_cast<size_t>(num_blocks) * bs);
    } else {
      cache_d_.emplace(upload_bf16(cache_));
    }
    tables_d_.emplace(upload(tables_));
  }

  gpu::PagedLatentView view() const {
    gpu::PagedLatentView view{shape_.fp8 ? nullptr : cache_d_->data(), tables_d_->data(), stride_, shape_.block_size,
                              shape_.rank, shape_.rope};
    if (shape_.fp8) {
      view.codes = codes_d_->data();
      view.scales = scales_d_->data();
      view.rope = rope_d_->data();
    }
    return view;
  }

  // out: [n, heads, rank]; q: [n, heads, rank + rope]: sequence s's last n positions of ctx.
  void reference(float* out, const float* q, size_t s, int32_t ctx, int32_t n) const {
    cpu::paged_mla_attention(out, q, cache_.data(), tables_.data() + s * stride_, shape_.block_size, cpu_shape(ctx, n));
  }

  // The same over kept: [n, kept_width].
  void sparse_reference(float* out, const float* q, const int32_t* kept, int32_t kept_width, size_t s, int32_t ctx,
                        int32_t n) const {
    cpu::paged_sparse_mla_attention(out, q, cache_.data(), kept, kept_width, tables_.data() + s * stride_,
                                    shape_.block_size, cpu_shape(ctx, n));
  }

 private:
  cpu::MlaAttentionShape cpu_shape(int32_t ctx, int32_t n) const {
    return cpu::MlaAttentionShape{n, ctx - n, shape_.num_heads, shape_.rank, shape_.rope, shape_.scale()};
  }

  // The FP8 cache of `slots` rows: each c_kv quantized per 128 values as the CPU reference's FP8
  // cache does, k_pe kept; cache_ then holds the dequantized values the reference attends. Rows
  // of NaN (owned slots past a sequence's end) become NaN codes, factors and k_pe, and the
  // factors' padding is NaN too: none of it may reach the math.
  void store_fp8(size_t slots) {
    const size_t row = shape_.width(), rank = static_cast<size_t>(shape_.rank), rope = static_cast<size_t>(shape_.rope);
    const size_t stride = static_cast<size_t>(gpu::fp8_latent_scale_stride(shape_.rank));
    std::vector<uint8_t> codes(slots * rank, 0x7F);  // 0x7F: E4M3 NaN
    std::vector<float> scales(slots * stride, NAN), k_pe(slots * rope);
    for (size_t slot = 0; slot < slots; ++slot) {
      float* values = cache_.data() + slot * row;
      std::copy(values + rank, values + row, k_pe.begin() + slot * rope);
      if (std::isnan(values[0])) continue;
      // Groups of one row at 0.5x, 1x and 2x: a factor read from the wrong group shows.
      for (size_t i = 0; i < rank; ++i) {
        values[i] *= std::ldexp(1.0f, static_cast<int>((slot * 7 + i / gpu::kFp8LatentGroup * 3) % 3) - 1);
      }
      const Fp8BlockWeight q =
          quantize_fp8_blocks(std::span<const float>(values, rank), 1, shape_.rank, 1, gpu::kFp8LatentGroup);
      for (size_t i = 0; i < rank; ++i) {
        codes[slot * rank + i] = q.data[i];
        values[i] = fp8_e4m3_to_f32(q.data[i]) * q.scale_inv[i / gpu::kFp8LatentGroup];
      }
      std::copy(q.scale_inv.begin(), q.scale_inv.end(), scales.begin() + slot * stride);
    }
    codes_d_.emplace(upload(codes));
    scales_d_.emplace(upload(scales));
    rope_d_.emplace(upload_bf16(k_pe));
  }

  LatentShape shape_;
  int32_t stride_ = 0;
  std::vector<float> cache_;     // [num_blocks, block_size, rank + rope]
  std::vector<int32_t> tables_;  // [num_seqs, stride_]
  std::optional<DeviceArray<bf16>> cache_d_;
  std::optional<DeviceArray<uint8_t>> codes_d_;
  std::optional<DeviceArray<float>> scales_d_;
  std::optional<DeviceArray<bf16>> rope_d_;
  std::optional<DeviceArray<int32_t>> tables_d_;
};

gpu::MlaAttentionParams params_of(const LatentShape& shape) {
  return gpu::MlaAttentionParams{shape.num_heads, shape.scale()};
}

std::vector<float> slice(const std::vector<float>& values, size_t begin, size_t count) {
  return std::vector<float>(values.begin() + begin, values.begin() + begin + count);
}

bool all_zero(const std::vector<float>& values) {
  return std::all_of(values.begin(), values.end(), [](float x) { return x == 0.0f; });
}

// --- decode ---

// One decode step over `contexts` (max_context_len = `bound`, or the longest when 0); returns
// the GPU output [num_seqs, heads, rank] and fills `ref`.
std::vector<float> decode_on_device(const LatentCache& cache, const std::vector<int32_t>& contexts,
                                    const std::vector<float>& q, const LatentShape& shape, int32_t bound = 0) {
  const int32_t num_seqs = static_cast<int32_t>(contexts.size());
  const int32_t max_context_len = bound > 0 ? bound : *std::max_element(contexts.begin(), contexts.end());
  const size_t workspace_bytes = gpu::mla_decode_workspace_bytes(num_seqs, shape.num_heads, shape.rank, max_context_len);
  DeviceArray<uint8_t> workspace(std::max<size_t>(workspace_bytes, 1));
  DeviceArray<bf16> q_d = upload_bf16(q), out_d(static_cast<size_t>(num_seqs) * shape.num_heads * shape.rank);
  DeviceArray<int32_t> contexts_d = upload(contexts);
  gpu::mla_decode_attention(out_d.data(), q_d.data(), cache.view(), contexts_d.data(), num_seqs, max_context_len,
                            params_of(shape), workspace.data(), workspace_bytes, nullptr);
  return download_f32(out_d);
}

void check_decode(std::mt19937_64& gen, const std::vector<int32_t>& contexts, const LatentShape& shape,
                  int32_t bound = 0) {
  SCOPED_TRACE(testing::Message() << shape << " batch " << contexts.size() << " bound " << bound);
  const LatentCache cache(gen, contexts, shape);
  const size_t q_elems = static_cast<size_t>(shape.num_heads) * shape.width();
  const size_t out_elems = static_cast<size_t>(shape.num_heads) * shape.rank;
  const std::vector<float> q = random_bf16_values(gen, contexts.size() * q_elems, 1.5f);
  const std::vector<float> out = decode_on_device(cache, contexts, q, shape, bound);
  std::vector<float> ref(contexts.size() * out_elems, 0.0f);
  for (size_t s = 0; s < contexts.size(); ++s) {
    SCOPED_TRACE(testing::Message() << "sequence " << s << " context " << contexts[s]);
    const std::vector<float> seq_out = slice(out, s * out_elems, out_elems);
    if (contexts[s] == 0) {
      EXPECT_TRUE(all_zero(seq_out)) << "padding rows must be zeros";
      continue;
    }
    cache.reference(ref.data() + s * out_elems, q.data() + s * q_elems, s, contexts[s], 1);
    EXPECT_LT(relative_error(seq_out, slice(ref, s * out_elems, out_elems)), kBf16Tolerance);
  }
  EXPECT_LT(relative_error(out, ref), kBf16Tolerance);
}

const LatentShape kDecodeShapes[] = {
    {16, 512, 64, 16},   // DeepSeek-V2-Lite
    {128, 512, 64, 64},  // DeepSeek-V3: four 32-head CTAs per sequence
    {40, 512, 64, 1},    // a partial 32-head group, one token per block
    {20, 512, 64, 16},   // a partial 16-head group
    {4, 16, 8, 1},       // tiny test model
    {16, 64, 8, 16},
};

// Every shape over one batch of awkward lengths (one tile, tile edges, several splits at 5000,
// a padding row), then the long context alone (many splits for one sequence).
TEST(MlaDecodeAttention, ShapesBlockSizesAndContexts) {
  auto gen = rng(301);
  for (const LatentShape& shape : kDecodeShapes) {
    check_decode(gen, {1, 2, 17, 64, 65, 100, 1000, 0, 5000}, shape);
    check_decode(gen, {5000}, shape);
  }
}

// A graph captured with a large max_context_len replays with short contexts: the grid has
// splits no sequence uses, and bounds past 64 splits of 256 tokens still work.
TEST(MlaDecodeAttention, MaxContextLenLargerThanContexts) {
  auto gen = rng(302);
  const LatentShape shape{16, 512, 64, 16};
  check_decode(gen, {5, 0, 300}, shape, 32768);
  check_decode(gen, {5000, 1, 4097}, shape, 1 << 20);
  check_decode(gen, {0}, shape, 8192);
  check_decode(gen, std::vector<int32_t>(48, 17), LatentShape{4, 16, 8, 1}, 131072);
}

// Batch 1 spreads over many one- or two-tile splits (the merge then combines up to 64), and a
// batch that fills the SMs takes one split: both ends of the split heuristic, at 16 and 128 heads.
TEST(MlaDecodeAttention, ManySplitsAndNoSplits) {
  auto gen = rng(303);
  for (const LatentShape& shape : {LatentShape{16, 512, 64, 16}, LatentShape{128, 512, 64, 64}}) {
    check_decode(gen, {4096}, shape);
    check_decode(gen, {4033}, shape);
    check_decode(gen, {4096, 130, 0}, shape, 8192);
    check_decode(gen, std::vector<int32_t>(shape.num_heads == 16 ? 140 : 40, 300), shape);
  }
}

// --- prefill ---

struct PrefillSeq {
  int32_t cached = 0;  // tokens already in the cache before this step's rows
  int32_t rows = 0;    // query rows this step; the context is cached + rows
};

struct PrefillBatch {
  std::vector<int32_t> starts = {0};  // [num_seqs + 1]
  std::vector<int32_t> contexts;      // [num_seqs]
  int32_t max_rows = 0;
  int32_t tokens() const { return starts.back(); }
};

PrefillBatch batch_of(const std::vector<PrefillSeq>& seqs) {
  PrefillBatch batch;
  for (const PrefillSeq& seq : seqs) {
    batch.starts.push_back(batch.starts.back() + seq.rows);
    batch.contexts.push_back(seq.cached + seq.rows);
    batch.max_rows = std::max(batch.max_rows, seq.rows);
  }
  return batch;
}

// Queries of the batch's rows, [tokens, heads, rank + rope].
std::vector<float> random_queries(std::mt19937_64& gen, const PrefillBatch& batch, const LatentShape& shape) {
  return random_bf16_values(gen, static_cast<size_t>(batch.tokens()) * shape.num_heads * shape.width(), 1.5f);
}

std::vector<float> prefill_on_device(const LatentCache& cache, const PrefillBatch& batch, const std::vector<float>& q,
                                     const LatentShape& shape) {
  DeviceArray<int32_t> starts_d = upload(batch.starts), contexts_d = upload(batch.contexts);
  DeviceArray<bf16> q_d = upload_bf16(q);
  DeviceArray<bf16> out_d(std::max<size_t>(static_cast<size_t>(batch.tokens()) * shape.num_heads * shape.rank, 1));
  gpu::mla_prefill_attention(out_d.data(), q_d.data(), cache.view(), starts_d.data(), contexts_d.data(),
                             static_cast<int32_t>(batch.contexts.size()), batch.tokens(), batch.max_rows,
                             params_of(shape), nullptr);
  std::vector<float> out = download_f32(out_d);
  out.resize(static_cast<size_t>(batch.tokens()) * shape.num_heads * shape.rank);
  return out;
}

// The dense CPU reference of a prefill batch, [tokens, heads, rank].
std::vector<float> prefill_reference(const LatentCache& cache, const PrefillBatch& batch, const std::vector<float>& q,
                                     const LatentShape& shape) {
  const size_t q_elems = static_cast<size_t>(shape.num_heads) * shape.width();
  const size_t out_elems = static_cast<size_t>(shape.num_heads) * shape.rank;
  std::vector<float> ref(static_cast<size_t>(batch.tokens()) * out_elems);
  for (size_t s = 0; s < batch.contexts.size(); ++s) {
    const int32_t rows = batch.starts[s + 1] - batch.starts[s];
    if (rows > 0) {
      cache.reference(ref.data() + batch.starts[s] * out_elems, q.data() + batch.starts[s] * q_elems, s,
                      batch.contexts[s], rows);
    }
  }
  return ref;
}

void expect_per_sequence_close(const std::vector<float>& out, const std::vector<float>& ref, const PrefillBatch& batch,
                               const LatentShape& shape) {
  const size_t out_elems = static_cast<size_t>(shape.num_heads) * shape.rank;
  for (size_t s = 0; s < batch.contexts.size(); ++s) {
    const size_t count = (batch.starts[s + 1] - batch.starts[s]) * out_elems;
    if (count == 0) continue;
    SCOPED_TRACE(testing::Message() << "sequence " << s << " context " << batch.contexts[s] << " rows "
                                    << batch.starts[s + 1] - batch.starts[s]);
    EXPECT_LT(relative_error(slice(out, batch.starts[s] * out_elems, count),
                             slice(ref, batch.starts[s] * out_elems, count)),
              kBf16Tolerance);
  }
  EXPECT_LT(relative_error(out, ref), kBf16Tolerance);
}

void check_prefill(std::mt19937_64& gen, const std::vector<PrefillSeq>& seqs, const LatentShape& shape) {
  SCOPED_TRACE(testing::Message() << shape);
  const PrefillBatch batch = batch_of(seqs);
  const LatentCache cache(gen, batch.contexts, shape);
  const std::vector<float> q = random_queries(gen, batch, shape);
  expect_per_sequence_close(prefill_on_device(cache, batch, q, shape), prefill_reference(cache, batch, q, shape), batch,
                            shape);
}

// (cached prefix, new rows): whole prompts, a prompt behind cached blocks, chunked prefill
// continuing at odd offsets, decode-like single rows, a sequence with no rows.
const std::vector<PrefillSeq> kPrefillBatch = {{0, 1},   {0, 17},  {0, 200}, {37, 64}, {100, 3},
                                               {512, 300}, {50, 0}, {0, 129}, {1000, 40}};
const std::vector<PrefillSeq> kSmallPrefillBatch = {{0, 40}, {300, 5}, {0, 1}, {64, 70}, {20, 0}};

TEST(MlaPrefillAttention, ChunkedRaggedBatches) {
  auto gen = rng(401);
  check_prefill(gen, kPrefillBatch, LatentShape{16, 512, 64, 16});
  check_prefill(gen, kPrefillBatch, LatentShape{16, 512, 64, 1});
  check_prefill(gen, kPrefillBatch, LatentShape{4, 16, 8, 1});
  check_prefill(gen, kPrefillBatch, LatentShape{16, 64, 8, 64});
  check_prefill(gen, kPrefillBatch, LatentShape{3, 16, 8, 16});  // rows of one CTA span 11 tokens
  check_prefill(gen, kSmallPrefillBatch, LatentShape{128, 512, 64, 64});
  check_prefill(gen, kSmallPrefillBatch, LatentShape{40, 512, 64, 16});
}

// --- sparse ---

// kept: [tokens, kept_width]. Each row keeps a random subset of 0 .. its position (ascending);
// with `keep_all`, every position. -1 pads the rest: at the end, or (odd rows, strict subsets)
// interleaved between the kept positions.
std::vector<int32_t> make_kept(std::mt19937_64& gen, const PrefillBatch& batch, int32_t kept_width, bool keep_all) {
  std::vector<int32_t> kept(static_cast<size_t>(batch.tokens()) * kept_width, -1);
  for (size_t s = 0; s < batch.contexts.size(); ++s) {
    const int32_t rows = batch.starts[s + 1] - batch.starts[s];
    for (int32_t i = 0; i < rows; ++i) {
      const int32_t t = batch.starts[s] + i;
      const int32_t pos = batch.contexts[s] - rows + i;
      std::vector<int32_t> positions(pos + 1);
      std::iota(positions.begin(), positions.end(), 0);
      int32_t count = pos + 1;
      if (!keep_all) {
        std::shuffle(positions.begin(), positions.end(), gen);
        count = std::uniform_int_distribution<int32_t>(1, std::min(pos + 1, kept_width))(gen);
        positions.resize(count);
        std::sort(positions.begin(), positions.end());
      }
      EXPECT_LE(count, kept_width);
      int32_t* row = kept.data() + static_cast<size_t>(t) * kept_width;
      if (!keep_all && t % 2 == 1) {
        std::vector<bool> slot_used(kept_width, false);
        std::fill_n(slot_used.begin(), count, true);
        std::shuffle(slot_used.begin(), slot_used.end(), gen);
        for (int32_t j = 0, next = 0; j < kept_width; ++j) {
          if (slot_used[j]) row[j] = positions[next++];
        }
      } else {
        std::copy(positions.begin(), positions.begin() + count, row);
      }
    }
  }
  return kept;
}

// With `workspace` false the launch gets none, so it must not split (it throws if it would).
std::vector<float> sparse_on_device(const LatentCache& cache, const PrefillBatch& batch, const std::vector<float>& q,
                                    const std::vector<int32_t>& kept, int32_t kept_width, const LatentShape& shape,
                                    bool workspace = true) {
  DeviceArray<int32_t> starts_d = upload(batch.starts), kept_d = upload(kept);
  DeviceArray<bf16> q_d = upload_bf16(q);
  DeviceArray<bf16> out_d(static_cast<size_t>(batch.tokens()) * shape.num_heads * shape.rank);
  const size_t workspace_bytes =
      workspace ? gpu::sparse_mla_workspace_bytes(batch.tokens(), shape.num_heads, shape.rank, kept_width) : 0;
  DeviceArray<uint8_t> workspace_d(std::max<size_t>(workspace_bytes, 1));  // poisoned: unwritten partials are NaN
  gpu::sparse_mla_attention(out_d.data(), q_d.data(), cache.view(), kept_d.data(), kept_width, starts_d.data(),
                            static_cast<int32_t>(batch.contexts.size()), batch.tokens(), params_of(shape),
                            workspace ? workspace_d.data() : nullptr, workspace_bytes, nullptr);
  return download_f32(out_d);
}

std::vector<float> sparse_reference(const LatentCache& cache, const PrefillBatch& batch, const std::vector<float>& q,
                                    const std::vector<int32_t>& kept, int32_t kept_width, const LatentShape& shape) {
  const size_t q_elems = static_cast<size_t>(shape.num_heads) * shape.width();
  const size_t out_elems = static_cast<size_t>(shape.num_heads) * shape.rank;
  std::vector<float> ref(static_cast<size_t>(batch.tokens()) * out_elems);
  for (size_t s = 0; s < batch.contexts.size(); ++s) {
    const int32_t rows = batch.starts[s + 1] - batch.starts[s];
    if (rows == 0) continue;
    const size_t t0 = batch.starts[s];
    cache.sparse_reference(ref.data() + t0 * out_elems, q.data() + t0 * q_elems, kept.data() + t0 * kept_width,
                           kept_width, s, batch.contexts[s], rows);
  }
  return ref;
}

// The sparse kernel's output, checked against the CPU per sequence.
std::vector<float> check_sparse(const LatentCache& cache, const PrefillBatch& batch, const std::vector<float>& q,
                                const std::vector<int32_t>& kept, int32_t kept_width, const LatentShape& shape,
                                bool workspace = true) {
  std::vector<float> out = sparse_on_device(cache, batch, q, kept, kept_width, shape, workspace);
  expect_per_sequence_close(out, sparse_reference(cache, batch, q, kept, kept_width, shape), batch, shape);
  return out;
}

// Strict subsets in lists wider than one 64-entry tile (tiles of nothing but -1 included).
TEST(SparseMlaAttention, StrictSubsetsWithPadding) {
  auto gen = rng(501);
  const std::vector<PrefillSeq> seqs = {{0, 5}, {0, 100}, {37, 64}, {500, 30}, {2000, 1}, {10, 0}, {300, 1}};
  const LatentShape shapes[] = {{16, 512, 64, 16}, {128, 512, 64, 64}, {4, 16, 8, 1}, {20, 64, 8, 16}};
  for (const LatentShape& shape : shapes) {
    for (int32_t kept_width : {1, 64, 150}) {
      SCOPED_TRACE(testing::Message() << shape << " kept_width " << kept_width);
      const PrefillBatch batch = batch_of(seqs);
      const LatentCache cache(gen, batch.contexts, shape);
      const std::vector<float> q = random_queries(gen, batch, shape);
      const std::vector<int32_t> kept = make_kept(gen, batch, kept_width, false);
      check_sparse(cache, batch, q, kept, kept_width, shape);
    }
  }
}

// The FP8 cache (LatentShape::fp8): the three kernels over the codes, factors and k_pe planes
// against the CPU on the dequantized rows. The kernels round code * factor to bf16 once, so they
// are held to the bf16 tolerance. DeepSeek's rank at 16, 128 and 40 heads and the tiny ranks;
// decode with splits and a padding row, chunked prefill, sparse lists with -1 padding.
TEST(MlaFp8Cache, DecodePrefillAndSparseMatchTheReferenceOnTheDequantizedRows) {
  auto gen = rng(601);
  const LatentShape shapes[] = {{16, 512, 64, 16, true}, {128, 512, 64, 64, true}, {40, 512, 64, 1, true},
                                {4, 16, 8, 1, true},     {16, 64, 8, 16, true}};
  const std::vector<PrefillSeq> sparse_seqs = {{0, 5}, {37, 64}, {500, 30}, {2000, 1}, {10, 0}};
  for (const LatentShape& shape : shapes) {
    check_decode(gen, {1, 17, 65, 1000, 0, 5000}, shape);
    check_decode(gen, {4096}, shape);
    check_prefill(gen, kSmallPrefillBatch, shape);
    const PrefillBatch batch = batch_of(sparse_seqs);
    const LatentCache cache(gen, batch.contexts, shape);
    const std::vector<float> q = random_queries(gen, batch, shape);
    for (int32_t kept_width : {64, 150}) {
      SCOPED_TRACE(testing::Message() << shape << " kept_width " << kept_width);
      check_sparse(cache, batch, q, make_kept(gen, batch, kept_width, false), kept_width, shape);
    }
  }
}

// Keeping every token is dense attention: the sparse kernel must match the CPU and the GPU's
// dense prefill (prefill batch) and dense decode (one row per sequence).
TEST(SparseMlaAttention, KeepingEverythingMatchesDense) {
  auto gen = rng(502);
  for (const LatentShape& shape : {LatentShape{16, 512, 64, 16}, LatentShape{4, 16, 8, 1}}) {
    SCOPED_TRACE(testing::Message() << shape);
    {
      const std::vector<PrefillSeq> seqs = {{0, 70}, {37, 64}, {200, 3}, {0, 1}};
      const PrefillBatch batch = batch_of(seqs);
      const int32_t kept_width = *std::max_element(batch.contexts.begin(), batch.contexts.end()) + 5;
      const LatentCache cache(gen, batch.contexts, shape);
      const std::vector<float> q = random_queries(gen, batch, shape);
      const std::vector<int32_t> kept = make_kept(gen, batch, kept_width, true);
      const std::vector<float> out = check_sparse(cache, batch, q, kept, kept_width, shape);
      const std::vector<float> dense = prefill_on_device(cache, batch, q, shape);
      EXPECT_LT(relative_error(out, dense), kBf16Tolerance) << "sparse (all kept) vs dense prefill";
    }
    {
      const std::vector<int32_t> contexts = {1, 65, 300, 1000};
      std::vector<PrefillSeq> seqs;
      for (int32_t ctx : contexts) seqs.push_back({ctx - 1, 1});
      const PrefillBatch batch = batch_of(seqs);
      const int32_t kept_width = 1000;
      const LatentCache cache(gen, contexts, shape);
      const std::vector<float> q =
          random_bf16_values(gen, contexts.size() * static_cast<size_t>(shape.num_heads) * shape.width(), 1.5f);
      const std::vector<int32_t> kept = make_kept(gen, batch, kept_width, true);
      const std::vector<float> out = check_sparse(cache, batch, q, kept, kept_width, shape);
      const std::vector<float> dense = decode_on_device(cache, contexts, q, shape);
      EXPECT_LT(relative_error(out, dense), kBf16Tolerance) << "sparse (all kept) vs dense decode";
    }
  }
}

// --- sparse at small batch: each token's list split across CTAs, partials merged ---

// kept: [tokens, kept_width] whose entries lie only in the 64-entry tiles `tile_used` marks:
// random distinct positions 0 .. the row's position, ascending, as many as those tiles hold (in
// random slots of them when fewer); every slot of the other tiles is -1, so a split made of
// them sees no key and its partial must weigh nothing in the merge.
std::vector<int32_t> make_tiled_kept(std::mt19937_64& gen, const PrefillBatch& batch, int32_t kept_width,
                                     const std::vector<bool>& tile_used) {
  std::vector<int32_t> slots;  // the slots that may hold a position, ascending
  for (int32_t j = 0; j < kept_width; ++j) {
    if (tile_used[j / 64]) slots.push_back(j);
  }
  std::vector<int32_t> kept(static_cast<size_t>(batch.tokens()) * kept_width, -1);
  for (size_t s = 0; s < batch.contexts.size(); ++s) {
    const int32_t rows = batch.starts[s + 1] - batch.starts[s];
    for (int32_t i = 0; i < rows; ++i) {
      std::vector<int32_t> positions(batch.contexts[s] - rows + i + 1);
      std::iota(positions.begin(), positions.end(), 0);
      std::shuffle(positions.begin(), positions.end(), gen);
      const size_t count = std::min(positions.size(), slots.size());
      positions.resize(count);
      std::sort(positions.begin(), positions.end());
      std::vector<int32_t> chosen = slots;
      std::shuffle(chosen.begin(), chosen.end(), gen);
      chosen.resize(count);
      std::sort(chosen.begin(), chosen.end());
      int32_t* row = kept.data() + static_cast<size_t>(batch.starts[s] + i) * kept_width;
      for (size_t k = 0; k < count; ++k) row[chosen[k]] = positions[k];
    }
  }
  return kept;
}

// Batch 1 and 4 (one sequence each, and one sequence of 4 rows) at contexts up to 8192 with
// DeepSeek-V3.2's 2048-wide lists: on an H200 these take 32 one-tile splits (8 at 4 tokens of
// 128 heads), and a 3000-wide list at 16 heads takes 47 (the merge's upper lanes). Lists full,
// in the first two tiles only (30 empty splits), in the last tile only (split 0 empty) and in
// every third tile. The result must match the CPU and repeat bit for bit.
TEST(SparseMlaAttention, SplitListsAtSmallBatch) {
  auto gen = rng(503);
  struct Case {
    LatentShape shape;
    int32_t kept_width;
    std::vector<PrefillSeq> seqs;
  };
  const std::vector<PrefillSeq> one = {{8191, 1}};
  const std::vector<PrefillSeq> four = {{8191, 1}, {2999, 1}, {2047, 1}, {5999, 1}};
  const std::vector<PrefillSeq> four_rows = {{6000, 4}};
  const LatentShape v32{128, 512, 64, 64}, lite{16, 512, 64, 16};
  const Case cases[] = {{v32, 2048, one},  {v32, 2048, four},  {v32, 2048, four_rows}, {lite, 2048, one},
                        {lite, 2048, four}, {lite, 3000, one}, {LatentShape{4, 16, 8, 1}, 2048, four}};
  for (const Case& c : cases) {
    const LatentShape& shape = c.shape;
    const PrefillBatch batch = batch_of(c.seqs);
    SCOPED_TRACE(testing::Message() << shape << " kept_width " << c.kept_width << " tokens " << batch.tokens());
    EXPECT_GT(gpu::sparse_mla_workspace_bytes(batch.tokens(), shape.num_heads, shape.rank, c.kept_width), 0u);
    const LatentCache cache(gen, batch.contexts, shape);
    const std::vector<float> q = random_queries(gen, batch, shape);
    const int32_t tiles = (c.kept_width + 63) / 64;
    std::vector<std::vector<bool>> layouts(4, std::vector<bool>(tiles, false));
    for (int32_t tile = 0; tile < tiles; ++tile) {
      layouts[0][tile] = true;
      layouts[1][tile] = tile < 2;
      layouts[2][tile] = tile == tiles - 1;
      layouts[3][tile] = tile % 3 == 1;
    }
    for (size_t layout = 0; layout < layouts.size(); ++layout) {
      SCOPED_TRACE(testing::Message() << "layout " << layout);
      const std::vector<int32_t> kept = make_tiled_kept(gen, batch, c.kept_width, layouts[layout]);
      const std::vector<float> out = check_sparse(cache, batch, q, kept, c.kept_width, shape);
      EXPECT_TRUE(out == sparse_on_device(cache, batch, q, kept, c.kept_width, shape)) << "not deterministic";
    }
  }
}

// A prefill-like step (300 tokens x 4 head CTAs: more than 8 waves on up to 150 SMs) takes one
// split and writes `out` directly, with no workspace at all; the workspace stops growing once
// steps are that large.
TEST(SparseMlaAttention, ManyTokensDoNotSplit) {
  auto gen = rng(504);
  const LatentShape shape{128, 512, 64, 64};
  const int32_t kept_width = 2048;
  const PrefillBatch batch = batch_of({{0, 200}, {500, 100}});
  const LatentCache cache(gen, batch.contexts, shape);
  const std::vector<float> q = random_queries(gen, batch, shape);
  const std::vector<int32_t> kept = make_tiled_kept(gen, batch, kept_width, std::vector<bool>(32, true));
  check_sparse(cache, batch, q, kept, kept_width, shape, /*workspace=*/false);
  for (int32_t heads : {16, 128}) {
    EXPECT_EQ(gpu::sparse_mla_workspace_bytes(100000, heads, 512, kept_width),
              gpu::sparse_mla_workspace_bytes(4096, heads, 512, kept_width))
        << heads << " heads";
  }
  EXPECT_EQ(gpu::sparse_mla_workspace_bytes(64, 128, 512, 64), 0u) << "one tile never splits";
}

TEST(MlaAttention, EmptyBatchesLaunchNothing) {
  const gpu::PagedLatentView view{nullptr, nullptr, 1, 16, 512, 64};
  const gpu::MlaAttentionParams params{16, 0.1f};
  gpu::mla_decode_attention(nullptr, nullptr, view, nullptr, 0, 4096, params, nullptr, 0, nullptr);
  gpu::mla_prefill_attention(nullptr, nullptr, view, nullptr, nullptr, 0, 0, 0, params, nullptr);
  gpu::sparse_mla_attention(nullptr, nullptr, view, nullptr, 2048, nullptr, 0, 0, params, nullptr, 0, nullptr);
  TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(MlaAttention, BadShapesAreRejected) {
  DeviceArray<bf16> buffer(64);
  DeviceArray<int32_t> ints(64);
  const gpu::MlaAttentionParams params{16, 0.1f};
  for (const gpu::PagedLatentView& view :
       {gpu::PagedLatentView{buffer.data(), ints.data(), 1, 16, 520, 64}, gpu::PagedLatentView{buffer.data(), ints.data(), 1, 16, 512, 72},
        gpu::PagedLatentView{buffer.data(), ints.data(), 1, 16, 12, 8}, gpu::PagedLatentView{buffer.data(), ints.data(), 1, 0, 512, 64}}) {
    EXPECT_THROW(gpu::mla_prefill_attention(buffer.data(), buffer.data(), view, ints.data(), ints.data(), 1, 1, 1, params,
                                            nullptr),
                 Error);
  }
}

// --- DeepSeek shapes at long contexts: many KV splits, spot-checked (the timing of these shapes
// is bench/kernels/bench_mla_dsa.cpp's, not a test's) ---

TEST(MlaDecodeAttention, DeepSeekShapesAtLongContexts) {
  auto gen = rng(601);
  for (int32_t heads : {16, 128}) {
    const LatentShape shape{heads, 512, 64, 64};
    for (auto [batch, ctx] : {std::pair{1, 4096}, std::pair{32, 4096}, std::pair{64, 2048}}) {
      SCOPED_TRACE(testing::Message() << shape << " batch " << batch << " context " << ctx);
      const std::vector<int32_t> contexts(batch, ctx);
      const LatentCache cache(gen, contexts, shape);
      const std::vector<float> q =
          random_bf16_values(gen, static_cast<size_t>(batch) * heads * shape.width(), 1.5f);
      const std::vector<float> out = decode_on_device(cache, contexts, q, shape);
      const size_t out_elems = static_cast<size_t>(heads) * shape.rank;
      std::vector<float> ref(out_elems);
      const size_t s = batch - 1;  // spot-check the last sequence
      cache.reference(ref.data(), q.data() + s * heads * shape.width(), s, ctx, 1);
      EXPECT_LT(relative_error(slice(out, s * out_elems, out_elems), ref), kBf16Tolerance);
    }
  }
}

TEST(MlaPrefillAttention, DeepSeekLiteLongPrompt) {
  auto gen = rng(602);
  const LatentShape shape{16, 512, 64, 64};
  const int32_t n = 2048;
  const PrefillBatch batch = batch_of({{0, n}});
  const LatentCache cache(gen, batch.contexts, shape);
  const std::vector<float> q = random_bf16_values(gen, static_cast<size_t>(n) * shape.num_heads * shape.width());
  DeviceArray<int32_t> starts_d = upload(batch.starts), contexts_d = upload(batch.contexts);
  DeviceArray<bf16> q_d = upload_bf16(q), out_d(static_cast<size_t>(n) * shape.num_heads * shape.rank);
  gpu::mla_prefill_attention(out_d.data(), q_d.data(), cache.view(), starts_d.data(), contexts_d.data(), 1, n, n,
                             params_of(shape), nullptr);
  const size_t row_elems = static_cast<size_t>(shape.num_heads) * shape.rank;
  const std::vector<float> out = download_f32(out_d);
  for (int32_t first : {0, 1000, n - 40}) {
    const int32_t rows = 40;  // rows [first, first + rows) see tokens up to first + rows
    std::vector<float> ref(rows * row_elems);
    cache.reference(ref.data(), q.data() + static_cast<size_t>(first) * shape.num_heads * shape.width(), 0,
                    first + rows, rows);
    EXPECT_LT(relative_error(slice(out, first * row_elems, rows * row_elems), ref), kBf16Tolerance)
        << "rows from " << first;
  }
}

// The expanded prefill end to end against the CPU's absorbed attention of the same inputs:
//   q_abs = [q_nope @ W_uk_h | q_pe]; out[t, h] = paged_mla_attention(q_abs)[t, h] @ W_uv_h^T,
// W_uk_h and W_uv_h the row blocks of a random kv_b_proj [heads * (nope + v), rank]. The first
// `decodes` sequences (one row each) are the step's decodes: their rows of the output stay
// poisoned, and the gather and attention see only the prefill sequences after them.
void check_expanded(std::mt19937_64& gen, const std::vector<PrefillSeq>& seqs, int32_t decodes, const LatentShape& shape,
                    int32_t nope, int32_t v) {
  SCOPED_TRACE(testing::Message() << shape << " nope " << nope << " v " << v << " decodes " << decodes << " head width "
                                  << gpu::mla_expanded_head_dim(nope, shape.rope, v));
  const PrefillBatch batch = batch_of(seqs);
  const LatentCache cache(gen, batch.contexts, shape);
  const int32_t H = shape.num_heads, rank = shape.rank, rope = shape.rope, T = batch.tokens();
  const int32_t S = static_cast<int32_t>(seqs.size()), prefills = S - decodes, kv_b_rows = nope + v;
  const int32_t E = gpu::mla_expanded_head_dim(nope, rope, v);
  ASSERT_GT(E, 0);
  const std::vector<float> q = random_bf16_values(gen, static_cast<size_t>(T) * H * (nope + rope), 1.5f);
  const std::vector<float> w = random_bf16_values(gen, static_cast<size_t>(H) * kv_b_rows * rank,
                                                  1.0f / std::sqrt(static_cast<float>(rank)));
  // The absorbed queries: the reference's in f32; the device's holds only the rope part (its
  // absorbed columns are NaN: the expanded path must not read them).
  std::vector<float> q_abs(static_cast<size_t>(T) * H * (rank + rope)), q_abs_device(q_abs.size(), NAN);
  for (int32_t t = 0; t < T; ++t) {
    for (int32_t h = 0; h < H; ++h) {
      const float* qh = q.data() + (static_cast<size_t>(t) * H + h) * (nope + rope);
      const size_t at = (static_cast<size_t>(t) * H + h) * (rank + rope);
      for (int32_t j = 0; j < rank; ++j) {
        float sum = 0.0f;
        for (int32_t d = 0; d < nope; ++d) sum += qh[d] * w[(static_cast<size_t>(h) * kv_b_rows + d) * rank + j];
        q_abs[at + j] = sum;
      }
      for (int32_t d = 0; d < rope; ++d) q_abs[at + rank + d] = q_abs_device[at + rank + d] = qh[nope + d];
    }
  }
  const std::vector<float> latent = prefill_reference(cache, batch, q_abs, shape);  // [T, H, rank]
  std::vector<float> ref(static_cast<size_t>(T) * H * v);
  for (int32_t t = 0; t < T; ++t) {
    for (int32_t h = 0; h < H; ++h) {
      const float* lat = latent.data() + (static_cast<size_t>(t) * H + h) * rank;
      for (int32_t j = 0; j < v; ++j) {
        const float* row = w.data() + (static_cast<size_t>(h) * kv_b_rows + nope + j) * rank;
        float sum = 0.0f;
        for (int32_t i = 0; i < rank; ++i) sum += lat[i] * row[i];
        ref[(static_cast<size_t>(t) * H + h) * v + j] = sum;
      }
    }
  }

  int64_t context_tokens = 0;
  int32_t longest = 1;
  for (int32_t s = decodes; s < S; ++s) {
    context_tokens += batch.contexts[s];
    longest = std::max(longest, batch.contexts[s]);
  }
  const int64_t bound = gpu::mla_expanded_rows_bound(context_tokens, prefills);
  const int32_t rows = static_cast<int32_t>((bound + gpu::kMlaExpandedBlock - 1) / gpu::kMlaExpandedBlock *
                                            gpu::kMlaExpandedBlock);
  const int32_t stride = gpu::mla_expanded_table_stride(longest);
  DeviceArray<int32_t> starts_d = upload(batch.starts), contexts_d = upload(batch.contexts);
  DeviceArray<bf16> q_d = upload_bf16(q), q_abs_d = upload_bf16(q_abs_device), w_d = upload_bf16(w);
  DeviceArray<bf16> latent_rows(std::max<size_t>(static_cast<size_t>(rows) * (rank + rope), 1));
  DeviceArray<bf16> k_d(std::max<size_t>(static_cast<size_t>(rows) * H * E, 1)), v_d(k_d.size());
  DeviceArray<int32_t> tables(static_cast<size_t>(std::max(prefills, 1)) * stride);
  DeviceArray<bf16> q_exp(static_cast<size_t>(T) * H * E), out_exp(q_exp.size());
  DeviceArray<bf16> attn(static_cast<size_t>(T) * H * v);
  gpu::PagedLatentView view = cache.view();
  view.block_tables += static_cast<size_t>(decodes) * view.block_table_stride;
  gpu::mla_expanded_gather(latent_rows.data(), k_d.data(), v_d.data(), tables.data(), stride, view,
                           contexts_d.data() + decodes, prefills, rows, H, nope, v, E, nullptr);
  gpu::HeadGemm head_gemm;
  const gpu::HeadMatrix a{latent_rows.data(), rank + rope, 0};
  head_gemm.run(k_d.data(), int64_t{H} * E, E, a, {w_d.data(), rank, int64_t{kv_b_rows} * rank},
                gpu::HeadGemmB::kTransposed, rows, nope, rank, H, nullptr);
  head_gemm.run(v_d.data(), int64_t{H} * E, E, a, {w_d.data() + int64_t{nope} * rank, rank, int64_t{kv_b_rows} * rank},
                gpu::HeadGemmB::kTransposed, rows, v, rank, H, nullptr);
  gpu::mla_expanded_queries(q_exp.data(), q_d.data(), q_abs_d.data(), decodes, T, H, nope, rope, rank, E, nullptr);
  const gpu::PagedKvView kv{.k_cache = k_d.data(), .v_cache = v_d.data(), .block_tables = tables.data(),
                            .block_table_stride = stride, .block_size = gpu::kMlaExpandedBlock, .num_kv_heads = H,
                            .head_dim = E};
  gpu::paged_prefill_attention(out_exp.data(), q_exp.data(), kv, starts_d.data() + decodes, contexts_d.data() + decodes,
                               prefills, T, batch.max_rows, {.num_heads = H, .scale = shape.scale()}, nullptr);
  gpu::mla_expanded_output(attn.data(), out_exp.data(), decodes, T, H, v, E, nullptr);
  const std::vector<float> out = download_f32(attn);

  const size_t row = static_cast<size_t>(H) * v;
  const size_t first = static_cast<size_t>(batch.starts[decodes]);
  for (size_t i = 0; i < first * row; ++i) {
    ASSERT_TRUE(std::isnan(out[i])) << "decode row " << i / row << " was written";
  }
  for (int32_t s = decodes; s < S; ++s) {
    const size_t count = static_cast<size_t>(batch.starts[s + 1] - batch.starts[s]) * row;
    if (count == 0) continue;
    EXPECT_LT(relative_error(slice(out, batch.starts[s] * row, count), slice(ref, batch.starts[s] * row, count)),
              kBf16Tolerance)
        << "sequence " << s << " context " << batch.contexts[s];
  }
  EXPECT_LT(relative_error(slice(out, first * row, (T - first) * row), slice(ref, first * row, (T - first) * row)),
            kBf16Tolerance);
}

TEST(MlaExpandedPrefill, MatchesTheAbsorbedAttentionTimesWuv) {
  auto gen = rng(701);
  // Two decodes, then the chunked, prefix-cached and empty prompts of kPrefillBatch.
  std::vector<PrefillSeq> seqs = {{30, 1}, {5, 1}};
  seqs.insert(seqs.end(), kPrefillBatch.begin(), kPrefillBatch.end());
  check_expanded(gen, seqs, 2, LatentShape{16, 512, 64, 16}, 128, 128);  // DeepSeek-V2-Lite / V3 heads
  check_expanded(gen, kPrefillBatch, 0, LatentShape{16, 512, 64, 64}, 128, 128);
  check_expanded(gen, kSmallPrefillBatch, 0, LatentShape{16, 512, 64, 1}, 128, 128);
  check_expanded(gen, kSmallPrefillBatch, 1, LatentShape{4, 16, 8, 1}, 16, 16);  // the tiny test models
  check_expanded(gen, {{0, 100}, {64, 30}}, 0, LatentShape{128, 512, 64, 64}, 128, 128);  // DeepSeek-V3's 128 heads
  check_expanded(gen, {{0, 130}}, 0, LatentShape{8, 512, 64, 16}, 192, 256);  // widths up to the padded 256
  // The FP8 cache (codes x factor per 128 values, bf16 k_pe; the reference attends the dequantized rows).
  check_expanded(gen, seqs, 2, LatentShape{16, 512, 64, 16, /*fp8=*/true}, 128, 128);
  check_expanded(gen, kSmallPrefillBatch, 1, LatentShape{4, 16, 8, 1, /*fp8=*/true}, 16, 16);
}

TEST(MlaExpandedPrefill, RefusesWhatTheDenseKernelCannotHold) {
  DeviceArray<bf16> buf(1024);
  DeviceArray<int32_t> ints(16);
  gpu::PagedLatentView view{buf.data(), ints.data(), 1, 16, 512, 64};
  auto gather = [&](const gpu::PagedLatentView& v, int32_t rows, int32_t nope, int32_t v_dim) {
    return error_of([&] {
      gpu::mla_expanded_gather(buf.data(), buf.data(), buf.data(), ints.data(), 1, v, ints.data(), 1, rows, 2, nope,
                               v_dim, gpu::mla_expanded_head_dim(nope, v.rope_dim, v_dim), nullptr);
    });
  };
  EXPECT_NE(gather(view, 64, 200, 128), "") << "nope + rope past 256";
  EXPECT_NE(gather(view, 64, 128, 264), "") << "v past 256";
  EXPECT_NE(gather(view, 60, 128, 128), "") << "rows not a multiple of the scratch block";
  gpu::PagedLatentView fp8 = view;
  fp8.cache = nullptr;
  fp8.codes = reinterpret_cast<const uint8_t*>(buf.data());
  EXPECT_NE(gather(fp8, 64, 128, 128), "") << "an FP8 cache without its factor and k_pe planes";
  EXPECT_EQ(gather(view, 0, 128, 128), "") << "no rows: nothing to do";
  EXPECT_EQ(gpu::mla_expanded_head_dim(128, 64, 128), 192) << "DeepSeek's widths";
  EXPECT_EQ(gpu::mla_expanded_head_dim(192, 64, 256), 256) << "GLM-5's";
  EXPECT_EQ(gpu::mla_expanded_head_dim(16, 8, 16), 64) << "the tiny test models'";
  EXPECT_EQ(gpu::mla_expanded_head_dim(200, 64, 128), 0) << "past 256";
  EXPECT_NE(error_of([&] { gpu::mla_expanded_queries(buf.data(), buf.data(), buf.data(), 0, 1, 2, 200, 64, 512, 256,
                                                     nullptr); }),
            "") << "nope + rope past the head width";
  EXPECT_NE(error_of([&] { gpu::mla_expanded_queries(buf.data(), buf.data(), buf.data(), 0, 1, 2, 128, 64, 512, 160,
                                                     nullptr); }),
            "") << "a width the dense kernel does not have";
  EXPECT_NE(error_of([&] { gpu::mla_expanded_output(buf.data(), buf.data(), 0, 1, 2, 264, 256, nullptr); }), "");
}

}  // namespace
}  // namespace tachyon::gpu_test
