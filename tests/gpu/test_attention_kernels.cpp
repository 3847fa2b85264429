// The paged decode and prefill attention kernels against the CPU paged_attention (the spec),
// fed the same bf16-rounded q/k/v. Caches are built the hard way: shuffled block tables, block
// sizes 16 and 32, unused blocks full of large garbage (wrong indexing shows as a large
// error) and the slots past each sequence's last key full of NaN (a kernel that lets them into
// the math shows as an infinite error). Outputs must be within kBf16Tolerance overall and per
// sequence. Llama-3-8B shapes at serving sizes are checked too; their timing lives in
// bench/kernels/bench_attention.cpp (tests check correctness only).
// FP8 caches (--kv-cache-dtype fp8): the same caches quantized per (slot, kv head) by the CPU's
// codec (tensor/fp8.h, as the CPU reference's FP8 cache rounds a row); the CPU attends over the
// dequantized f32 values, the prefill kernel over bf16(code * factor), the decode kernel over the
// codes in f16 with the factors applied outside the products; NaN rows carry NaN codes and
// factors. The same tolerance holds.
// Run on the GPU machine: build/tests/gpu_attention_kernels (TACHYON_TEST_SEED replays a run).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <vector>

#include "gpu_test_util.h"
#include "tachyon/kernels/attention.h"
#include "tachyon/kernels/cuda/attention.h"
#include "tachyon/tensor/fp8.h"

namespace tachyon::gpu_test {
namespace {

namespace cpu = kernels::cpu;
namespace gpu = kernels::cuda;

struct HeadShape {
  int32_t num_heads = 32;
  int32_t num_kv_heads = 8;
  int32_t head_dim = 128;
  int32_t block_size = 16;
  int32_t window = 0;
  bool fp8 = false;  // an FP8 cache (PagedKvView::fp8)
  int32_t row_spread_log2 = 0;  // each K and V row (slot, kv head) scaled by 2^k, k uniform in [-this, this]
};

// K/V of several sequences in one paged cache, host f32 (for the reference) and device bf16.
class PagedCache {
 public:
  // contexts[s]: keys of sequence s. Its block table row lists ceil(contexts[s] / block_size)
  // blocks drawn from a shuffled pool, then garbage blocks up to the row stride.
  PagedCache(std::mt19937_64& gen, const std::vector<int32_t>& contexts, const HeadShape& shape)
      : shape_(shape) {
    const int32_t bs = shape.block_size;
    int32_t needed = 0, longest = 0;
    for (int32_t ctx : contexts) {
      needed += (ctx + bs - 1) / bs;
      longest = std::max(longest, (ctx + bs - 1) / bs);
    }
    stride_ = longest + 2;
    const int32_t garbage = needed / 2 + 3;
    num_blocks_ = needed + garbage;
    std::vector<int32_t> pool(num_blocks_);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), gen);
    const size_t row = static_cast<size_t>(shape.num_kv_heads) * shape.head_dim;
    const size_t block_elems = bs * row;
    // Every block starts as large garbage; owned slots get real values, owned slots past the
    // context get NaN.
    k_ = random_bf16_values(gen, num_blocks_ * block_elems, 50.0f);
    v_ = random_bf16_values(gen, num_blocks_ * block_elems, 50.0f);
    tables_.assign(contexts.size() * stride_, 0);
    size_t next = 0;
    for (size_t s = 0; s < contexts.size(); ++s) {
      const int32_t blocks = (contexts[s] + bs - 1) / bs;
      for (int32_t b = 0; b < stride_; ++b) {
        tables_[s * stride_ + b] = b < blocks ? pool[next++] : pool[needed + (s + b) % garbage];
      }
      for (int32_t b = 0; b < blocks; ++b) {
        std::vector<float> k = random_bf16_values(gen, block_elems), v = random_bf16_values(gen, block_elems);
        if (shape.row_spread_log2 > 0) spread_rows(gen, shape, k, v);
        const size_t at = static_cast<size_t>(tables_[s * stride_ + b]) * block_elems;
        for (size_t i = 0; i < block_elems; ++i) {
          const bool owned = b * bs + static_cast<int32_t>(i / row) < contexts[s];
          k_[at + i] = owned ? k[i] : NAN;
          v_[at + i] = owned ? v[i] : NAN;
        }
      }
    }
    if (shape.fp8) {
      quantize_rows(k_, k_codes_d_, k_factors_d_);
      quantize_rows(v_, v_codes_d_, v_factors_d_);
    }
    k_d_.emplace(upload_bf16(k_));
    v_d_.emplace(upload_bf16(v_));
    tables_d_.emplace(upload(tables_));
  }

