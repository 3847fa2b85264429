#include "tachyon/app/runner_factory.h"

#include <cstdio>

#include <xxhash.h>

#include "tachyon/app/mtp_modules.h"
#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"
#include "tachyon/engine/draft_model_drafter.h"
#include "tachyon/engine/drafter.h"
#include "tachyon/engine/mtp_drafter.h"
#include "tachyon/engine/runner_drafter.h"
#include "tachyon/engine/runner_fault.h"
#include "tachyon/model/mtp.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/fp8_projections.h"
#include "tachyon/model/fp8_served_experts.h"
#include "tachyon/model/fp8_tp_shard.h"
#include "tachyon/model/gpu_support.h"
#include "tachyon/model/online_fp8.h"
#include "tachyon/model/tp_shard_loader.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/runner/dp_cpu_model_runner.h"
#include "tachyon/runner/dcp_checks.h"
#include "tachyon/runner/pcp_checks.h"
#include "tachyon/runner/pcp_cpu_model_runner.h"
#include "tachyon/runner/tbo_checks.h"
#include "tachyon/runner/tp_cpu_model_runner.h"
#ifdef TACHYON_HAVE_CUDA
#include "tachyon/model/gpu/stream_gpu_weights.h"
#include "tachyon/runner/cuda/cuda_model_runner.h"
#include "tachyon/runner/cuda/tp_cuda_model_runner.h"
#include "tachyon/tensor/cuda/device_buffer.h"
#endif

namespace tachyon::app {

std::string model_identity(const std::filesystem::path& model_dir, const model::ModelConfig& config) {
  const std::string text = read_file(model_dir / "config.json");
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(XXH3_64bits(text.data(), text.size())));
  return config.architecture + ":" + hex;
}

std::string cuda_unsupported_reason(const model::ModelConfig& config) { return model::gpu_decoder_unsupported(config); }

