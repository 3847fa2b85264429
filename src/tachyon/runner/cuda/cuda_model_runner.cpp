#include "tachyon/runner/cuda/cuda_model_runner.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include <nvtx3/nvtx3.hpp>

#include "tachyon/base/env_switch.h"
#include "tachyon/dist/communicator.h"
#include "tachyon/kernels/cuda/fp8.h"
#include "tachyon/kernels/cuda/gemv.h"
#include "tachyon/kernels/cuda/sampling.h"
#include "tachyon/model/gpu_support.h"
#include "tachyon/model/rope.h"
#include "tachyon/runner/draft_acceptance.h"

namespace tachyon::runner {

namespace kc = kernels::cuda;
namespace gpu = model::gpu;

namespace {

// A TP rank's embedding holds its vocab rows (the whole vocabulary without TP).
void check_vocab_rows(const model::gpu::CudaDenseWeights& weights, const CudaTpRank& tp) {
  TACHYON_CHECK(weights.complete()) << "internal: the runner's weights are not all on the device";
  const int64_t vocab_rows = tp.vocab_rows > 0 ? tp.vocab_rows : weights.config().vocab_size;
  TACHYON_CHECK(weights.embed_rows() == vocab_rows)
      << "internal: embed_tokens holds " << weights.embed_rows() << " rows, the TP rank expects " << vocab_rows;
}

// The rows of an FP8 product padded for cuBLASLt (linear_fp8()): a multiple of 16.
int64_t padded_fp8_rows(int64_t m) { return (m + 15) / 16 * 16; }

// TACHYON_FP8_FUSED_QUANTIZE=0: every FP8 product quantizes its input in a launch of its own
// (fp8_input() answers empty), to time the fused producers against it and compare their output.
bool fp8_fused_quantize_enabled() { return env_switch_on("TACHYON_FP8_FUSED_QUANTIZE"); }

// Per-channel weights' products of at least this many rows run per-row scaled (per_row_product()).
// cuBLASLt's per-row scaling is 1.27-1.39x faster than its block scaling at 1,024-2,048 rows (the
// 8B 2K prefill 39.9 -> 35.9 ms) but slower at decode counts (a 64-row step 4.75 -> 5.51 ms), both
// on the H100 (bench/results/2026-12-06-fp8-per-row-h100.json). TACHYON_FP8_PER_ROW_MIN_ROWS=N
// moves the threshold (tests run the per-row product on small prompts with it).
int64_t fp8_per_row_min_rows(int64_t default_rows) {
  const char* value = std::getenv("TACHYON_FP8_PER_ROW_MIN_ROWS");
  if (value == nullptr) return default_rows;
  char* end = nullptr;
  const long long rows = std::strtoll(value, &end, 10);
  TACHYON_CHECK(end != value && *end == '\0' && rows > 0)
      << "TACHYON_FP8_PER_ROW_MIN_ROWS: expected a positive row count, got '" << value << "'";
  return rows;
}

}  // namespace

CudaModelRunner::CudaModelRunner(const model::Bf16ModelWeights& weights, const core::EngineConfig& config,
                                 CudaTpRank tp, const model::Bf16MtpModule* mtp)
    : config_(config), tp_(tp), weights_(weights, model::rope_inv_freq(weights.config)) {
  check_vocab_rows(weights_, tp);
  check_cache_types(config, weights_.config(), tp_.comm != nullptr);
  TACHYON_CHECK(mtp == nullptr || (tp.comm == nullptr && config.speculative.method == "mtp" &&
                                   config.speculative.num_speculative_tokens >= 1))
      << "internal: an MTP module for a runner that does not draft with it";
  start(config, mtp);
}

CudaModelRunner::CudaModelRunner(const model::Fp8GpuWeights& weights, const core::EngineConfig& config,
                                 CudaTpRank tp)
    : CudaModelRunner(model::gpu::CudaDenseWeights(weights, model::rope_inv_freq(weights.bf16.config)), config, tp) {}

CudaModelRunner::CudaModelRunner(model::gpu::CudaDenseWeights weights, const core::EngineConfig& config,
                                 CudaTpRank tp)
    : config_(config), tp_(tp), weights_(std::move(weights)) {
  check_vocab_rows(weights_, tp_);
  check_cache_types(config, weights_.config(), tp_.comm != nullptr);
  if (weights_.fp8()) {  // before the KV cache takes the free memory
    fp8_scratch_ = cuda::DeviceBuffer(static_cast<size_t>(weights_.largest_fp8_projection()) * sizeof(kc::bf16));
  }
  start(config);
}

// bf16 compute; a bf16 cache, or an FP8 one where model/gpu_support.h says the GPU can hold it.
void CudaModelRunner::check_cache_types(const core::EngineConfig& config, const model::ModelConfig& model,
                                        bool tensor_parallel) {
  const DType kv = config.device.kv_cache_dtype;
  TACHYON_CHECK(config.device.dtype == DType::kBF16 && (kv == DType::kBF16 || kv == DType::kF8E4M3))
      << "the CUDA runner supports dtype BF16 and kv_cache_dtype BF16 or FP8, got " << dtype_name(config.device.dtype)
      << " and " << dtype_name(kv);
  if (kv != DType::kF8E4M3) return;
  const std::string why = model::fp8_kv_cache_gpu_unsupported(model, tensor_parallel);
  TACHYON_CHECK(why.empty()) << "--kv-cache-dtype fp8 on --device cuda: " << why;
}

void CudaModelRunner::start(const core::EngineConfig& config, const model::Bf16MtpModule* mtp) {
  fp8_fused_quantize_ = fp8_fused_quantize_enabled();
  fp8_per_row_min_rows_ = fp8_per_row_min_rows(kFp8PerRowMinRows);
  TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  for (StepEvents& e : events_) {
    TACHYON_CUDA_CHECK(cudaEventCreate(&e.begin));
    TACHYON_CUDA_CHECK(cudaEventCreate(&e.end));
  }
  graph_batch_sizes_ = cuda_graph_batch_sizes(config);
  plan_memory(config, mtp);
  tune_gemms(config);
  allocate_kv_cache(config);
  choose_gemv();
  if (!config.device.enforce_eager) capture_graphs();
}

CudaModelRunner::~CudaModelRunner() {
  for (auto& [batch, graph] : graphs_) cudaGraphExecDestroy(graph);
  for (auto& [batch, graph] : mtp_graphs_) cudaGraphExecDestroy(graph);
  for (StepEvents& e : events_) {
    if (e.begin != nullptr) cudaEventDestroy(e.begin);
    if (e.end != nullptr) cudaEventDestroy(e.end);
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

// Staging for the step's metadata, the decoder and its workspace, and the sampler's buffers.
void CudaModelRunner::plan_memory(const core::EngineConfig& config, const model::Bf16MtpModule* mtp) {
  const model::ModelConfig& c = weights_.config();
  const core::SchedulerConfig& s = config.scheduler;
  // Attention sequences: a verify step runs each of a sequence's 1 + k tokens as a decode row
  // (runner/step_inputs.h), so with speculation there are up to max_decode_rows of them.
  limits_.max_seqs = core::max_decode_rows(config);
  limits_.max_tokens = static_cast<int32_t>(std::max(s.max_num_batched_tokens, s.max_num_seqs));
  limits_.max_blocks_per_seq = static_cast<int32_t>((s.max_model_len + config.block_size - 1) / config.block_size);
  limits_.sampling_row_bytes = sizeof(kc::SamplingRow);
  // Every sampled sequence may carry k drafts, each with a logits row of its own; the rows are
  // also tokens of the step, so max_tokens bounds them too. Without speculation (k = 0) this is
  // max_seqs and nothing below grows.
  const int64_t k = std::max<int64_t>(config.speculative.num_speculative_tokens, 0);
  limits_.max_logits_rows = static_cast<int32_t>(std::min<int64_t>(limits_.max_tokens, s.max_num_seqs * (1 + k)));
  const size_t max_rows = static_cast<size_t>(limits_.max_logits_rows);
  // MTP drafting's inputs: a record per sampled sequence, then a next token per row, at fixed
  // offsets in the prefix every step copies (stage_mtp_inputs), so its graphs read them there.
  const size_t mtp_records_bytes = static_cast<size_t>(s.max_num_seqs) * sizeof(kc::MtpSequence);
  if (mtp != nullptr) limits_.runner_bytes = mtp_records_bytes + static_cast<size_t>(limits_.max_tokens) * sizeof(int32_t);
  // Prefill context parallelism: a split step's gathered positions and slots, after MTP's inputs.
  const int pcp_size = config.device.prefill_context_parallel_size;
  TACHYON_CHECK(pcp_size == 1 || (tp_.pcp_comm != nullptr && tp_.pcp_comm->size() == pcp_size && tp_.comm == nullptr &&
                                  mtp == nullptr && config.device.enforce_eager))
      << "prefill context parallelism on GPUs runs whole-model ranks (--tp 1) eagerly, without MTP: --pcp " << pcp_size;
  TACHYON_CHECK(tp_.ep_comm == nullptr || (tp_.comm == nullptr && tp_.pcp_comm == nullptr && mtp == nullptr &&
                                           config.device.enforce_eager && tp_.expert_count > 0))
      << "data-parallel attention on GPUs runs whole-model ranks (--tp 1) eagerly, without MTP, each holding a window "
         "of the experts";
  pcp_rows_ = limits_.runner_bytes;
  if (pcp_size > 1) limits_.runner_bytes += 2 * static_cast<size_t>(limits_.max_tokens) * sizeof(int32_t);
  layout_ = StepInputLayout::make(limits_);
  mtp_records_ = layout_.runner;
  mtp_next_known_ = layout_.runner + mtp_records_bytes;
  // The variable tail holds the token histories of sequences with penalties (at most every token
  // of every sequence, and its k drafts) and the ids min_tokens masks (stop_token_ids, bounded
  // at the door, + EOS); a sequence's rows share them (sampling_inputs.h).
  // After them, structured outputs' bit-packed masks: one per sequence (a constrained sequence
  // has no drafts), ceil(vocab / 32) words each (152K ids: 19 KB).
  const size_t allowed_words = (static_cast<size_t>(weights_.config().vocab_size) + 31) / 32;
  staging_bytes_ = layout_.variable + static_cast<size_t>(s.max_num_seqs) *
                                          ((static_cast<size_t>(s.max_model_len + k) + core::kMaxStopTokenIds + 1) *
                                               sizeof(int32_t) + allowed_words * sizeof(uint32_t));
  // MTP drafts come back beside the sampled rows.
  const size_t mtp_drafts_bytes = static_cast<size_t>(s.max_num_seqs) * static_cast<size_t>(k) * sizeof(int32_t);
  for (int i = 0; i < kInFlight; ++i) {
    staging_host_[i] = cuda::PinnedBuffer(staging_bytes_);
    sampled_host_[i] = cuda::PinnedBuffer(max_rows * sizeof(kc::SampledRow));
    if (mtp != nullptr) drafts_host_[i] = cuda::PinnedBuffer(mtp_drafts_bytes);
  }
  staging_device_ = cuda::DeviceBuffer(staging_bytes_);
  if (weights_.fp8()) {
    // A product of more rows than fp8_gemv serves quantizes its input rows here, padded to a
    // multiple of 16 where cuBLASLt refuses the row count (linear_fp8()).
    const int64_t k = weights_.largest_fp8_input(), rows = padded_fp8_rows(limits_.max_tokens);
    fp8_rows_ = cuda::DeviceBuffer(static_cast<size_t>(rows * k));
    fp8_row_scales_ = cuda::DeviceBuffer(static_cast<size_t>(rows * ((k + 127) / 128)) * sizeof(float));
    fp8_padded_out_ =
        cuda::DeviceBuffer(static_cast<size_t>(rows * weights_.largest_fp8_output()) * sizeof(kc::bf16));
  }

  // Decode context parallelism on GPUs splits the latent cache over the whole TP group.
  const int dcp_size = config.device.decode_context_parallel_size;
  TACHYON_CHECK(dcp_size == 1 || (tp_.comm != nullptr && tp_.comm->size() == dcp_size))
      << "decode context parallelism on GPUs splits the cache over the whole tensor-parallel group: --dcp " << dcp_size
      << " needs --tp " << dcp_size;
  const kernels::DcpLayout dcp{.size = dcp_size,
                               .rank = dcp_size > 1 ? tp_.comm->rank() : 0,
                               .interleave = config.device.dcp_kv_cache_interleave_size};
  const gpu::GpuLimits limits{.max_tokens = limits_.max_tokens,
                              .max_seqs = limits_.max_seqs,
                              .max_logits_rows = limits_.max_logits_rows,
                              .max_model_len = static_cast<int32_t>(s.max_model_len),
                              .block_size = config.block_size,
                              .block_table_stride = layout_.block_table_stride,
                              .fp8_kv_cache = config.device.kv_cache_dtype == DType::kF8E4M3,
                              .dcp = dcp,
                              .pcp_size = pcp_size};
  gpu::LinearDispatch& dispatch = *this;  // a private base: converted here, where it is accessible
  decoder_ = std::make_unique<gpu::GpuDecoder>(weights_, dispatch, limits, stream_,
                                               gpu::TpSeam{.comm = tp_.comm,
                                                           .vocab_begin = tp_.vocab_begin,
                                                           .vocab_rows = tp_.vocab_rows,
                                                           .dcp_comm = dcp_size > 1 ? tp_.comm : nullptr,
                                                           .pcp_comm = tp_.pcp_comm,
                                                           .experts = {tp_.expert_begin, tp_.expert_count},
                                                           .adds_shared_expert = tp_.adds_shared_expert,
                                                           .ep_comm = tp_.ep_comm});
  gpu::WorkspacePlan plan;
  decoder_->plan_workspace(plan);
  if (mtp != nullptr) {
    mtp_ = std::make_unique<CudaMtpDrafter>(*mtp, dispatch, limits, static_cast<int32_t>(k), stream_);
    mtp_->plan_workspace(plan);
  }
  sampler_scratch_bytes_ = kc::sampling_workspace_bytes(limits_.max_logits_rows, static_cast<int32_t>(c.vocab_size));
  plan.add(&sampler_scratch_, sampler_scratch_bytes_);
  plan.add(&sampled_, max_rows * sizeof(kc::SampledRow));
  workspace_buffer_ = cuda::DeviceBuffer(plan.bytes());
  plan.assign(workspace_buffer_.data());
}

void CudaModelRunner::allocate_kv_cache(const core::EngineConfig& config) {
  // The KV cache takes what gpu_memory_utilization leaves after weights, workspace, staging
  // and the GEMM workspace (all allocated by now), minus a margin for graphs and cuBLASLt.
  const model::ModelConfig& c = weights_.config();
  const cuda::DeviceMemoryInfo memory = cuda::device_memory_info();
  const double budget = config.device.gpu_memory_utilization * static_cast<double>(memory.total);
  const double used = static_cast<double>(memory.total - memory.free);
  const double margin = 512.0 * (1 << 20);
  // Per layer and block: each of the attention block's regions (K and V, or MLA's latents and
  // DSA's index keys), in its order.
  // Under decode context parallelism a rank caches block_size / dcp of each block's tokens.
  const std::vector<gpu::KvRegion> regions = decoder_->kv_regions();
  const size_t block_rows = static_cast<size_t>(config.block_size / config.device.decode_context_parallel_size);
  size_t layer_block_bytes = 0;
  for (const gpu::KvRegion& r : regions) layer_block_bytes += r.bytes_per_token * block_rows;
  // The MTP module's cache is one more layer of every block (its own regions).
  size_t mtp_block_bytes = 0;
  if (mtp_ != nullptr) {
    for (const gpu::KvRegion& r : mtp_->kv_regions()) mtp_block_bytes += r.bytes_per_token * static_cast<size_t>(config.block_size);
  }
  const size_t main_block_bytes = layer_block_bytes * static_cast<size_t>(c.num_hidden_layers);
  const size_t block_bytes = main_block_bytes + mtp_block_bytes;
  // A fixed size (a draft model's share, DeviceConfig::kv_cache_memory_bytes) wins over the budget.
  const double available = config.device.kv_cache_memory_bytes > 0 ? static_cast<double>(config.device.kv_cache_memory_bytes)
                                                                    : budget - used - margin;
  TACHYON_CHECK(config.device.kv_cache_memory_bytes <= 0 ||
                static_cast<double>(config.device.kv_cache_memory_bytes) <= static_cast<double>(memory.free) - margin)
      << "a KV cache of " << config.device.kv_cache_memory_bytes / (1 << 20) << " MiB does not fit the "
      << memory.free / (1 << 20) << " MiB free";
  TACHYON_CHECK(available > static_cast<double>(block_bytes) * limits_.max_blocks_per_seq)
      << "not enough GPU memory for the KV cache of one max_model_len sequence: " << memory.free / (1 << 20)
      << " MiB free of " << memory.total / (1 << 20) << " MiB after loading " << weights_.bytes() / (1 << 20)
      << " MiB of weights; raise --gpu-memory-utilization or lower --max-num-batched-tokens / --max-model-len";
  num_blocks_ = static_cast<int32_t>(std::min(available / static_cast<double>(block_bytes), 2.0e9));
  std::vector<size_t> region_bytes;
  for (const gpu::KvRegion& r : regions) {
    region_bytes.push_back(static_cast<size_t>(num_blocks_) * block_rows * r.bytes_per_token);
  }
  kv_buffer_ = cuda::DeviceBuffer(static_cast<size_t>(num_blocks_) * main_block_bytes);
  decoder_->set_kv_cache(gpu::KvCache(static_cast<std::byte*>(kv_buffer_.data()), region_bytes));
  if (mtp_ != nullptr) {
    std::vector<size_t> mtp_region_bytes;
    for (const gpu::KvRegion& r : mtp_->kv_regions()) {
      mtp_region_bytes.push_back(static_cast<size_t>(num_blocks_) * static_cast<size_t>(config.block_size) *
                                 r.bytes_per_token);
    }
    mtp_kv_buffer_ = cuda::DeviceBuffer(static_cast<size_t>(num_blocks_) * mtp_block_bytes);
    mtp_->set_kv_cache(gpu::KvCache(static_cast<std::byte*>(mtp_kv_buffer_.data()), mtp_region_bytes));
  }
  const bool bf16_cache = std::all_of(regions.begin(), regions.end(),
                                      [](const gpu::KvRegion& r) { return r.dtype == DType::kBF16; });
  if (bf16_cache && mtp_ == nullptr && tp_.comm == nullptr) {
    kv_rows_ = std::make_unique<CudaKvRowAccess>(gpu::KvCache(static_cast<std::byte*>(kv_buffer_.data()), region_bytes),
                                                 regions, c.num_hidden_layers, config.block_size, num_blocks_, stream_,
                                                 kv_buffer_.data());
  }
}

gpu::StepMetadata CudaModelRunner::step_metadata() const {
  const std::byte* staging = static_cast<const std::byte*>(staging_device_.data());
  auto field = [&](size_t offset) { return reinterpret_cast<const int32_t*>(staging + offset); };
  return {.token_ids = field(layout_.token_ids),
          .positions = field(layout_.positions),
          .slots = field(layout_.slot_mapping),
          .context_lens = field(layout_.context_lens),
          .query_starts = field(layout_.query_starts),
          .block_tables = field(layout_.block_tables),
          .logits_rows = field(layout_.logits_rows)};
}

// The step's deferred tokens first (the previous step's sampled rows are still in sampled_),
// then the decoder. Captured whole into the decode graphs.
void CudaModelRunner::forward(const gpu::ForwardShape& shape) {
  std::byte* staging = static_cast<std::byte*>(staging_device_.data());
  kc::resolve_deferred_tokens(reinterpret_cast<int32_t*>(staging + layout_.token_ids),
                              reinterpret_cast<const int32_t*>(staging + layout_.deferred),
                              reinterpret_cast<const int32_t*>(staging + layout_.num_deferred), shape.num_seqs, sampled_,
                              stream_);
  decoder_->forward({shape, step_metadata(), gathered_, {expert_rows_}});
}

void CudaModelRunner::launch_split(const core::StepPlan& local, const SplitStepRows& rows) {
  TACHYON_CHECK(tp_.pcp_comm != nullptr && static_cast<int>(rows.rank_rows.size()) == tp_.pcp_comm->size() &&
                rows.positions.size() == rows.slots.size() &&
                rows.positions.size() <= static_cast<size_t>(limits_.max_tokens))
      << "internal: a split step of " << rows.positions.size() << " rows over " << rows.rank_rows.size()
      << " ranks on a runner without that prefill-context-parallel group";
  split_rows_ = &rows;
  try {
    launch(local);
  } catch (...) {
    split_rows_ = nullptr;
    throw;
  }
  split_rows_ = nullptr;
}

void CudaModelRunner::launch_expert_group(const core::StepPlan& plan, std::span<const int32_t> rank_rows) {
  TACHYON_CHECK(tp_.ep_comm != nullptr && static_cast<int>(rank_rows.size()) == tp_.ep_comm->size() &&
                !plan.empty() && rank_rows[static_cast<size_t>(tp_.ep_comm->rank())] == forward_rows(plan))
      << "internal: an expert-group step on a runner without that group, or rows that are not this plan's";
  expert_rows_ = rank_rows;
  try {
    launch(plan);
  } catch (...) {
    expert_rows_ = {};
    throw;
  }
  expert_rows_ = {};
}

void CudaModelRunner::serve_experts(std::span<const int32_t> rank_rows) {
  TACHYON_CHECK(tp_.ep_comm != nullptr && static_cast<int>(rank_rows.size()) == tp_.ep_comm->size() &&
                rank_rows[static_cast<size_t>(tp_.ep_comm->rank())] == 0)
      << "internal: serve_experts() on a runner without an expert group, or for a rank with rows";
  decoder_->serve_experts({gpu::ForwardShape{}, gpu::StepMetadata{}, gpu::GatheredRows{}, {rank_rows}});
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

int32_t CudaModelRunner::forward_rows(const core::StepPlan& plan) const {
  const int32_t tokens = static_cast<int32_t>(plan.num_tokens());
  if (!runs_as_decode_rows(plan)) return tokens;
  auto bucket = std::lower_bound(graph_batch_sizes_.begin(), graph_batch_sizes_.end(), tokens);
  return bucket != graph_batch_sizes_.end() ? *bucket : tokens;
}

void CudaModelRunner::linear(LinearRole role, LinearShape shape, void* out, kc::GemmOutputType type, const kc::bf16* in,
                             const gpu::LinearWeight& weight, const kc::bf16* bias, int64_t m, cudaStream_t stream) {
  if (stream_local(role, shape, weight, m)) {  // our GEMV kernels
    if (weight.fp8 != nullptr) {
      kc::fp8_gemv(out, type, in, weight.fp8, weight.scale, bias, m, shape.n, shape.k, stream);
    } else {
      kc::gemv(out, type, in, weight.values, bias, m, shape.n, shape.k, stream);
    }
    return;
  }
  if (weight.fp8 != nullptr) {
    // FP8 x FP8 on the tensor cores (kernels/cuda/fp8.h says what that adds); the bf16
    // product of a dequantized copy where cuBLASLt has no block-scaled algorithm.
    if (type == kc::GemmOutputType::kBF16 && shape.n % 16 == 0 && shape.k % 16 == 0) {
      if (linear_fp8(static_cast<kc::bf16*>(out), in, weight, bias, m, shape, stream)) return;
      if (fp8_fallbacks_logged_.insert({m, shape.n, shape.k}).second) {
        const int64_t padded_m = padded_fp8_rows(m);
        const bool per_row = per_row_product(weight, m);
        std::fprintf(stderr, "tachyon: FP8 product m=%lld (padded %lld) n=%lld k=%lld runs dequantized: %s %s\n",
                     static_cast<long long>(m), static_cast<long long>(padded_m), static_cast<long long>(shape.n),
                     static_cast<long long>(shape.k),
                     gemm_.fp8_refusal(m, shape.n, shape.k, bias != nullptr, per_row).c_str(),
                     gemm_.fp8_refusal(padded_m, shape.n, shape.k, bias != nullptr, per_row).c_str());
      }
    }
    auto* scratch = static_cast<kc::bf16*>(fp8_scratch_.data());
    kc::fp8_dequantize(scratch, weight.fp8, weight.scale, shape.n, shape.k, stream);
    gemm_.linear(out, type, in, scratch, bias, m, shape.n, shape.k, stream);
    return;
  }
  gemm_.linear(out, type, in, weight.values, bias, m, shape.n, shape.k, stream);
}

// cuBLASLt has no block-scaled algorithm for some row counts (every m % 4 != 0 from 9 to 2,304 on
// the H100, bench_fp8_gemm; 281 seen on the H200; which ones depends on the GPU and the library):
// a serving step's rows are any count, and the dequantized bf16 fallback costs a full-width copy
// of the weight per product. Those run instead as a product of the rows padded with zero rows to
// a multiple of 16 (fp8_quantize_rows), into a staging buffer whose m real rows are then copied
// out: the same rounding as a product of m rows (each output row depends on its own input row
// only), at the cost of a copy of the output.
bool CudaModelRunner::linear_fp8(kc::bf16* out, const kc::bf16* in, const gpu::LinearWeight& weight,
                                 const kc::bf16* bias, int64_t m, LinearShape shape, cudaStream_t stream) {
  const int64_t rows = fp8_product_rows(weight, bias, m, shape, stream);
  if (rows == 0) return false;
  auto* codes = static_cast<uint8_t*>(fp8_rows_.data());
  auto* factors = static_cast<float*>(fp8_row_scales_.data());
  if (per_row_product(weight, m)) {  // per-token inputs
    kc::fp8_quantize_rows_per_token(codes, factors, in, m, rows, shape.k, stream);
  } else {
    kc::fp8_quantize_rows(codes, factors, in, m, rows, shape.k, stream);
  }
  run_fp8_rows(out, weight, bias, m, rows, shape, stream);
  return true;
}

int64_t CudaModelRunner::fp8_product_rows(const gpu::LinearWeight& weight, const kc::bf16* bias, int64_t m,
                                          LinearShape shape, cudaStream_t stream) {
  const auto* row_scales = static_cast<const float*>(fp8_row_scales_.data());
  const bool per_row = per_row_product(weight, m);
  const float* weight_scales = per_row ? weight.scale_by_row : weight.scale_by_block;
  for (const int64_t rows : {m, padded_fp8_rows(m)}) {
    if (gemm_.fp8_serves(rows, shape.n, shape.k, bias != nullptr, row_scales, weight_scales, stream, per_row)) {
      return rows;
    }
  }
  return 0;
}

void CudaModelRunner::run_fp8_rows(kc::bf16* out, const gpu::LinearWeight& weight, const kc::bf16* bias, int64_t m,
                                   int64_t rows, LinearShape shape, cudaStream_t stream) {
  kc::bf16* to = rows == m ? out : static_cast<kc::bf16*>(fp8_padded_out_.data());
  const auto* codes = static_cast<const uint8_t*>(fp8_rows_.data());
  const auto* factors = static_cast<const float*>(fp8_row_scales_.data());
  const bool per_row = per_row_product(weight, m);
  per_row_fp8_products_ += per_row ? 1 : 0;
  const bool ran = per_row
                       ? gemm_.linear_fp8_per_row(to, codes, factors, weight.fp8, weight.scale_by_row, bias, rows,
                                                  shape.n, shape.k, stream)
                       : gemm_.linear_fp8(to, codes, factors, weight.fp8, weight.scale_by_block, bias, rows, shape.n,
                                          shape.k, stream);
  TACHYON_CHECK(ran) << "internal: cuBLASLt refused an FP8 product of " << rows << " rows it had served";
  if (rows == m) return;
  TACHYON_CUDA_CHECK(cudaMemcpyAsync(out, to, static_cast<size_t>(m * shape.n) * sizeof(kc::bf16),
                                     cudaMemcpyDeviceToDevice, stream));
}

// A producer writes the rows itself only where they are exactly what linear() would quantize:
// an E4M3 product (not the GEMV, which reads bf16; not the dequantized fallback), k a multiple of
// 128 (the producers' 16-lane blocks), and rows that fit the staging buffers; per token where the
// product runs per-row scaled (per_row_product(): it reads that form).
kc::Fp8Rows CudaModelRunner::fp8_input(LinearRole role, LinearShape shape, const gpu::LinearWeight& weight,
                                       const kc::bf16* bias, int64_t m) {
  if (!fp8_fused_quantize_ || weight.fp8 == nullptr || m <= 0 || m > limits_.max_tokens ||
      stream_local(role, shape, weight, m) || shape.n % 16 != 0 || shape.k % 128 != 0 ||
      shape.k > weights_.largest_fp8_input()) {
    return {};
  }
  const int64_t rows = fp8_product_rows(weight, bias, m, shape, stream_);
  if (rows == 0) return {};
  return {.values = static_cast<uint8_t*>(fp8_rows_.data()),
          .scale = static_cast<float*>(fp8_row_scales_.data()),
          .padded_rows = rows,
          .per_token = per_row_product(weight, m)};
}

void CudaModelRunner::linear_quantized(LinearShape shape, kc::bf16* out,
                                       const gpu::LinearWeight& weight, const kc::bf16* bias, int64_t m,
                                       const kc::Fp8Rows& rows, cudaStream_t stream) {
  TACHYON_CHECK(!rows.empty() && rows.values == fp8_rows_.data())
      << "internal: linear_quantized() of rows fp8_input() did not answer";
  run_fp8_rows(out, weight, bias, m, rows.padded_rows, shape, stream);
  ++fused_fp8_products_;
}

// Whether linear() runs our GEMV kernels (linear() asks this first): they are stateless, while
// cuBLASLt's workspace and the FP8 staging buffers are the runner's, one stream at a time.
bool CudaModelRunner::stream_local(LinearRole role, LinearShape shape, const gpu::LinearWeight& weight,
                                   int64_t m) const {
  if (weight.fp8 != nullptr) return kc::fp8_gemv_supports(m, shape.n, shape.k);
  return use_gemv(role, m);
}

void CudaModelRunner::gemm(void* out, kc::GemmOutputType type, const kc::bf16* in, const kc::bf16* weight,
                           const kc::bf16* bias, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  gemm_.linear(out, type, in, weight, bias, m, n, k, stream);
}

std::vector<float> CudaModelRunner::last_logits(int32_t rows) const {
  std::vector<float> logits(static_cast<size_t>(rows) * static_cast<size_t>(weights_.config().vocab_size));
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  TACHYON_CUDA_CHECK(cudaMemcpy(logits.data(), decoder_->workspace().logits, logits.size() * sizeof(float),
                                cudaMemcpyDeviceToHost));
  return logits;
}

void CudaModelRunner::capture_graphs() {
  // One graph per decode bucket, captured with the bucket's batch and the model's maximum
  // context (which fixes the decode kernel's split count), replayed for any decode step whose
  // batch fits: the padding rows compute on token 0 and write nothing (slot -1, context 0).
  // With MTP, the drafting after the sampler is a second graph of the bucket (the sampler between
  // them runs eagerly): every record padding here; a step's records and next tokens are read
  // from the runner region of staging, and its acceptance rule is the run's.
  // Each is run eagerly first: cuBLASLt loads its kernels outside the capture.
  auto capture = [&](const std::function<void()>& work) {
    work();
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaGraph_t graph = nullptr;
    TACHYON_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    work();
    TACHYON_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    TACHYON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    TACHYON_CUDA_CHECK(cudaGraphDestroy(graph));
    return exec;
  };
  const int32_t max_context = static_cast<int32_t>(config_.scheduler.max_model_len);
  auto* staging = static_cast<std::byte*>(staging_host_[0].data());
  for (int32_t batch : graph_batch_sizes_) {
    const StepInputSummary summary = fill_step_inputs(core::StepPlan{}, layout_, limits_, staging, batch);
    if (mtp_ != nullptr) stage_mtp_inputs(core::StepPlan{}, summary, staging, mtp_padded_sequences(batch));
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(staging_device_.data(), staging, summary.bytes_used, cudaMemcpyHostToDevice,
                                       stream_));
    const gpu::ForwardShape shape{batch, batch, batch, 1, max_context, batch};
    graphs_[batch] = capture([&] { forward(shape); });
    if (mtp_ != nullptr) {
      const MtpDraftInputs inputs = mtp_draft_inputs(shape, mtp_padded_sequences(batch));
      mtp_graphs_[batch] = capture([&] { mtp_->draft(inputs); });
    }
  }
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

int32_t CudaModelRunner::mtp_padded_sequences(int32_t padded) const {
  return std::min(padded, static_cast<int32_t>(config_.scheduler.max_num_seqs));
}

MtpDraftInputs CudaModelRunner::mtp_draft_inputs(const gpu::ForwardShape& shape, int32_t num_sequences) const {
  const std::byte* device_staging = static_cast<const std::byte*>(staging_device_.data());
  return {.step = {shape, step_metadata()},
          .hidden = decoder_->workspace().residual,
          .sampled = sampled_,
          .sequences = reinterpret_cast<const kc::MtpSequence*>(device_staging + mtp_records_),
          .next_known = reinterpret_cast<const int32_t*>(device_staging + mtp_next_known_),
          .num_sequences = num_sequences,
          .forced_acceptance = config_.speculative.forced_acceptance};
}

void CudaModelRunner::launch(const core::StepPlan& plan) {
  TACHYON_CHECK(pending_.size() < kInFlight) << "internal: launch() with two steps in flight; call wait() first";
  // A deferred token names the previous step's sampled row of its sequence, counting one row per
  // sequence; with drafts a sequence has 1 + k rows, so the two never meet (the engine schedules
  // synchronously when it drafts).
  TACHYON_CHECK(!plan.return_hidden_states)
      << "the CUDA runner does not return hidden states: MTP drafting runs on the CPU runner only for now";
  const bool drafts = plan.has_drafts();
  TACHYON_CHECK(plan.deferred_tokens.empty() || (!drafts && !last_launch_had_drafts_))
      << "internal: a plan with deferred tokens " << (drafts ? "carries draft tokens" : "follows a step with drafts")
      << "; deferred tokens index one sampled row per sequence";
  PendingStep step;
  for (const core::ScheduledSequence& s : plan.sequences) {
    if (s.sample) step.sequences.push_back({s.sequence_id, s.draft_tokens, s.seed, s.num_output_tokens});
  }
  step.forced_acceptance = plan.forced_acceptance;
  step.ran = !plan.empty();
  if (plan.empty()) {
    pending_.push_back(std::move(step));
    return;
  }
  last_launch_had_drafts_ = drafts;
  // A named range per step, so a profiler (ncu --nvtx-include "tachyon_step/") sees only steps.
  nvtx3::scoped_range range("tachyon_step");
  // This step's host buffers were last used by the step two launches back, which wait() has
  // synced on (at most kInFlight are in flight): its upload and download are done.
  step.index = steps_launched_++;
  std::byte* staging = static_cast<std::byte*>(staging_host_[step.index % kInFlight].data());
  const StepEvents& events = events_[step.index % 3];
  // A decode step, or a verify step (its rows laid out as decodes: step_inputs.h), is padded to
  // its bucket of rows and replays that bucket's graph. With --enforce-eager it is padded the
  // same way and runs eagerly, so graphs and eager run the same kernels on the same shapes and
  // give the same tokens. The rest (prefill and mixed steps) run eagerly as planned.
  cudaGraphExec_t graph = nullptr;
  int32_t padded = 0;
  if (runs_as_decode_rows(plan)) {
    auto bucket = std::lower_bound(graph_batch_sizes_.begin(), graph_batch_sizes_.end(),
                                   static_cast<int32_t>(plan.num_tokens()));
    if (bucket != graph_batch_sizes_.end()) {
      padded = *bucket;
      auto captured = graphs_.find(padded);
      if (captured != graphs_.end()) graph = captured->second;
    }
  }
  const StepInputSummary summary = fill_step_inputs(plan, layout_, limits_, staging, padded);
  gathered_ = {};
  if (split_rows_ != nullptr) {  // every row of the split step, where its forward stores them from
    const size_t n = split_rows_->positions.size();
    auto* positions = reinterpret_cast<int32_t*>(staging + layout_.runner + pcp_rows_);
    auto* slots = positions + limits_.max_tokens;
    for (size_t i = 0; i < n; ++i) {
      positions[i] = static_cast<int32_t>(split_rows_->positions[i]);
      slots[i] = static_cast<int32_t>(split_rows_->slots[i]);
    }
    const auto* device = reinterpret_cast<const int32_t*>(static_cast<std::byte*>(staging_device_.data()) +
                                                          layout_.runner + pcp_rows_);
    gathered_ = {.positions = device,
                 .slots = device + limits_.max_tokens,
                 .num_rows = static_cast<int32_t>(n),
                 .rank_rows = split_rows_->rank_rows};
    graph = nullptr;  // the captured graphs hold no gather (and PCP runs eagerly)
  }
  if (!expert_rows_.empty()) graph = nullptr;  // the MoE layers' rows depend on the other ranks' steps

  // Sampling rows at their fixed offset; token histories (penalties only) in the variable tail.
  step.sampling = build_sampling_inputs(plan);
  const SamplingInputs& sampling = step.sampling;
  TACHYON_CHECK(static_cast<int32_t>(sampling.rows.size()) == summary.num_sampled)
      << "internal: " << sampling.rows.size() << " sampling rows (1 + drafts per sampled sequence) for the plan's "
      << summary.num_sampled << " logits rows";
  std::copy(sampling.rows.begin(), sampling.rows.end(), reinterpret_cast<kc::SamplingRow*>(staging + layout_.sampling_rows));
  size_t upload = summary.bytes_used;
  if (!sampling.tokens.empty()) {
    const size_t token_bytes = sampling.tokens.size() * sizeof(int32_t);
    TACHYON_CHECK(layout_.variable + token_bytes <= staging_bytes_) << "internal: sampling histories overflow staging";
    std::copy(sampling.tokens.begin(), sampling.tokens.end(), reinterpret_cast<int32_t*>(staging + layout_.variable));
    upload = layout_.variable + token_bytes;
  }
  // Structured outputs' masks join the same upload, after the histories (4-byte aligned there).
  // Masks that follow the launch go to the same place when they arrive (supply_token_masks).
  size_t allowed_offset = 0;
  if (sampling.late_masks > 0) {
    TACHYON_CHECK(mtp_ == nullptr) << "internal: token masks that follow the launch with MTP drafting";
    allowed_offset = layout_.variable + sampling.tokens.size() * sizeof(int32_t);
    TACHYON_CHECK(allowed_offset + static_cast<size_t>(sampling.late_masks) * allowed_words() * sizeof(uint32_t) <=
                  staging_bytes_)
        << "internal: token masks overflow staging";
  } else if (!sampling.allowed.empty()) {
    TACHYON_CHECK(static_cast<size_t>(sampling.allowed_words) == allowed_words())
        << "structured outputs: the token masks cover " << sampling.allowed_words * 32
        << " ids but this model's logits have " << weights_.config().vocab_size
        << " (the tokenizer and the model disagree on the vocabulary size)";
    allowed_offset = layout_.variable + sampling.tokens.size() * sizeof(int32_t);
    const size_t allowed_bytes = sampling.allowed.size() * sizeof(uint32_t);
    TACHYON_CHECK(allowed_offset + allowed_bytes <= staging_bytes_) << "internal: token masks overflow staging";
    std::copy(sampling.allowed.begin(), sampling.allowed.end(), reinterpret_cast<uint32_t*>(staging + allowed_offset));
    upload = allowed_offset + allowed_bytes;
  }
  // MTP drafting's inputs sit in the prefix's runner region. A padded step drafts for its
  // bucket's fixed count of sequences (padding records after the real ones), as its graph does.
  const int32_t num_sampled_sequences = static_cast<int32_t>(step.sequences.size());
  const int32_t mtp_sequences = padded > 0 ? mtp_padded_sequences(padded) : num_sampled_sequences;
  if (mtp_ != nullptr) {
    TACHYON_CHECK(plan.forced_acceptance == config_.speculative.forced_acceptance)
        << "internal: a plan's forced acceptance " << plan.forced_acceptance << " differs from the run's "
        << config_.speculative.forced_acceptance << " (MTP drafting's graphs hold the run's)";
    stage_mtp_inputs(plan, summary, staging, mtp_sequences);
  }
  TACHYON_CUDA_CHECK(cudaEventRecord(events.begin, stream_));
  TACHYON_CUDA_CHECK(cudaMemcpyAsync(staging_device_.data(), staging, upload, cudaMemcpyHostToDevice, stream_));

  // The shape of an eager forward and of eager MTP drafting. A padded decode step
  // (--enforce-eager, or a bucket without a graph) runs with the context bound its graph is
  // captured with: that bound sets the decode kernels' KV split count, and a different count sums
  // in a different order (seen as graph/eager token differences).
  gpu::ForwardShape shape{summary.num_tokens,    summary.num_seqs,        summary.num_logits_rows,
                          summary.max_query_len, summary.max_context_len, summary.num_decode_seqs,
                          summary.prefill_context_tokens};
  if (padded > 0) shape.max_context_len = static_cast<int32_t>(config_.scheduler.max_model_len);
  if (graph != nullptr) {
    TACHYON_CUDA_CHECK(cudaGraphLaunch(graph, stream_));
    ++graph_replays_;
  } else {
    forward(shape);
    gathered_ = {};
  }

  step.num_sampled = summary.num_sampled;
  step.allowed_offset = allowed_offset;
  if (sampling.late_masks > 0) {  // the forward runs; supply_token_masks() samples
    step.awaits_masks = true;
    pending_.push_back(std::move(step));
    return;
  }
  enqueue_sampling(step);
  if (mtp_ != nullptr) {
    // The module drafts on the device from what the step just computed (cuda_mtp_drafter.h); a
    // step that samples nothing (prompt chunks) still runs it over its rows, for its cache. A
    // decode or verify step replays its bucket's drafting graph when the step's did.
    auto drafting = graph != nullptr ? mtp_graphs_.find(padded) : mtp_graphs_.end();
    if (drafting != mtp_graphs_.end()) {
      TACHYON_CUDA_CHECK(cudaGraphLaunch(drafting->second, stream_));
      ++mtp_graph_replays_;
    } else {
      mtp_->draft(mtp_draft_inputs(shape, mtp_sequences));
    }
    if (num_sampled_sequences > 0) {
      TACHYON_CUDA_CHECK(cudaMemcpyAsync(drafts_host_[step.index % kInFlight].data(), mtp_->drafts(),
                                         static_cast<size_t>(num_sampled_sequences) *
                                             static_cast<size_t>(mtp_->num_drafts()) * sizeof(int32_t),
                                         cudaMemcpyDeviceToHost, stream_));
      step.drafted = true;
    }
  }
  TACHYON_CUDA_CHECK(cudaEventRecord(events.end, stream_));
  pending_.push_back(std::move(step));
}

// The step's sampler over its logits rows (with its masks where it has some), then the download
// of the sampled rows.
void CudaModelRunner::enqueue_sampling(const PendingStep& step) {
  std::byte* device_staging = static_cast<std::byte*>(staging_device_.data());
  kc::sample(sampled_, decoder_->workspace().logits, reinterpret_cast<const kc::SamplingRow*>(device_staging + layout_.sampling_rows),
             reinterpret_cast<const int32_t*>(device_staging + layout_.variable), step.num_sampled,
             static_cast<int32_t>(weights_.config().vocab_size), sampler_scratch_, sampler_scratch_bytes_, stream_,
             step.allowed_offset > 0 ? reinterpret_cast<const uint32_t*>(device_staging + step.allowed_offset) : nullptr);
  const size_t sampled_bytes = static_cast<size_t>(step.num_sampled) * sizeof(kc::SampledRow);
  TACHYON_CUDA_CHECK(cudaMemcpyAsync(sampled_host_[step.index % kInFlight].data(), sampled_, sampled_bytes,
                                     cudaMemcpyDeviceToHost, stream_));
}

// The masks go to the step's staging after the histories, where launch() left room, in a copy of
// their own behind the step's forward on the stream; the sampler follows. The host buffer is the
// step's (kInFlight): launch() uploaded only the bytes before that place, and the buffer's next
// user is launched after wait() on this step.
void CudaModelRunner::supply_token_masks(std::span<const core::AllowedTokens> masks) {
  TACHYON_CHECK(!pending_.empty() && pending_.back().awaits_masks)
      << "internal: supply_token_masks() without a launched step whose masks follow";
  PendingStep& step = pending_.back();
  TACHYON_CHECK(static_cast<int32_t>(masks.size()) == step.sampling.late_masks)
      << "internal: " << masks.size() << " token masks for " << step.sampling.late_masks << " sequences whose mask follows";
  const size_t words = allowed_words();
  auto* host = reinterpret_cast<uint32_t*>(static_cast<std::byte*>(staging_host_[step.index % kInFlight].data()) +
                                           step.allowed_offset);
  for (size_t i = 0; i < masks.size(); ++i) {
    uint32_t* row = host + i * words;
    if (masks[i] == nullptr) {  // no constraint left (the sequence finished or failed its grammar)
      std::fill(row, row + words, ~0u);
      continue;
    }
    TACHYON_CHECK(masks[i]->size() == words)
        << "structured outputs: a token mask covers " << masks[i]->size() * 32 << " ids but this model's logits have "
        << weights_.config().vocab_size << " (the tokenizer and the model disagree on the vocabulary size)";
    std::copy(masks[i]->begin(), masks[i]->end(), row);
  }
  std::byte* device_staging = static_cast<std::byte*>(staging_device_.data());
  TACHYON_CUDA_CHECK(cudaMemcpyAsync(device_staging + step.allowed_offset, host, masks.size() * words * sizeof(uint32_t),
                                     cudaMemcpyHostToDevice, stream_));
  enqueue_sampling(step);
  TACHYON_CUDA_CHECK(cudaEventRecord(events_[step.index % 3].end, stream_));
  step.awaits_masks = false;
}

size_t CudaModelRunner::allowed_words() const {
  return static_cast<size_t>((weights_.config().vocab_size + 31) / 32);
}

core::StepOutput CudaModelRunner::wait() {
  TACHYON_CHECK(!pending_.empty()) << "internal: wait() without a launched step";
  TACHYON_CHECK(!pending_.front().awaits_masks)
      << "internal: wait() on a step whose token masks were never supplied (supply_token_masks)";
  PendingStep step = std::move(pending_.front());
  pending_.pop_front();
  core::StepOutput output;
  if (!step.ran) return output;
  // This step's host buffers are reused by the launch after next, which comes after this sync.
  const StepEvents& events = events_[step.index % 3];
  TACHYON_CUDA_CHECK(cudaEventSynchronize(events.end));
  float device_ms = 0.0f;
  TACHYON_CUDA_CHECK(cudaEventElapsedTime(&device_ms, events.begin, events.end));
  last_step_device_ms_ = device_ms;
  // The device's idle gap since the previous step ended (both events are done: stream order).
  last_step_idle_ms_ = 0.0;
  if (last_waited_ >= 0 && last_waited_ == step.index - 1) {
    float idle_ms = 0.0f;
    TACHYON_CUDA_CHECK(cudaEventElapsedTime(&idle_ms, events_[(step.index - 1) % 3].end, events.begin));
    last_step_idle_ms_ = idle_ms;
  }
  last_waited_ = step.index;

  // Each sequence's rows in order: row i was drawn after drafts 0..i-1 (sampling_inputs.h), so
  // it stands as long as they were all accepted. Row i's token is kept; if it accepts draft i
  // (accepts_draft: equal, or the keyed forced draw) the draft is the emitted token and row
  // i + 1 is read, else the list ends with it. Rows after the first rejection are never read,
  // as the CPU reference never samples them (runner/plan_sampling.h).
  const auto* rows = sampled_host_[step.index % kInFlight].as<kc::SampledRow>();
  const auto* drafts = step.drafted ? drafts_host_[step.index % kInFlight].as<int32_t>() : nullptr;
  output.sequences.reserve(step.sequences.size());
  size_t first_row = 0;
  for (const PendingSequence& s : step.sequences) {
    core::SequenceOutput out;
    out.sequence_id = s.sequence_id;
    out.num_draft_tokens = static_cast<int64_t>(s.drafts.size());
    for (size_t i = 0; i <= s.drafts.size(); ++i) {
      const size_t r = first_row + i;
      TACHYON_CHECK(rows[r].token >= 0) << "the model produced no finite logit for a sequence (NaN or -inf everywhere)";
      out.tokens.push_back(to_sampled_token(rows[r], step.sampling.rows[r]));
      if (i == s.drafts.size()) break;
      const uint64_t row_step = static_cast<uint64_t>(s.num_output_tokens) + i;
      if (!accepts_draft(out.tokens.back().token, s.drafts[i], s.seed, row_step, step.forced_acceptance)) break;
      out.tokens.back().token = s.drafts[i];  // a forced acceptance keeps the draft (exact: already equal)
    }
    first_row += 1 + s.drafts.size();
    if (drafts != nullptr) {
      const int32_t* own = drafts + output.sequences.size() * static_cast<size_t>(mtp_->num_drafts());
      for (int32_t j = 0; j < mtp_->num_drafts() && own[j] >= 0; ++j) out.next_drafts.push_back(own[j]);
    }
    output.sequences.push_back(std::move(out));
  }
  TACHYON_CHECK(first_row == step.sampling.rows.size())
      << "internal: " << first_row << " rows walked of the step's " << step.sampling.rows.size();
  return output;
}

// next_known[t] for every row of the step (padding: token 0): the token after row t where the
// plan knows it (the next token of its slice, or the next prompt token after a chunk), else
// -(r + 1) for the sampled row r whose emitted token it is (the last known token's row and each
// draft's). Then one record per sampled sequence, in plan order, and padding records up to
// num_records.
void CudaModelRunner::stage_mtp_inputs(const core::StepPlan& plan, const StepInputSummary& summary,
                                       std::byte* staging, int32_t num_records) {
  auto* next_known = reinterpret_cast<int32_t*>(staging + mtp_next_known_);
  auto* sequences = reinterpret_cast<kc::MtpSequence*>(staging + mtp_records_);
  TACHYON_CHECK(summary.num_tokens <= limits_.max_tokens && num_records <= config_.scheduler.max_num_seqs)
      << "internal: MTP inputs for " << summary.num_tokens << " rows and " << num_records << " sequences";
  std::fill(next_known, next_known + summary.num_tokens, 0);
  const bool rows_as_decodes = runs_as_decode_rows(plan);
  const int64_t block_size = plan.block_size > 0 ? plan.block_size : config_.block_size;
  int32_t first_row = 0, num_sequences = 0;
  for (size_t a = 0; a < plan.sequences.size(); ++a) {
    const core::ScheduledSequence& seq = plan.sequences[a];
    const int64_t k = seq.num_draft_tokens();
    const int64_t first_emitting = seq.sample ? seq.num_tokens - 1 - k : seq.num_tokens;
    for (int64_t i = 0; i < seq.num_tokens; ++i) {
      const int64_t t = seq.first_token + i;
      if (i >= first_emitting) {
        next_known[t] = -(first_row + static_cast<int32_t>(i - first_emitting) + 1);
      } else if (i + 1 < seq.num_tokens) {
        next_known[t] = plan.token_ids[static_cast<size_t>(t + 1)];
      } else {
        next_known[t] = std::max(seq.next_token, 0);  // unknown (never for a prompt chunk): a stand-in
      }
    }
    if (!seq.sample) continue;
    // The attention sequence whose block-table row holds all of its blocks: its last decode row,
    // or itself in a prefill-shaped step.
    const int64_t spanned = rows_as_decodes ? (seq.num_computed + seq.num_tokens + block_size - 1) / block_size
                                            : static_cast<int64_t>(seq.block_table.size());
    sequences[num_sequences++] = {.first_row = first_row,
                                  .num_drafts = static_cast<int32_t>(k),
                                  .table_seq = static_cast<int32_t>(rows_as_decodes ? seq.first_token + seq.num_tokens - 1
                                                                                    : static_cast<int64_t>(a)),
                                  .capacity = static_cast<int32_t>(spanned * block_size),
                                  .seed = seq.seed,
                                  .num_output_tokens = seq.num_output_tokens};
    first_row += static_cast<int32_t>(1 + k);
  }
  TACHYON_CHECK(num_sequences <= num_records) << "internal: " << num_sequences << " MTP records for " << num_records;
  for (int32_t s = num_sequences; s < num_records; ++s) sequences[s] = {.first_row = -1};
}

}  // namespace tachyon::runner