  gpu::PagedKvView view() const {
    gpu::PagedKvView view{k_d_->data(), v_d_->data(), tables_d_->data(), stride_,
                          shape_.block_size, shape_.num_kv_heads, shape_.head_dim};
    if (shape_.fp8) {  // the bf16 copies stay poisoned with nothing: the kernels must not read them
      view.k_cache = view.v_cache = nullptr;
      view.fp8 = {k_codes_d_->data(), v_codes_d_->data(), k_factors_d_->data(), v_factors_d_->data()};
    }
    return view;
  }

  // out, q: [n, num_heads, head_dim] f32: the CPU kernel for sequence s's last n positions of ctx.
  void reference(float* out, const float* q, size_t s, int32_t ctx, int32_t n, float scale) const {
    const cpu::AttentionShape shape{n, ctx - n, shape_.num_heads, shape_.num_kv_heads, shape_.head_dim,
                                    shape_.window, scale};
    cpu::paged_attention(out, q, k_.data(), v_.data(), tables_.data() + s * stride_, shape_.block_size, shape);
  }

  const std::vector<int32_t>& tables() const { return tables_; }
  int32_t stride() const { return stride_; }

 private:
  // Scales each head_dim row of k and of v by its own power of two (exact in bf16).
  static void spread_rows(std::mt19937_64& gen, const HeadShape& shape, std::vector<float>& k, std::vector<float>& v) {
    std::uniform_int_distribution<int> exponent(-shape.row_spread_log2, shape.row_spread_log2);
    for (std::vector<float>* values : {&k, &v}) {
      for (size_t r = 0; r < values->size() / shape.head_dim; ++r) {
        const float scale = std::ldexp(1.0f, exponent(gen));
        for (int32_t d = 0; d < shape.head_dim; ++d) (*values)[r * shape.head_dim + d] *= scale;
      }
    }
  }

  // Each head_dim row of `values` -> E4M3 codes and its factor (the CPU codec); `values` becomes
  // the dequantized row, what the reference attends over. A row holding NaN gets NaN codes (0x7f)
  // and a NaN factor, so a kernel that reads it shows an infinite error.
  void quantize_rows(std::vector<float>& values, std::optional<DeviceArray<uint8_t>>& codes_d,
                     std::optional<DeviceArray<float>>& factors_d) {
    const size_t width = static_cast<size_t>(shape_.head_dim), rows = values.size() / width;
    std::vector<uint8_t> codes(values.size());
    std::vector<float> factors(rows);
    for (size_t r = 0; r < rows; ++r) {
      std::span<float> row(values.data() + r * width, width);
      if (std::any_of(row.begin(), row.end(), [](float x) { return std::isnan(x); })) {
        std::fill(codes.begin() + r * width, codes.begin() + (r + 1) * width, uint8_t{0x7f});
        factors[r] = NAN;
        continue;
      }
      const Fp8BlockWeight q = quantize_fp8_blocks(row, 1, static_cast<int64_t>(width), 1, static_cast<int64_t>(width));
      std::copy(q.data.begin(), q.data.end(), codes.begin() + r * width);
      factors[r] = q.scale_inv[0];
      dequantize_fp8_blocks(q.data, q.scale_inv, 1, static_cast<int64_t>(width), 1, static_cast<int64_t>(width), row);
    }
    codes_d.emplace(upload(codes));
    factors_d.emplace(upload(factors));
  }

  HeadShape shape_;
  int32_t stride_ = 0, num_blocks_ = 0;
  std::vector<float> k_, v_;        // [num_blocks, block_size, num_kv_heads, head_dim]
  std::vector<int32_t> tables_;     // [num_seqs, stride_]
  std::optional<DeviceArray<bf16>> k_d_, v_d_;
  std::optional<DeviceArray<int32_t>> tables_d_;
  std::optional<DeviceArray<uint8_t>> k_codes_d_, v_codes_d_;
  std::optional<DeviceArray<float>> k_factors_d_, v_factors_d_;
};