namespace {

// Speculative decoding with the tensor-parallel CUDA runner, checked before any weight loads: it
// verifies drafts on one node (over several, EngineCore would refuse the drafter after the load),
// and n-gram drafts and a draft model's (the whole draft model on the first rank's GPU, beside
// the group, with dense ranks) are what tests run through it (tests/gpu/test_cuda_speculative.cpp,
// ranks sharing a GPU). The MTP modules read the served model's hidden states, which the ranks do
// not return.
void check_drafts_verified(const core::EngineConfig& config) {
  if (!config.speculative.enabled()) return;
  const std::string& method = config.speculative.method;
  TACHYON_CHECK(method == "ngram" || method == "draft")
      << "--speculative-method " << method
      << " on --device cuda with --tp > 1 is not verified by any test yet (n-gram and draft-model drafts are; or "
         "--tp 1, or --device cpu)";
  TACHYON_CHECK(method != "draft" || !config.device.enable_expert_parallel)
      << "--speculative-method draft with --enable-expert-parallel on GPUs is not verified by any test yet (CPU "
         "thread ranks are: --device cpu)";
  TACHYON_CHECK(config.device.nnodes == 1)
      << "--speculative-method " << method << " with --nnodes > 1: drafts do not travel to the other nodes' ranks "
         "yet; serve from one node";
}

engine::DraftModelOptions draft_options(const core::EngineConfig& config, int32_t num_blocks) {
  return {.num_tokens = config.speculative.num_speculative_tokens,
          .num_blocks = num_blocks,
          .block_size = config.block_size,
          .max_model_len = config.scheduler.max_model_len,
          .max_num_batched_tokens = config.scheduler.max_num_batched_tokens,
          .max_num_seqs = config.scheduler.max_num_seqs};
}

model::ModelConfig draft_model_config(const core::EngineConfig& config, const model::ModelConfig& target) {
  const std::filesystem::path dir = config.speculative.draft_model;
  const model::ModelConfig draft = model::ModelConfig::from_dir(dir);
  TACHYON_CHECK(draft.vocab_size == target.vocab_size)
      << "--draft-model " << dir.string() << " has a vocabulary of " << draft.vocab_size << " tokens, the served model "
      << target.vocab_size << ": a draft model must share the served model's tokenizer";
  return draft;
}

// The draft model of --speculative-method draft on the CPU, beside the CPU runner: its own paged
// cache of the target's capacity in tokens, so every sequence the target holds fits.
std::unique_ptr<engine::Drafter> load_cpu_draft_model(const core::EngineConfig& config, const model::ModelConfig& target) {
  const model::ModelConfig draft = draft_model_config(config, target);
  model::SafetensorsCheckpoint checkpoint(config.speculative.draft_model);
  auto model = std::make_unique<model::DenseModel>(
      model::load_weights(draft, checkpoint, model::Bf16MatrixHolding::kKeepBf16));
  auto runner = std::make_unique<runner::CpuModelRunner>(std::move(model), config.num_blocks, config.block_size);
  return std::make_unique<engine::DraftModelDrafter>(std::move(runner), draft_options(config, config.num_blocks),
                                                     target.vocab_size);
}

// The MTP drafter of --speculative-method mtp on the CPU: the checkpoint's modules, fed the hidden
// states the CPU runner (or its tensor-parallel ranks) returns.
std::unique_ptr<engine::Drafter> load_cpu_mtp_drafter(const core::EngineConfig& config,
                                                      const std::filesystem::path& model_dir) {
  return std::make_unique<engine::MtpDrafter>(cpu_mtp_modules(model::load_mtp_modules(model_dir)),
                                              config.speculative.num_speculative_tokens);
}

#ifdef TACHYON_HAVE_CUDA
// The draft model on the GPU, loaded before the served model: its KV cache takes a fixed share
// of the GPU (kDraftKvShare of its memory), so the served model's cache is sized from what is
// left. A full draft cache only costs drafts (draft_model_drafter.h), never the served model.
std::unique_ptr<engine::Drafter> load_cuda_draft_model(const core::EngineConfig& config, const model::ModelConfig& target) {
  constexpr double kDraftKvShare = 0.08;
  const model::ModelConfig draft = draft_model_config(config, target);
  const std::string why = cuda_unsupported_reason(draft);
  TACHYON_CHECK(why.empty()) << "--draft-model " << config.speculative.draft_model << " cannot run on the GPU: " << why;
  core::EngineConfig draft_config = config;
  draft_config.speculative = {};  // the draft runner verifies nothing ...
  // ... so its graphs are the decode buckets (the target's verify buckets exceed its rows).
  std::erase_if(draft_config.device.cuda_graph_batch_sizes,
                [&](int32_t rows) { return rows > core::max_decode_rows(draft_config); });
  const cuda::DeviceMemoryInfo memory = cuda::device_memory_info();
  draft_config.device.kv_cache_memory_bytes = static_cast<int64_t>(kDraftKvShare * static_cast<double>(memory.total));
  draft_config.device.model_identity = model_identity(config.speculative.draft_model, draft);
  model::SafetensorsCheckpoint checkpoint(config.speculative.draft_model);
  auto runner = std::make_unique<runner::CudaModelRunner>(model::load_weights_bf16(draft, checkpoint), draft_config);
  const int32_t num_blocks = runner->num_blocks();
  return std::make_unique<engine::DraftModelDrafter>(std::move(runner), draft_options(config, num_blocks),
                                                     target.vocab_size);
}
#endif

// The f32 weights of the CPU runners, quantized online when --quantization asks. `holding`: the
// single-rank runner keeps a bf16 checkpoint's matrices in bf16 (model_weights.h); the parallel
// runners shard or split the f32 fields, and online FP8 quantizes them, so those widen.
model::ModelWeights load_cpu_weights(const std::filesystem::path& model_dir, const model::ModelConfig& config,
                                     const core::EngineConfig& engine,
                                     model::Bf16MatrixHolding holding = model::Bf16MatrixHolding::kWidenToF32) {
  model::SafetensorsCheckpoint checkpoint(model_dir);
  const bool online_fp8 = engine.device.quantization == "fp8";
  model::ModelWeights weights =
      model::load_weights(config, checkpoint, online_fp8 ? model::Bf16MatrixHolding::kWidenToF32 : holding);
  if (online_fp8) model::quantize_weights_fp8(weights);
  return weights;
}

// An FP8 run: an FP8 checkpoint, or --quantization fp8.
bool fp8_run(const core::EngineConfig& config, const model::ModelConfig& model_config) {
  return config.device.quantization == "fp8" || model_config.quantization.quantized();
}

// FP8 weights on GPUs: one GPU (model/fp8_projections.h, tests/gpu/test_cuda_fp8.cpp), or the
// tensor-parallel ranks of one node, each holding its cut of the FP8 form (model/fp8_tp_shard.h;
// tests/gpu/test_tp_cuda_runner.cpp SharedGpuFp8TpRunner against the single-GPU FP8 runner).
// Over several nodes no test has run FP8 shards, nor drafts verified by FP8 ranks: refused before
// loading.
void check_quantization_device(const core::EngineConfig& config, const model::ModelConfig& model_config,
                               const std::string& kind) {
  model::check_quantization_method(config.device.quantization);
  if (kind != "cuda" || !fp8_run(config, model_config)) return;
  const std::string weights =
      config.device.quantization == "fp8" ? "--quantization fp8" : "an FP8 checkpoint";
  TACHYON_CHECK(config.device.nnodes == 1)
      << "FP8 weights (" << weights << ") with --nnodes > 1 are not verified by any test yet; use one node (--tp up "
      << "to its GPUs) or bf16 weights";
  TACHYON_CHECK(config.device.tensor_parallel_size == 1 || !config.speculative.enabled())
      << "FP8 weights (" << weights << ") with --tp > 1 and --speculative-method on GPUs are not verified by any test "
      << "yet (each works without the other); use --tp 1 or bf16 weights";
}

bool fp8_kv_cache(const core::EngineConfig& config) { return config.device.kv_cache_dtype == DType::kF8E4M3; }

// Why this run's FP8 KV cache cannot be on GPUs ("" when it can, or when the cache is bf16): the
// GPU's FP8 cache serves dense attention on one GPU (tests/gpu/test_cuda_fp8.cpp, the FP8 canary
// of scripts/gpu-test.sh), with n-gram drafts too (test_cuda_speculative.cpp
// NgramDraftsOverAnFp8KvCacheGiveThePlainTokensUpToNearTies); the rest is untested there.
std::string cuda_fp8_kv_refusal(const core::EngineConfig& config, const model::ModelConfig& model_config) {
  if (!fp8_kv_cache(config)) return "";
  const std::string why = model::fp8_kv_cache_gpu_unsupported(
      model_config, config.device.tensor_parallel_size > 1 || config.device.nnodes > 1);
  if (!why.empty()) return why;
  if (config.speculative.enabled() && config.speculative.method != "ngram") {
    return "an FP8 KV cache with --speculative-method " + config.speculative.method +
           " on GPUs is not verified by any test yet (n-gram drafts are)";
  }
  return "";
}

// The FP8 KV cache: the CPU reference (runner/paged_attention_backend.h), with every drafter
// (test_engine_ngram.cpp, test_engine_draft_model.cpp, test_engine_mtp.cpp), and, where
// cuda_fp8_kv_refusal allows, the GPU (with n-gram drafts or none).
void check_kv_cache_dtype(const core::EngineConfig& config, const model::ModelConfig& model_config,
                          const std::string& kind) {
  const DType kv = config.device.kv_cache_dtype;
  TACHYON_CHECK(kv == DType::kBF16 || kv == DType::kF8E4M3)
      << "--kv-cache-dtype must be auto, bf16 or fp8, got " << dtype_name(kv);
  if (kv != DType::kF8E4M3) return;
  if (kind == "cuda") {
    const std::string why = cuda_fp8_kv_refusal(config, model_config);
    TACHYON_CHECK(why.empty()) << "--kv-cache-dtype fp8 on --device cuda: " << why;
  }
}

// --speculative-method mtp drafts with the served model's own MTP modules, which read the main
// model's hidden states: the CPU runner and the CPU thread ranks (tensor-parallel, with or without
// expert parallelism, and data-parallel attention) return those (StepPlan::return_hidden_states;
// every rank of a group holds the whole residual stream of its tokens) to engine/mtp_drafter.h; the
// tensor-parallel GPU ranks do not (check_drafts_verified); the single-GPU CUDA runner drafts with the
// module itself (runner/cuda/cuda_mtp_drafter.h), for what its tests cover: one module, bf16
// weights (with or without the sparse indexer: DeepSeek-V3, V3.2 and GLM-5 in
// tests/gpu/test_cuda_speculative.cpp). Refused before loading, and again once --device auto resolves.
// (A draft model runs whole beside the served model on every CPU layout, and beside GPU ranks
// without expert parallelism: check_drafts_verified.)
void check_mtp(const core::EngineConfig& config, const model::ModelConfig& model_config,
               const std::filesystem::path& model_dir) {
  if (config.speculative.method != "mtp") return;
  TACHYON_CHECK(model_config.num_nextn_predict_layers > 0)
      << "--speculative-method mtp: " << model_dir.string()
      << " has no MTP modules (num_nextn_predict_layers is 0 in its config.json)";
  if (config.device.kind != "cuda") return;
  TACHYON_CHECK(model_config.num_nextn_predict_layers == 1)
      << "--speculative-method mtp on --device cuda drafts with one MTP module; " << model_dir.string() << " has "
      << model_config.num_nextn_predict_layers << " (no test covers more yet): use --device cpu";
  TACHYON_CHECK(!fp8_run(config, model_config) && config.device.kv_cache_dtype != DType::kF8E4M3)
      << "--speculative-method mtp on --device cuda is not verified with FP8 weights or an FP8 KV cache by any "
         "test yet";
}

// The drafter a CPU layout's ranks verify: a draft model beside them, or the served model's MTP
// modules; none for n-gram (the engine builds it from the config) or without speculation.
std::unique_ptr<engine::Drafter> load_cpu_drafter(const core::EngineConfig& config,
                                                  const model::ModelConfig& model_config,
                                                  const std::filesystem::path& model_dir) {
  if (config.speculative.method == "draft") return load_cpu_draft_model(config, model_config);
  if (config.speculative.method == "mtp") return load_cpu_mtp_drafter(config, model_dir);
  return nullptr;
}

// --dp N (data-parallel attention, runner/dp_cpu_model_runner.h): MoE models on CPU thread ranks,
// with or without --tp, with or without speculative decoding (the replicas' draft rows are verified
// as one runner's), FP8 weights (dequantized, as every CPU runner holds them) and an FP8 KV cache,
// asynchronous scheduling; every other combination has no test yet and is refused before loading.
LoadedRunner load_dp_runner(const std::filesystem::path& model_dir, const model::ModelConfig& model_config,
                            core::EngineConfig& config) {
  const int dp = config.device.data_parallel_size, tp = config.device.tensor_parallel_size;
  model::check_dp_size(model_config, dp, tp);
  const std::string flag = "--dp " + std::to_string(dp);
  // The GPU runner (runner/cuda/dp_cuda_model_runner.h) is tested with its ranks sharing one GPU;
  // served once it has run across GPUs, as --dcp and --pcp across GPUs wait for theirs.
  TACHYON_CHECK(config.device.kind != "cuda")
      << flag << " on --device cuda is not served yet: its GPU runner has not run across GPUs (data-parallel "
      << "attention runs on CPU thread ranks: --device cpu)";
  TACHYON_CHECK(config.device.nnodes == 1) << flag << " with --nnodes > 1 is not built yet";
  TACHYON_CHECK(config.device.decode_context_parallel_size == 1)
      << flag << " with --dcp " << config.device.decode_context_parallel_size << " is not verified by any test yet";
  config.device.kind = "cpu";  // auto resolves to the only device --dp runs on
  // The ranks' shards cut layer by layer as the checkpoint is read (never the whole model beside them).
  const model::SafetensorsCheckpoint checkpoint(model_dir);
  auto runner = std::make_unique<runner::DpCpuModelRunner>(
      model::load_f32_shards(model_config, checkpoint, runner::dp_shard_places(dp, tp),
                             config.device.quantization == "fp8"),
      model_config, dp, tp, config.num_blocks, config.block_size, fp8_kv_cache(config));
  return {std::move(runner), model_config, load_cpu_drafter(config, model_config, model_dir)};
}

}  // namespace