gpu::AttentionParams params_of(const HeadShape& shape) {
  return gpu::AttentionParams{shape.num_heads, 1.0f / std::sqrt(static_cast<float>(shape.head_dim)), shape.window};
}

std::vector<float> slice(const std::vector<float>& values, size_t begin, size_t count) {
  return std::vector<float>(values.begin() + begin, values.begin() + begin + count);
}

// --- decode ---

struct DecodeRun {
  std::vector<float> out;  // [num_seqs, num_heads, head_dim]
  std::vector<float> ref;
};

// One decode step over `contexts` (max_context_len = `bound`, or the longest when 0), the queries
// drawn with standard deviation q_scale.
DecodeRun run_decode(std::mt19937_64& gen, const std::vector<int32_t>& contexts, const HeadShape& shape,
                     int32_t bound = 0, float q_scale = 1.5f) {
  const PagedCache cache(gen, contexts, shape);
  const int32_t num_seqs = static_cast<int32_t>(contexts.size());
  const size_t head_elems = static_cast<size_t>(shape.num_heads) * shape.head_dim;
  const std::vector<float> q = random_bf16_values(gen, num_seqs * head_elems, q_scale);
  const gpu::AttentionParams params = params_of(shape);
  DecodeRun run;
  run.ref.assign(num_seqs * head_elems, 0.0f);
  for (int32_t s = 0; s < num_seqs; ++s) {
    if (contexts[s] > 0) cache.reference(run.ref.data() + s * head_elems, q.data() + s * head_elems, s, contexts[s], 1, params.scale);
  }
  const int32_t max_context_len = bound > 0 ? bound : *std::max_element(contexts.begin(), contexts.end());
  const size_t workspace_bytes =
      gpu::paged_decode_workspace_bytes(num_seqs, shape.num_heads, shape.head_dim, max_context_len);
  DeviceArray<uint8_t> workspace(std::max<size_t>(workspace_bytes, 1));
  DeviceArray<bf16> q_d = upload_bf16(q), out_d(num_seqs * head_elems);
  DeviceArray<int32_t> contexts_d = upload(contexts);
  gpu::paged_decode_attention(out_d.data(), q_d.data(), cache.view(), contexts_d.data(), num_seqs, max_context_len,
                              params, workspace.data(), workspace_bytes, nullptr);
  run.out = download_f32(out_d);
  return run;
}

void expect_decode_close(const std::vector<int32_t>& contexts, const HeadShape& shape, const DecodeRun& run) {
  const size_t head_elems = static_cast<size_t>(shape.num_heads) * shape.head_dim;
  EXPECT_LT(relative_error(run.out, run.ref), kBf16Tolerance);
  for (size_t s = 0; s < contexts.size(); ++s) {
    SCOPED_TRACE(testing::Message() << "sequence " << s << " context " << contexts[s]);
    const std::vector<float> out = slice(run.out, s * head_elems, head_elems);
    if (contexts[s] == 0) {
      EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == 0.0f; }));
    } else {
      EXPECT_LT(relative_error(out, slice(run.ref, s * head_elems, head_elems)), kBf16Tolerance);
    }
  }
}

void check_decode(std::mt19937_64& gen, const std::vector<int32_t>& contexts, const HeadShape& shape,
                  int32_t bound = 0, float q_scale = 1.5f) {
  SCOPED_TRACE(testing::Message() << "heads " << shape.num_heads << "/" << shape.num_kv_heads << " head_dim "
                                  << shape.head_dim << " block " << shape.block_size << " window " << shape.window
                                  << (shape.fp8 ? " fp8" : "") << " row spread 2^" << shape.row_spread_log2
                                  << " batch " << contexts.size() << " bound " << bound << " q scale " << q_scale);
  expect_decode_close(contexts, shape, run_decode(gen, contexts, shape, bound, q_scale));
}

const std::vector<int32_t> kDecodeContexts = {1, 2, 15, 16, 17, 100, 1000, 5000};

// Batch 1 at every length (one split up to 256 keys, many splits at 5000), then all the
// lengths in one batch, for each head_dim and both block sizes.
TEST(PagedDecodeAttention, EveryContextLengthAndHeadDim) {
  auto gen = rng(101);
  for (int32_t head_dim : {64, 128, 256}) {
    for (int32_t block_size : {16, 32}) {
      const HeadShape shape{32, 8, head_dim, block_size, 0};
      for (int32_t ctx : kDecodeContexts) check_decode(gen, {ctx}, shape);
      check_decode(gen, kDecodeContexts, shape);
    }
  }
}

// GQA ratios 1, 4, 7, 8 and 20 (more heads than one 16-row tile), mixed lengths up to 3000 in
// batches up to 70, with a zero-length padding sequence in each batch.
TEST(PagedDecodeAttention, MixedBatchesAndGqaRatios) {
  auto gen = rng(102);
  const HeadShape shapes[] = {{8, 8, 128, 16, 0}, {32, 8, 128, 32, 0}, {28, 4, 128, 16, 0},
                              {28, 4, 64, 32, 0}, {40, 2, 128, 16, 0}, {16, 2, 256, 16, 0}};
  for (const HeadShape& shape : shapes) {
    for (int32_t batch : {2, 9, 70}) {
      std::uniform_int_distribution<int32_t> length(1, batch > 10 ? 1500 : 3000);
      std::vector<int32_t> contexts(batch);
      for (int32_t& ctx : contexts) ctx = length(gen);
      contexts[batch / 2] = 0;
      check_decode(gen, contexts, shape);
    }
  }
}

// Windows shorter than, around and longer than the context; window 1 sees only the query's own key.
TEST(PagedDecodeAttention, SlidingWindow) {
  auto gen = rng(103);
  for (int32_t head_dim : {64, 128}) {
    for (int32_t window : {1, 100, 256, 1000, 4096}) {
      const HeadShape shape{28, 4, head_dim, window % 2 == 0 ? 16 : 32, window};
      check_decode(gen, {1, 17, 100, 999, 1000, 1001, 5000, 0}, shape);
    }
  }
}

// A graph captured with a large max_context_len replays with short contexts: the grid has
// splits no sequence uses, and bounds past kMaxSplits * 256 keys still work.
TEST(PagedDecodeAttention, MaxContextLenLargerThanContexts) {
  auto gen = rng(104);
  const HeadShape shape{32, 8, 128, 16, 0};
  check_decode(gen, {5, 0, 300}, shape, 32768);
  check_decode(gen, {5000, 1, 4097}, shape, 1 << 20);
  check_decode(gen, {0}, shape, 8192);
  check_decode(gen, std::vector<int32_t>(64, 17), shape, 131072);
}

// Llama-3-8B decode shapes at serving batches (one sequence at 100 and 5000 keys, 16 at 4096,
// 64 at 1024): the first and the last sequence against the CPU (all of them would take the CPU
// too long). Their timing lives in bench/kernels/bench_attention.cpp.
TEST(PagedDecodeAttention, Llama3ShapesAtServingBatches) {
  auto gen = rng(105);
  const HeadShape shape{32, 8, 128, 16, 0};
  const size_t head_elems = static_cast<size_t>(shape.num_heads) * shape.head_dim;
  const gpu::AttentionParams params = params_of(shape);
  for (auto [batch, ctx] : {std::pair{64, 1024}, std::pair{1, 100}, std::pair{1, 5000}, std::pair{16, 4096}}) {
    SCOPED_TRACE(testing::Message() << "batch " << batch << " context " << ctx);
    const std::vector<int32_t> contexts(batch, ctx);
    const PagedCache cache(gen, contexts, shape);
    const std::vector<float> q = random_bf16_values(gen, batch * head_elems);
    const size_t workspace_bytes = gpu::paged_decode_workspace_bytes(batch, shape.num_heads, shape.head_dim, ctx);
    DeviceArray<uint8_t> workspace(std::max<size_t>(workspace_bytes, 1));
    DeviceArray<bf16> q_d = upload_bf16(q), out_d(batch * head_elems);
    DeviceArray<int32_t> contexts_d = upload(contexts);
    gpu::paged_decode_attention(out_d.data(), q_d.data(), cache.view(), contexts_d.data(), batch, ctx, params,
                                workspace.data(), workspace_bytes, nullptr);
    const std::vector<float> out = download_f32(out_d);
    for (size_t s : {size_t{0}, static_cast<size_t>(batch - 1)}) {
      std::vector<float> ref(head_elems);
      cache.reference(ref.data(), q.data() + s * head_elems, s, ctx, 1, params.scale);
      EXPECT_LT(relative_error(slice(out, s * head_elems, head_elems), ref), kBf16Tolerance) << "sequence " << s;
    }
  }
}