// load_runner() without its test-only fault (below).
static LoadedRunner load_device_runner(const std::filesystem::path& model_dir, core::EngineConfig& config) {
  const model::ModelConfig model_config = model::ModelConfig::from_dir(model_dir);
  std::string& kind = config.device.kind;
  TACHYON_CHECK(kind == "auto" || kind == "cpu" || kind == "cuda") << "--device must be auto, cpu or cuda, got '" << kind << "'";
  config.device.model_identity = model_identity(model_dir, model_config);
  config.speculative = engine::resolve_speculative_config(config.speculative);
  if (kind == "cuda" && config.device.tensor_parallel_size > 1) check_drafts_verified(config);  // auto: where it resolves
  check_quantization_device(config, model_config, kind);  // auto: where it resolves
  check_kv_cache_dtype(config, model_config, kind);        // auto: where it resolves
  check_mtp(config, model_config, model_dir);
  const std::string dcp_refused = runner::dcp_unsupported_reason(config, model_config);
  TACHYON_CHECK(dcp_refused.empty()) << dcp_refused;
  const std::string tbo_refused = runner::tbo_unsupported_reason(config, model_config);
  TACHYON_CHECK(tbo_refused.empty()) << tbo_refused;
  const std::string pcp_refused = runner::pcp_unsupported_reason(config, model_config);
  TACHYON_CHECK(pcp_refused.empty()) << pcp_refused;
  if (config.device.prefill_context_parallel_size > 1) {  // --tp x --pcp [--dcp] CPU ranks (pcp_cpu_model_runner.h)
    config.device.kind = "cpu";  // auto resolves to the only device --pcp runs on
    const int tp = config.device.tensor_parallel_size;
    const model::DcpOptions dcp{config.device.decode_context_parallel_size,
                                config.device.dcp_kv_cache_interleave_size};
    const int pcp = config.device.prefill_context_parallel_size;
    model::check_tp_size(model_config, tp);
    // At --tp > 1 the TP ranks' shards, read a layer at a time and shared by every PCP group.
    auto runner =
        tp > 1 ? std::make_unique<runner::PcpCpuModelRunner>(
                     model::load_f32_tp_shards(model_config, model::SafetensorsCheckpoint(model_dir),
                                               {.first = 0, .count = tp, .tp_size = tp},
                                               config.device.quantization == "fp8"),
                     model_config, pcp, config.num_blocks, config.block_size, dcp, fp8_kv_cache(config))
               : std::make_unique<runner::PcpCpuModelRunner>(load_cpu_weights(model_dir, model_config, config), pcp,
                                                             config.num_blocks, config.block_size, tp, dcp,
                                                             fp8_kv_cache(config));
    return {std::move(runner), model_config, load_cpu_drafter(config, model_config, model_dir)};
  }
  [[maybe_unused]] const bool dcp = config.device.decode_context_parallel_size > 1;  // auto: CPU thread ranks
  const int tp = config.device.tensor_parallel_size;
  TACHYON_CHECK(tp >= 1) << "--tp must be at least 1, got " << tp;
  if (config.device.data_parallel_size != 1) return load_dp_runner(model_dir, model_config, config);
  const int nnodes = config.device.nnodes;
  TACHYON_CHECK(nnodes >= 1 && config.device.node_rank >= 0 && config.device.node_rank < nnodes)
      << "--node-rank " << config.device.node_rank << " must be in [0, --nnodes " << nnodes << ")";
  const bool ep = config.device.enable_expert_parallel;
  if (tp > 1 || nnodes > 1 || ep) {
    // Checked before any weight is read: "tensor parallel size 3 does not divide num_attention_heads 4".
    model::check_tp_size(model_config, tp, ep);
    TACHYON_CHECK(tp % nnodes == 0) << "--tp " << tp << " must be a multiple of --nnodes " << nnodes
                                    << " (the same number of GPUs on every node)";
#ifdef TACHYON_HAVE_CUDA
    // One GPU per rank; auto takes the GPUs when there are enough and the model's shapes fit.
    const int local = tp / nnodes;
    const int gpus = cuda::cuda_device_count();
    if (nnodes > 1) {
      TACHYON_CHECK(kind != "cpu") << "--nnodes > 1 runs on GPUs only";
      kind = "cuda";
    }
    if (kind == "auto") {
      kind = gpus >= local && cuda_unsupported_reason(model_config).empty() && !fp8_kv_cache(config) && !dcp &&
                     !ep && !config.device.enable_two_batch_overlap &&
                     model::cuda_tp_unsupported_reason(model_config, tp, ep).empty() &&
                     (!fp8_run(config, model_config) || model::fp8_tp_unsupported_reason(model_config, tp, ep).empty())
                 ? "cuda"
                 : "cpu";
    }
    if (kind == "cuda") {
      TACHYON_CHECK(gpus >= local) << "--tp " << tp << " over " << nnodes << " node(s) needs " << local
                                   << " GPUs on this node, this process sees " << gpus;
      const std::string why = cuda_unsupported_reason(model_config);
      TACHYON_CHECK(why.empty()) << "--device cuda cannot serve " << model_dir.string() << ": " << why;
      TACHYON_CHECK(model::cuda_tp_unsupported_reason(model_config, tp, ep).empty())
          << "--tp " << tp << ": " << model::cuda_tp_unsupported_reason(model_config, tp, ep);
      // TpCudaModelRunner serves it; the CLI waits, as for --dcp and --pcp, for its tests across GPUs.
      TACHYON_CHECK(!ep) << "--enable-expert-parallel on --device cuda is verified only with ranks sharing one GPU "
                            "(a test harness); across GPUs (NCCL, graphs) no test has run it yet: use --device cpu "
                            "for now";
      check_drafts_verified(config);
      check_quantization_device(config, model_config, kind);
      const std::string fp8_cut =
          fp8_run(config, model_config) ? model::fp8_tp_unsupported_reason(model_config, tp, ep) : "";
      TACHYON_CHECK(fp8_cut.empty()) << "--tp " << tp << " with FP8 weights on GPUs: " << fp8_cut
                                     << " (use another --tp, --device cpu, or bf16 weights)";
      config.device.gpu_name = cuda::current_device_name();
      runner::TpCudaLayout layout{.devices = std::vector<int>(static_cast<size_t>(local)),
                          .first_rank = config.device.node_rank * local,
                          .tp_size = tp};
      for (int r = 0; r < local; ++r) layout.devices[static_cast<size_t>(r)] = r;
      runner::TpCommFactory comms = nnodes > 1 ? runner::multi_node_tp_comm_factory(config.device.master_addr,
                                                                   config.device.master_port, tp)
                                       : runner::default_tp_comm_factory(layout.devices);
      // A draft model loads first, whole, on the first rank's GPU (the current device), with its
      // fixed cache share; the ranks then size their caches from what is left (the smallest wins).
      std::unique_ptr<engine::Drafter> drafter;
      if (config.speculative.method == "draft") drafter = load_cuda_draft_model(config, model_config);
      // This node's ranks' shards, cut layer by layer as the checkpoint is read and each cut sent
      // to its rank's GPU at once (model/gpu/stream_gpu_weights.h: the host holds one layer).
      model::SafetensorsCheckpoint checkpoint(model_dir);
      const model::TpRanks ranks{.first = layout.first_rank, .count = local, .tp_size = tp,
                                 .expert_parallel = config.device.enable_expert_parallel};
      std::vector<model::gpu::CudaDenseWeights> weights =
          fp8_run(config, model_config)
              ? model::gpu::stream_fp8_tp_gpu_weights(model_config, checkpoint, config.device.quantization == "fp8",
                                                      model::kServedFp8RoutedExperts, ranks, layout.devices)
              : model::gpu::stream_bf16_tp_gpu_weights(model_config, checkpoint, ranks, layout.devices);
      auto runner = std::make_unique<runner::TpCudaModelRunner>(std::move(weights), model_config, config,
                                                                std::move(layout), std::move(comms));
      config.num_blocks = runner->num_blocks();
      return {std::move(runner), model_config, std::move(drafter)};
    }
#else
    TACHYON_CHECK(nnodes == 1) << "--nnodes > 1 needs a CUDA build of tachyon";
    if (kind == "auto") kind = "cpu";
    TACHYON_CHECK(kind == "cpu") << "--device cuda: this build of tachyon has no CUDA support (configure with nvcc "
                                    "on the PATH, or -DTACHYON_CUDA=ON)";
#endif
    // The ranks' shards cut layer by layer as the checkpoint is read (never the whole model beside them).
    const model::SafetensorsCheckpoint checkpoint(model_dir);
    const model::TpRanks ranks{.first = 0, .count = tp, .tp_size = tp, .expert_parallel = ep};
    auto runner = std::make_unique<runner::TpCpuModelRunner>(
        model::load_f32_tp_shards(model_config, checkpoint, ranks, config.device.quantization == "fp8"), model_config,
        config.num_blocks, config.block_size, ep, fp8_kv_cache(config),
        model::DcpOptions{config.device.decode_context_parallel_size, config.device.dcp_kv_cache_interleave_size},
        runner::TboOptions{.enabled = config.device.enable_two_batch_overlap});
    return {std::move(runner), model_config, load_cpu_drafter(config, model_config, model_dir)};
  }
#ifdef TACHYON_HAVE_CUDA
  if (kind == "auto") {
    const std::string why = cuda_unsupported_reason(model_config);
    // Silent on purpose: the CLI reports the device it ran on; --device cuda says why not.
    kind = cuda::cuda_device_available() && why.empty() && cuda_fp8_kv_refusal(config, model_config).empty() ? "cuda"
                                                                                                      : "cpu";
  }
  check_mtp(config, model_config, model_dir);  // auto may have resolved to cuda
  if (kind == "cuda") {
    TACHYON_CHECK(cuda::cuda_device_available()) << "--device cuda: no CUDA GPU is visible to this process";
    const std::string why = cuda_unsupported_reason(model_config);
    TACHYON_CHECK(why.empty()) << "--device cuda cannot serve " << model_dir.string() << ": " << why;
    check_quantization_device(config, model_config, kind);
    config.device.gpu_name = cuda::current_device_name();
    // The draft model loads first, with a KV cache of fixed size; the served model then takes
    // what --gpu-memory-utilization leaves.
    std::unique_ptr<engine::Drafter> drafter;
    if (config.speculative.method == "draft") drafter = load_cuda_draft_model(config, model_config);
    model::SafetensorsCheckpoint checkpoint(model_dir);
    if (config.speculative.method == "mtp") {
      // The runner drafts with the module on the device; the engine proposes what it returns.
      std::vector<model::MtpWeights> modules = model::load_mtp_weights(model_config, checkpoint);
      const model::Bf16MtpModule module = model::to_bf16_module(model_config, std::move(modules.front()));
      modules.clear();
      auto runner = std::make_unique<runner::CudaModelRunner>(model::load_weights_bf16(model_config, checkpoint), config,
                                                              runner::CudaTpRank{}, &module);
      config.num_blocks = runner->num_blocks();
      return {std::move(runner), model_config, std::make_unique<engine::RunnerDrafter>()};
    }
    // Each layer goes to the GPU as it is read (model/gpu/stream_gpu_weights.h); the routed
    // experts in the served form (model/fp8_served_experts.h).
    auto runner = std::make_unique<runner::CudaModelRunner>(
        fp8_run(config, model_config)
            ? model::gpu::stream_fp8_gpu_weights(model_config, checkpoint, config.device.quantization == "fp8",
                                                 model::kServedFp8RoutedExperts)
            : model::gpu::stream_bf16_gpu_weights(model_config, checkpoint),
        config);
    config.num_blocks = runner->num_blocks();
    return {std::move(runner), model_config, std::move(drafter)};
  }
#else
  if (kind == "auto") kind = "cpu";
  TACHYON_CHECK(kind == "cpu") << "--device cuda: this build of tachyon has no CUDA support (configure with nvcc "
                                  "on the PATH, or -DTACHYON_CUDA=ON)";
#endif
  auto model = std::make_unique<model::DenseModel>(
      load_cpu_weights(model_dir, model_config, config, model::Bf16MatrixHolding::kKeepBf16));
  auto cpu_runner = std::make_unique<runner::CpuModelRunner>(std::move(model), config.num_blocks, config.block_size,
                                                             model::MlaAttentionForm::kAbsorbed, fp8_kv_cache(config));
  runner::CpuModelRunner* cpu = cpu_runner.get();
  LoadedRunner loaded{std::move(cpu_runner), model_config, nullptr};
  loaded.final_hidden_states = [cpu](std::span<const int32_t> tokens) { return cpu->final_hidden_states(tokens); };
  loaded.drafter = load_cpu_drafter(config, model_config, model_dir);
  return loaded;
}

LoadedRunner load_runner(const std::filesystem::path& model_dir, core::EngineConfig& config) {
  const engine::RunnerFault fault = engine::runner_fault_from_env();  // TACHYON_RUNNER_FAULT: tests only
  LoadedRunner loaded = load_device_runner(model_dir, config);
  loaded.runner = engine::with_runner_fault(std::move(loaded.runner), fault);
  return loaded;
}

void run_follower_node(const std::filesystem::path& model_dir, core::EngineConfig& config) {
  TACHYON_CHECK(config.device.nnodes > 1 && config.device.node_rank > 0)
      << "internal: run_follower_node on node " << config.device.node_rank << " of " << config.device.nnodes;
#ifdef TACHYON_HAVE_CUDA
  LoadedRunner loaded = load_device_runner(model_dir, config);
  auto* tp = dynamic_cast<runner::TpCudaModelRunner*>(loaded.runner.get());
  TACHYON_CHECK(tp != nullptr) << "internal: a follower node without a TP runner";
  tp->follow();
#else
  TACHYON_FAIL() << "--nnodes > 1 needs a CUDA build of tachyon";
#endif
}

}  // namespace tachyon::app