// --- prefill ---

struct PrefillSeq {
  int32_t cached = 0;  // keys already in the cache before this step's rows
  int32_t rows = 0;    // query rows this step; the context is cached + rows
};

struct PrefillRun {
  std::vector<float> q;    // [num_query_tokens, num_heads, head_dim]
  std::vector<float> out;
};

// Runs the prefill kernel over `seqs` (their rows contiguous in q, in order) on `cache`, whose
// block table rows are `table_rows` (one per sequence).
std::vector<float> prefill_on_device(const PagedCache& cache, const std::vector<size_t>& table_rows,
                                     const std::vector<PrefillSeq>& seqs, const std::vector<float>& q,
                                     const HeadShape& shape) {
  std::vector<int32_t> starts = {0}, contexts, tables;
  int32_t max_rows = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    starts.push_back(starts.back() + seqs[i].rows);
    contexts.push_back(seqs[i].cached + seqs[i].rows);
    max_rows = std::max(max_rows, seqs[i].rows);
    const int32_t* row = cache.tables().data() + table_rows[i] * cache.stride();
    tables.insert(tables.end(), row, row + cache.stride());
  }
  const int32_t tokens = starts.back();
  gpu::PagedKvView view = cache.view();
  DeviceArray<int32_t> tables_d = upload(tables), starts_d = upload(starts), contexts_d = upload(contexts);
  view.block_tables = tables_d.data();
  DeviceArray<bf16> q_d = upload_bf16(q), out_d(std::max<size_t>(q.size(), 1));
  gpu::paged_prefill_attention(out_d.data(), q_d.data(), view, starts_d.data(), contexts_d.data(),
                               static_cast<int32_t>(seqs.size()), tokens, max_rows, params_of(shape), nullptr);
  std::vector<float> out = download_f32(out_d);
  out.resize(q.size());
  return out;
}

std::vector<int32_t> contexts_of(const std::vector<PrefillSeq>& seqs) {
  std::vector<int32_t> contexts;
  for (const PrefillSeq& seq : seqs) contexts.push_back(seq.cached + seq.rows);
  return contexts;
}

// The batch against the CPU per sequence, and each sequence run alone against the batch (bit
// for bit: a CTA's result must not depend on its neighbours).
void check_prefill(std::mt19937_64& gen, const std::vector<PrefillSeq>& seqs, const HeadShape& shape) {
  SCOPED_TRACE(testing::Message() << "heads " << shape.num_heads << "/" << shape.num_kv_heads << " head_dim "
                                  << shape.head_dim << " block " << shape.block_size << " window " << shape.window
                                  << (shape.fp8 ? " fp8" : ""));
  const PagedCache cache(gen, contexts_of(seqs), shape);
  const size_t row_elems = static_cast<size_t>(shape.num_heads) * shape.head_dim;
  int32_t tokens = 0;
  for (const PrefillSeq& seq : seqs) tokens += seq.rows;
  const std::vector<float> q = random_bf16_values(gen, tokens * row_elems, 1.5f);
  std::vector<size_t> table_rows(seqs.size());
  std::iota(table_rows.begin(), table_rows.end(), 0);
  const std::vector<float> out = prefill_on_device(cache, table_rows, seqs, q, shape);

  std::vector<float> ref(q.size());
  size_t begin = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const size_t count = seqs[s].rows * row_elems;
    if (count == 0) continue;
    SCOPED_TRACE(testing::Message() << "sequence " << s << " cached " << seqs[s].cached << " rows " << seqs[s].rows);
    cache.reference(ref.data() + begin, q.data() + begin, s, seqs[s].cached + seqs[s].rows, seqs[s].rows,
                    params_of(shape).scale);
    const std::vector<float> seq_out = slice(out, begin, count);
    EXPECT_LT(relative_error(seq_out, slice(ref, begin, count)), kBf16Tolerance);
    const std::vector<float> alone = prefill_on_device(cache, {s}, {seqs[s]}, slice(q, begin, count), shape);
    EXPECT_TRUE(alone == seq_out) << "batched and alone differ";
    begin += count;
  }
  EXPECT_LT(relative_error(out, ref), kBf16Tolerance);
}

// (cached prefix, new rows): whole prompts, a prompt behind prefix-cached blocks, chunked
// prefill continuing at odd offsets, a decode-like single row, a sequence with no rows.
const std::vector<PrefillSeq> kPrefillBatch = {{0, 1},    {0, 17},  {0, 200},  {37, 64},  {100, 3},
                                               {512, 300}, {50, 0}, {2200, 300}, {0, 129}, {1, 128}};

TEST(PagedPrefillAttention, RaggedBatchEveryHeadDim) {
  auto gen = rng(201);
  check_prefill(gen, kPrefillBatch, HeadShape{32, 8, 128, 16, 0});
  check_prefill(gen, kPrefillBatch, HeadShape{28, 4, 128, 32, 0});
  check_prefill(gen, kPrefillBatch, HeadShape{8, 8, 64, 16, 0});
  check_prefill(gen, kPrefillBatch, HeadShape{28, 4, 64, 32, 0});
  check_prefill(gen, kPrefillBatch, HeadShape{16, 8, 256, 16, 0});
  // 192: the prefill-only width of latent attention's expanded form (kernels/cuda/mla_expand.h),
  // as it runs there (one KV head per query head), and with GQA.
  check_prefill(gen, kPrefillBatch, HeadShape{16, 16, 192, 16, 0});
  check_prefill(gen, kPrefillBatch, HeadShape{16, 4, 192, 32, 0});
}

TEST(PagedPrefillAttention, SlidingWindow) {
  auto gen = rng(202);
  for (int32_t window : {1, 64, 100, 1000}) {
    check_prefill(gen, kPrefillBatch, HeadShape{8, 2, 128, 16, window});
    check_prefill(gen, kPrefillBatch, HeadShape{4, 1, 64, 32, window});
  }
  check_prefill(gen, kPrefillBatch, HeadShape{16, 8, 256, 32, 200});
}

// Llama-3-8B: one 2048-token causal prompt, 32 heads / 8 kv heads of 128. Checks three
// slices of rows against the CPU (the whole prompt would take the CPU too long). Its timing
// lives in bench/kernels/bench_attention.cpp.
TEST(PagedPrefillAttention, LongCausalPrompt) {
  auto gen = rng(203);
  const HeadShape shape{32, 8, 128, 16, 0};
  const int32_t n = 2048;
  const PagedCache cache(gen, {n}, shape);
  const size_t row_elems = static_cast<size_t>(shape.num_heads) * shape.head_dim;
  const std::vector<float> q = random_bf16_values(gen, n * row_elems);
  const std::vector<int32_t> starts = {0, n}, contexts = {n};
  DeviceArray<int32_t> starts_d = upload(starts), contexts_d = upload(contexts);
  DeviceArray<bf16> q_d = upload_bf16(q), out_d(n * row_elems);
  const gpu::AttentionParams params = params_of(shape);
  gpu::paged_prefill_attention(out_d.data(), q_d.data(), cache.view(), starts_d.data(), contexts_d.data(), 1, n, n,
                               params, nullptr);
  const std::vector<float> out = download_f32(out_d);
  for (int32_t first : {0, 1000, n - 70}) {
    const int32_t rows = 70;
    std::vector<float> ref(rows * row_elems);  // rows [first, first + rows) see keys up to first + rows
    cache.reference(ref.data(), q.data() + first * row_elems, 0, first + rows, rows, params.scale);
    EXPECT_LT(relative_error(slice(out, first * row_elems, rows * row_elems), ref), kBf16Tolerance)
        << "rows from " << first;
  }
}

// --- FP8 caches ---

// Every head_dim and block size at the decode lengths (one split and many), mixed GQA batches
// with padding, a window, and a graph bound far past the contexts.
TEST(PagedDecodeAttentionFp8, LengthsHeadDimsBatchesAndWindows) {
  auto gen = rng(301);
  for (int32_t head_dim : {64, 128, 256}) {
    for (int32_t block_size : {16, 32}) {
      const HeadShape shape{32, 8, head_dim, block_size, 0, true};
      for (int32_t ctx : {1, 17, 1000, 5000}) check_decode(gen, {ctx}, shape);
      check_decode(gen, kDecodeContexts, shape);
    }
  }
  check_decode(gen, {9, 0, 2999, 300, 1}, HeadShape{40, 2, 128, 16, 0, true});
  check_decode(gen, {1, 17, 999, 5000, 0}, HeadShape{28, 4, 128, 16, 100, true});
  check_decode(gen, {5, 0, 300}, HeadShape{32, 8, 128, 16, 0, true}, 32768);
}

// The FP8 cache's decode products run in f16 (attention_decode_fp8.cuh): queries far past f16's
// range (drawn with deviation 2e4, values up to about 1e5) and far below its normal range (1e-6)
// give the reference's output. Each Q row is scaled by a power of two first; unscaled, the first
// would be infinite in f16 and the second would keep few of its bits.
TEST(PagedDecodeAttentionFp8, QueriesOfAnyMagnitude) {
  auto gen = rng(303);
  for (float q_scale : {2.0e4f, 1.0e-6f}) {
    check_decode(gen, {1, 17, 300, 2000}, HeadShape{32, 8, 128, 16, 0, true}, 0, q_scale);
    check_decode(gen, {40, 1000}, HeadShape{8, 8, 64, 16, 0, true}, 0, q_scale);
    check_decode(gen, {700}, HeadShape{16, 8, 256, 32, 0, true}, 0, q_scale);
  }
}

// Cache rows of very different sizes side by side (each K and V row scaled by 2^-6 .. 2^6, so the
// factors of one 16-key tile differ up to 4,096-fold): the decode kernel applies K's factors to S
// and V's to P relative to the tile's largest, and must still match the reference (a kernel that
// took every V factor for the tile's largest would be off up to 4,096-fold in some rows).
TEST(PagedDecodeAttentionFp8, RowsOfMixedMagnitude) {
  auto gen = rng(304);
  for (int32_t head_dim : {64, 128, 256}) {
    check_decode(gen, {1, 17, 300, 2000}, HeadShape{32, 8, head_dim, 16, 0, true, 6});
    check_decode(gen, {5, 999}, HeadShape{28, 4, head_dim, 32, 100, true, 6});
  }
}

TEST(PagedPrefillAttentionFp8, RaggedBatchesHeadDimsAndWindows) {
  auto gen = rng(302);
  check_prefill(gen, kPrefillBatch, HeadShape{32, 8, 128, 16, 0, true});
  check_prefill(gen, kPrefillBatch, HeadShape{28, 4, 64, 32, 0, true});
  check_prefill(gen, kPrefillBatch, HeadShape{16, 8, 256, 16, 0, true});
  check_prefill(gen, kPrefillBatch, HeadShape{8, 2, 128, 16, 100, true});
}

// A view with some but not all of its FP8 pointers is refused before any launch.
TEST(PagedAttentionFp8, IncompleteViewsAreRefused) {
  gpu::PagedKvView view{nullptr, nullptr, nullptr, 1, 16, 8, 128};
  uint8_t* codes = reinterpret_cast<uint8_t*>(uintptr_t{256});
  view.fp8.k = codes;
  const gpu::AttentionParams params{32, 0.1f, 0};
  EXPECT_THROW(gpu::paged_decode_attention(nullptr, nullptr, view, nullptr, 1, 16, params, nullptr, 0, nullptr),
               std::exception);
  EXPECT_THROW(gpu::paged_prefill_attention(nullptr, nullptr, view, nullptr, nullptr, 1, 1, 1, params, nullptr),
               std::exception);
}

TEST(PagedAttention, EmptyBatchesLaunchNothing) {
  const gpu::PagedKvView view{nullptr, nullptr, nullptr, 1, 16, 8, 128};
  const gpu::AttentionParams params{32, 0.1f, 0};
  gpu::paged_decode_attention(nullptr, nullptr, view, nullptr, 0, 4096, params, nullptr, 0, nullptr);
  gpu::paged_prefill_attention(nullptr, nullptr, view, nullptr, nullptr, 0, 0, 0, params, nullptr);
  TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace tachyon::gpu_test
