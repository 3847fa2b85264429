#include "tachyon/model/gpu/latent_attention.h"

#include <algorithm>
#include <vector>

#include "tachyon/base/env_switch.h"
#include "tachyon/dist/communicator.h"
#include "tachyon/kernels/cuda/attention.h"
#include "tachyon/kernels/cuda/dcp_attention.h"
#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/kernels/cuda/mla_expand.h"
#include "tachyon/kernels/cuda/mla_rope.h"
#include "tachyon/kernels/cuda/rms_norm.h"
#include "tachyon/model/attention_backend.h"
#include "tachyon/model/gpu_support.h"
#include "tachyon/model/mla.h"
#include "tachyon/model/rope.h"

namespace tachyon::model::gpu {

namespace kc = kernels::cuda;

namespace {

// The expanded prefill's scratch (Q, output, the contexts' K and V, their latent rows) stays under
// this; a model whose heads and step size need more keeps the absorbed form.
constexpr int64_t kExpandedScratchCap = int64_t{2} << 30;

// Scratch rows of the expanded prefill: up to twice a step's tokens (a chunk and as much earlier
// context), or 0 where it does not run: DSA's sparse attention, context parallelism (split
// caches and gathered rows), heads wider than the dense kernel's 256 (mla_expanded_head_dim),
// TACHYON_MLA_EXPANDED_PREFILL=0, or no room under kExpandedScratchCap for a step's tokens.
int32_t expanded_prefill_rows(const ModelConfig& c, const GpuLimits& limits, bool sparse) {
  const int64_t nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, v = c.v_head_dim, rank = c.kv_lora_rank;
  if (sparse || limits.dcp.size > 1 || limits.pcp_size > 1) return 0;
  const int64_t E = kc::mla_expanded_head_dim(static_cast<int32_t>(nope), static_cast<int32_t>(rope),
                                              static_cast<int32_t>(v));
  if (E == 0) return 0;
  if (!env_switch_on("TACHYON_MLA_EXPANDED_PREFILL")) return 0;
  // Q and the output take T rows; each context row its K, V and latent row. Twice T context rows
  // where they fit the cap, else as many as fit down to a step's tokens and one block.
  const int64_t block = kc::kMlaExpandedBlock, T = limits.max_tokens;
  const int64_t head_row = static_cast<int64_t>(c.num_attention_heads) * E * 2;
  const int64_t context_row = 2 * head_row + (rank + rope) * 2;
  const int64_t fit = (kExpandedScratchCap - 2 * T * head_row) / context_row / block * block;
  const int64_t rows = std::min((2 * T + block - 1) / block * block, fit);
  return rows >= T + block ? static_cast<int32_t>(rows) : 0;
}

}  // namespace

LatentAttentionBlock::LatentAttentionBlock(BlockContext& context) : GpuBlock(context) {
  const ModelConfig& c = ctx_.config;
  const std::string reason = latent_attention_gpu_unsupported(c);
  TACHYON_CHECK(reason.empty()) << "the GPU latent-attention block cannot serve this model: " << reason;
  // FP8 planes of 4 bytes per token (the index keys' factors) end a layer: the next layer's codes
  // stay 16-byte aligned when a block holds a multiple of 4 tokens.
  TACHYON_CHECK(!ctx_.limits.fp8_kv_cache || (ctx_.limits.dcp.size == 1 && ctx_.limits.pcp_size == 1 &&
                                              ctx_.limits.kv_block_rows() % 4 == 0 && c.kv_lora_rank % 16 == 0 &&
                                              c.index_head_dim % 16 == 0))
      << "the GPU's FP8 latent cache takes one GPU's whole cache (no decode or prefill context parallelism), a block "
         "size that is a multiple of 4 (got "
      << ctx_.limits.block_size << "), and kv_lora_rank and index_head_dim multiples of 16 (got " << c.kv_lora_rank
      << " and " << c.index_head_dim << ")";
  const kernels::DcpLayout& dcp = ctx_.limits.dcp;
  TACHYON_CHECK(ctx_.limits.pcp_size == 1 || (ctx_.pcp_comm != nullptr && dcp.size == 1))
      << "prefill context parallelism on GPUs needs its group, and is not built beside decode context parallelism";
  TACHYON_CHECK(dcp.size == 1 || (ctx_.dcp_comm != nullptr && ctx_.limits.block_size % (dcp.size * dcp.interleave) == 0))
      << "decode context parallelism over " << dcp.size << " ranks with interleave " << dcp.interleave
      << " needs its group and a block size that is a multiple of " << dcp.size * dcp.interleave << ", got "
      << ctx_.limits.block_size;
  rope_attention_scaling_ = static_cast<float>(rope_attention_scaling(c));
  softmax_scale_ = mla_attention_shape(c, 1, 0).scale;
  const bool sparse = std::any_of(ctx_.layers.begin(), ctx_.layers.end(),
                                  [](const LayerKinds& kinds) { return kinds.indexer != IndexerKind::kNone; });
  if (sparse) selector_ = std::make_unique<SparseSelector>(ctx_, rope_attention_scaling_);
  expanded_rows_ = expanded_prefill_rows(c, ctx_.limits, sparse);
}

LinearShape LatentAttentionBlock::q_a_shape() const {
  const ModelConfig& c = ctx_.config;
  return {c.q_lora_rank > 0 ? c.q_lora_rank : c.num_attention_heads * qk(), c.hidden_size};
}
LinearShape LatentAttentionBlock::q_b_shape() const {
  const ModelConfig& c = ctx_.config;
  return c.q_lora_rank == 0 ? LinearShape{} : LinearShape{c.num_attention_heads * qk(), c.q_lora_rank};
}
LinearShape LatentAttentionBlock::kv_a_shape() const {
  return {ctx_.config.kv_lora_rank + ctx_.config.qk_rope_head_dim, ctx_.config.hidden_size};
}
LinearShape LatentAttentionBlock::o_shape() const {
  return {ctx_.config.hidden_size, ctx_.config.num_attention_heads * ctx_.config.v_head_dim};
}

void LatentAttentionBlock::plan_workspace(WorkspacePlan& plan) {
  const ModelConfig& c = ctx_.config;
  Workspace& ws = ctx_.ws;
  const size_t T = static_cast<size_t>(ctx_.limits.max_tokens), heads = static_cast<size_t>(c.num_attention_heads);
  const size_t rank = static_cast<size_t>(c.kv_lora_rank), rope = static_cast<size_t>(c.qk_rope_head_dim);
  // The kernels attend every head of the DCP group (the group's queries are gathered).
  const size_t group = static_cast<size_t>(ctx_.limits.dcp.size), attended_heads = group * heads;
  // One scratch holds the larger of the two kernels' partials (sparse: steps of max_tokens
  // tokens over index_topk kept entries; the size stops growing past a few waves of tokens).
  ws.mla_split_scratch_bytes = kc::mla_decode_workspace_bytes(ctx_.limits.max_seqs, static_cast<int32_t>(attended_heads),
                                                              static_cast<int32_t>(rank), ctx_.limits.max_model_len);
  if (selector_ != nullptr) {
    ws.mla_split_scratch_bytes = std::max(
        ws.mla_split_scratch_bytes, kc::sparse_mla_workspace_bytes(ctx_.limits.max_tokens, static_cast<int32_t>(attended_heads),
                                                                   static_cast<int32_t>(rank),
                                                                   static_cast<int32_t>(c.index_topk)));
  }
  plan.add(&ws.q_lora, T * static_cast<size_t>(c.q_lora_rank) * 2);
  plan.add(&ws.q_full, T * heads * static_cast<size_t>(qk()) * 2);
  plan.add(&ws.kv_a, T * (rank + rope) * 2);
  plan.add(&ws.q_absorbed, T * heads * (rank + rope) * 2);
  plan.add(&ws.attn_latent, T * heads * rank * 2);
  plan.add(&ws.mla_split_scratch, ws.mla_split_scratch_bytes);
  if (ctx_.limits.pcp_size > 1) plan.add(&ws.pcp_kv_a, T * (rank + rope) * 2);
  if (expanded_rows_ > 0) {
    const size_t R = static_cast<size_t>(expanded_rows_), head_row = heads * static_cast<size_t>(expanded_head_dim()) * 2;
    plan.add(&ws.mla_expanded_q, T * head_row);
    plan.add(&ws.mla_expanded_out, T * head_row);
    plan.add(&ws.mla_expanded_rows, R * (rank + rope) * 2);
    plan.add(&ws.mla_expanded_k, R * head_row);
    plan.add(&ws.mla_expanded_v, R * head_row);
    plan.add(&ws.mla_expanded_tables, static_cast<size_t>(ctx_.limits.max_seqs) *
                                          static_cast<size_t>(kc::mla_expanded_table_stride(ctx_.limits.max_model_len)) * 4);
  }
  if (split_cache()) {
    const size_t qa = rank + rope;
    plan.add(&ws.dcp_slots, T * 4);
    plan.add(&ws.dcp_q_gathered, group * T * heads * qa * 2);
    plan.add(&ws.dcp_q_group, group * T * heads * qa * 2);
    plan.add(&ws.dcp_attn_group, group * T * heads * rank * 2);
    plan.add(&ws.dcp_lse_group, group * T * heads * 4);
    plan.add(&ws.dcp_send_out, group * T * heads * rank * 2);
    plan.add(&ws.dcp_send_lse, group * T * heads * 4);
    plan.add(&ws.dcp_recv_out, group * T * heads * rank * 2);
    plan.add(&ws.dcp_recv_lse, group * T * heads * 4);
  }
  if (selector_ != nullptr) selector_->plan_workspace(plan);
}

void LatentAttentionBlock::add_gemm_problems(int64_t m, std::vector<kc::GemmProblem>& problems) const {
  const auto bf = kc::GemmOutputType::kBF16;
  problems.push_back({m, q_a_shape().n, q_a_shape().k, bf, false});
  if (q_b_shape().n > 0) problems.push_back({m, q_b_shape().n, q_b_shape().k, bf, false});
  problems.push_back({m, kv_a_shape().n, kv_a_shape().k, bf, false});
  problems.push_back({m, o_shape().n, o_shape().k, bf, false});
  if (selector_ != nullptr) selector_->add_gemm_problems(m, problems);
}

std::vector<RoleInfo> LatentAttentionBlock::roles() const {
  std::vector<RoleInfo> roles = {{LinearRole::kMlaQA, q_a_shape(), ctx_.ws.normed, q_a_shape().k}};
  if (q_b_shape().n > 0) roles.push_back({LinearRole::kMlaQB, q_b_shape(), ctx_.ws.q_lora, q_b_shape().k});
  roles.push_back({LinearRole::kMlaKvA, kv_a_shape(), ctx_.ws.normed, kv_a_shape().k});
  roles.push_back({LinearRole::kMlaO, o_shape(), ctx_.ws.attn, o_shape().k});
  return roles;
}

void LatentAttentionBlock::run_role(LinearRole role, int64_t layer, int64_t m) {
  run_role_on(role, layer, m, ctx_.stream);
}

void LatentAttentionBlock::run_role_on(LinearRole role, int64_t layer, int64_t m, cudaStream_t stream) {
  const CudaLayerWeights& w = layer_weights(layer);
  Workspace& ws = ctx_.ws;
  const auto bf = GemmOutputType::kBF16;
  switch (role) {
    case LinearRole::kMlaQA:  // q_a_proj into the q LoRA, or (no q LoRA) q_proj straight to the heads
      if (!w.q_a_proj.empty()) {
        ctx_.linear.linear(role, q_a_shape(), ws.q_lora, bf, ws.normed, w.q_a_proj, nullptr, m, stream);
      } else {
        ctx_.linear.linear(role, q_a_shape(), ws.q_full, bf, ws.normed, w.q_b_proj, nullptr, m, stream);
      }
      break;
    case LinearRole::kMlaQB:
      ctx_.linear.linear(role, q_b_shape(), ws.q_full, bf, ws.q_lora, w.q_b_proj, nullptr, m, stream);
      break;
    case LinearRole::kMlaKvA:
      ctx_.linear.linear(role, kv_a_shape(), ws.kv_a, bf, ws.normed, w.kv_a_proj, nullptr, m, stream);
      break;
    case LinearRole::kMlaO:
      ctx_.linear.linear(role, o_shape(), ws.proj, bf, ws.attn, w.o_proj, nullptr, m, stream);
      break;
    default:
      break;
  }
}

std::vector<KvRegion> LatentAttentionBlock::kv_regions() const {
  const ModelConfig& c = ctx_.config;
  const size_t rank = static_cast<size_t>(c.kv_lora_rank), rope = static_cast<size_t>(c.qk_rope_head_dim);
  std::vector<KvRegion> regions;
  if (ctx_.limits.fp8_kv_cache) {  // latent_regions() planes, in latent_view's order
    const size_t factors = static_cast<size_t>(kc::fp8_latent_scale_stride(c.kv_lora_rank)) * sizeof(float);
    regions = {{"latent_codes", rank, DType::kF8E4M3},
               {"latent_rope", rope * 2, DType::kBF16},
               {"latent_scales", factors, DType::kF32}};
  } else {
    regions = {{"latent", (rank + rope) * 2, DType::kBF16}};
  }
  if (selector_ != nullptr) {
    for (const KvRegion& r : selector_->kv_regions()) regions.push_back(r);
  }
  return regions;
}

kc::PagedLatentView LatentAttentionBlock::latent_view(int64_t l, const StepMetadata& m) const {
  kc::PagedLatentView view{.block_tables = m.block_tables,
                           .block_table_stride = ctx_.limits.block_table_stride,
                           .block_size = ctx_.limits.kv_block_rows(),
                           .kv_lora_rank = static_cast<int32_t>(ctx_.config.kv_lora_rank),
                           .rope_dim = static_cast<int32_t>(ctx_.config.qk_rope_head_dim)};
  if (ctx_.limits.fp8_kv_cache) {
    view.codes = reinterpret_cast<const uint8_t*>(ctx_.kv->bytes(l, 0));
    view.rope = ctx_.kv->region(l, 1);
    view.scales = reinterpret_cast<const float*>(ctx_.kv->bytes(l, 2));
  } else {
    view.cache = ctx_.kv->region(l, 0);
  }
  return view;
}

IndexKeyCache LatentAttentionBlock::index_key_cache(int64_t l) const {
  const size_t first = latent_regions();
  if (!ctx_.limits.fp8_kv_cache) return {.keys = ctx_.kv->region(l, first)};
  return {.codes = reinterpret_cast<uint8_t*>(ctx_.kv->bytes(l, first)),
          .scales = reinterpret_cast<float*>(ctx_.kv->bytes(l, first + 1))};
}

void LatentAttentionBlock::store_latent(int64_t l, const bf16* kv_a, const int32_t* positions, const int32_t* slots,
                                        int64_t n, cudaStream_t stream) {
  const ModelConfig& c = ctx_.config;
  const CudaLayerWeights& w = layer_weights(l);
  const auto rank = static_cast<int32_t>(c.kv_lora_rank), rope = static_cast<int32_t>(c.qk_rope_head_dim);
  const float eps = kMlaLatentNormEps;
  if (ctx_.limits.fp8_kv_cache) {
    kc::mla_store_latent_fp8(reinterpret_cast<uint8_t*>(ctx_.kv->bytes(l, 0)),
                             reinterpret_cast<float*>(ctx_.kv->bytes(l, 2)), ctx_.kv->region(l, 1), kv_a, w.kv_a_norm,
                             eps, ctx_.weights.inv_freq(), rope_attention_scaling_, c.rope_interleave, positions, slots,
                             n, rank, rope, stream);
  } else {
    kc::mla_store_latent(ctx_.kv->region(l, 0), kv_a, w.kv_a_norm, eps, ctx_.weights.inv_freq(),
                         rope_attention_scaling_, c.rope_interleave, positions, slots, n, rank, rope, stream);
  }
}

void LatentAttentionBlock::forward(int64_t l, const GpuStep& step) {
  const ModelConfig& c = ctx_.config;
  const CudaLayerWeights& w = layer_weights(l);
  Workspace& ws = ctx_.ws;
  const ForwardShape& shape = step.shape;
  const StepMetadata& m = step.metadata;
  cudaStream_t stream = ctx_.stream;
  const int64_t T = shape.num_tokens, heads = c.num_attention_heads;
  const int64_t nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, rank = c.kv_lora_rank, v = c.v_head_dim;
  const int64_t qa = rank + rope, kv_b_rows = nope + v;
  const float eps = kMlaLatentNormEps;  // q_a_layernorm's and kv_a_layernorm's, not the config's

  // Under DCP the stores see this rank's slots only (-1 for the group's other tokens), mapped once
  // per step by its first layer (every forward runs the layers from 0).
  GpuStep local_step = step;
  if (split_cache()) {
    if (l == 0) kc::dcp_local_slots(ws.dcp_slots, m.slots, T, ctx_.limits.dcp, ctx_.limits.block_size, stream);
    local_step.metadata.slots = ws.dcp_slots;
  }
  const int32_t* slots = local_step.metadata.slots;
  // Prefill sequences in the expanded form read q_full and the roped q_pe; only the decode rows
  // need the absorbed W_uk product then.
  const bool expanded = !split_cache() && expands(shape);
  auto queries = [&](cudaStream_t on) {
    run_role_on(LinearRole::kMlaQA, l, T, on);  // into the q LoRA, or (no q LoRA) straight to the heads' queries
    if (!w.q_a_proj.empty()) {
      kc::rms_norm(ws.q_lora, ws.q_lora, w.q_a_norm, T, c.q_lora_rank, eps, on);
      run_role_on(LinearRole::kMlaQB, l, T, on);
    }
    // q_abs[t, h, :rank] = q[t, h, :nope] @ W_uk_h: W_uk_h is kv_b_proj's rows h * (nope + v) .. + nope.
    head_gemm_.run(ws.q_absorbed, heads * qa, qa, {ws.q_full, heads * qk(), qk()},
                   {w.kv_b_proj, rank, kv_b_rows * rank}, kc::HeadGemmB::kNone, expanded ? shape.num_decode_seqs : T,
                   rank, nope, heads, on);
    kc::mla_rope_queries(ws.q_absorbed, ws.q_full, ctx_.weights.inv_freq(), rope_attention_scaling_,
                         c.rope_interleave, m.positions, T, static_cast<int32_t>(heads), static_cast<int32_t>(nope),
                         static_cast<int32_t>(rank), static_cast<int32_t>(rope), on);
  };
  // A split prefill step (prefill context parallelism) stores the whole step's rows after its
  // one gather below; otherwise each row is stored where it is projected.
  const bool gathers = step.gathered.num_rows > 0;
  const bool full_indexer = selector_ != nullptr && ctx_.layers[static_cast<size_t>(l)].indexer == IndexerKind::kFull;
  auto latents = [&](cudaStream_t on) {  // reads normed, writes kv_a and this layer's cache rows
    run_role_on(LinearRole::kMlaKvA, l, T, on);
    if (gathers) return;
    store_latent(l, ws.kv_a, m.positions, slots, T, on);
  };
  run_branches(ctx_.linear.stream_local(LinearRole::kMlaKvA, kv_a_shape(), w.kv_a_proj, T), latents, queries);
  if (gathers) {
    gather_and_store(l, step, full_indexer);
  }

  const kc::PagedLatentView cache = latent_view(l, m);
  // GLM-5's "shared" layers attend the kept positions the last full layer left in ws.kept.
  if (full_indexer) {
    if (gathers) {
      selector_->select_stored(l, local_step, index_key_cache(l));
    } else {
      selector_->select(l, local_step, index_key_cache(l));
    }
  }
  if (split_cache()) {
    attend_split(step, cache);
  } else {
    attend(ws.attn_latent, ws.q_absorbed, static_cast<int32_t>(heads), nullptr, step, cache, /*prefill=*/!expanded);
  }
  if (expanded) attend_expanded(l, step, cache);
  // attn[t, h, :v] = lat[t, h] @ W_uv_h^T: W_uv_h is kv_b_proj's rows h * (nope + v) + nope .. + v
  // (the decode rows only when the prefill rows attended in the expanded form).
  head_gemm_.run(ws.attn, heads * v, v, {ws.attn_latent, heads * rank, rank}, {w.kv_b_proj + nope * rank, rank, kv_b_rows * rank},
                 kc::HeadGemmB::kTransposed, expanded ? shape.num_decode_seqs : T, v, rank, heads, stream);
  run_role(LinearRole::kMlaO, l, T);
}

void LatentAttentionBlock::gather_and_store(int64_t l, const GpuStep& step, bool full_indexer) {
  const ModelConfig& c = ctx_.config;
  Workspace& ws = ctx_.ws;
  const GatheredRows& g = step.gathered;
  dist::Communicator& group = *ctx_.pcp_comm;
  const size_t latent_row = static_cast<size_t>(c.kv_lora_rank + c.qk_rope_head_dim) * 2;
  const size_t key_row = static_cast<size_t>(c.index_head_dim) * 2;
  if (full_indexer) selector_->project_keys(l, step.shape.num_tokens);
  // ONE grouped all_gatherv per layer: every rank's kv_a rows (and wk rows on a full indexer
  // layer), each rank's run its own rows' (padding rows of an eager decode bucket stay home).
  std::vector<size_t> latent_counts, key_counts;
  for (int32_t rows : g.rank_rows) {
    latent_counts.push_back(static_cast<size_t>(rows) * latent_row);
    key_counts.push_back(static_cast<size_t>(rows) * key_row);
  }
  const size_t me = static_cast<size_t>(group.rank());
  std::vector<dist::GatherItem> items = {{ws.kv_a, latent_counts[me], ws.pcp_kv_a, latent_counts}};
  if (full_indexer) items.push_back({ws.index_k, key_counts[me], ws.pcp_index_k, key_counts});
  group.all_gatherv(items, ctx_.stream);
  store_latent(l, ws.pcp_kv_a, g.positions, g.slots, g.num_rows, ctx_.stream);
  if (full_indexer) selector_->store_keys(l, ws.pcp_index_k, g.positions, g.slots, g.num_rows, index_key_cache(l));
}

void LatentAttentionBlock::attend(bf16* out, const bf16* q, int32_t heads, float* lse, const GpuStep& step,
                                  const kc::PagedLatentView& cache, bool prefill) {
  const ForwardShape& shape = step.shape;
  const StepMetadata& m = step.metadata;
  Workspace& ws = ctx_.ws;
  cudaStream_t stream = ctx_.stream;
  const int32_t T = shape.num_tokens;
  const kc::MlaAttentionParams params{.num_heads = heads, .scale = softmax_scale_, .dcp = ctx_.limits.dcp, .lse = lse};
  if (selector_ != nullptr) {
    kc::sparse_mla_attention(out, q, cache, ws.kept, static_cast<int32_t>(ctx_.config.index_topk), m.query_starts,
                             shape.num_seqs, T, params, ws.mla_split_scratch, ws.mla_split_scratch_bytes, stream);
    return;
  }
  // Decodes first (row s is sequence s), then the prefill kernel over views from the first prefill.
  const int32_t decodes = shape.num_decode_seqs;
  if (decodes > 0) {
    kc::mla_decode_attention(out, q, cache, m.context_lens, decodes, shape.max_context_len, params,
                             ws.mla_split_scratch, ws.mla_split_scratch_bytes, stream);
  }
  if (prefill && decodes < shape.num_seqs) {
    // query_starts are offsets into the whole step, so q, out and lse are passed whole.
    kc::PagedLatentView prefill_cache = cache;
    prefill_cache.block_tables = m.block_tables + static_cast<size_t>(decodes) * ctx_.limits.block_table_stride;
    kc::mla_prefill_attention(out, q, prefill_cache, m.query_starts + decodes, m.context_lens + decodes,
                              shape.num_seqs - decodes, T, shape.max_query_len, params, stream);
  }
}

bool LatentAttentionBlock::expands(const ForwardShape& shape) const {
  const int64_t prefills = shape.num_seqs - shape.num_decode_seqs;
  return expanded_rows_ > 0 && prefills > 0 && shape.prefill_context_tokens > 0 &&
         kc::mla_expanded_rows_bound(shape.prefill_context_tokens, prefills) <= expanded_rows_;
}

void LatentAttentionBlock::attend_expanded(int64_t l, const GpuStep& step, const kc::PagedLatentView& cache) {
  const ModelConfig& c = ctx_.config;
  const bf16* kv_b = layer_weights(l).kv_b_proj;  // [heads * (nope + v), rank]: W_uk_h then W_uv_h per head
  const ForwardShape& shape = step.shape;
  const StepMetadata& m = step.metadata;
  Workspace& ws = ctx_.ws;
  cudaStream_t stream = ctx_.stream;
  const int32_t heads = static_cast<int32_t>(c.num_attention_heads), nope = static_cast<int32_t>(c.qk_nope_head_dim);
  const int32_t rope = static_cast<int32_t>(c.qk_rope_head_dim), rank = static_cast<int32_t>(c.kv_lora_rank);
  const int32_t v = static_cast<int32_t>(c.v_head_dim), E = expanded_head_dim(), block = kc::kMlaExpandedBlock;
  const int32_t decodes = shape.num_decode_seqs, prefills = shape.num_seqs - decodes;
  const int32_t table_stride = kc::mla_expanded_table_stride(ctx_.limits.max_model_len);
  const int64_t bound = kc::mla_expanded_rows_bound(shape.prefill_context_tokens, prefills);
  const int32_t rows = static_cast<int32_t>((bound + block - 1) / block * block);
  // The prefill sequences' contexts into scratch blocks: their latent rows, each head's k_pe.
  kc::PagedLatentView prefill_cache = cache;
  prefill_cache.block_tables = m.block_tables + static_cast<size_t>(decodes) * ctx_.limits.block_table_stride;
  kc::mla_expanded_gather(ws.mla_expanded_rows, ws.mla_expanded_k, ws.mla_expanded_v, ws.mla_expanded_tables,
                          table_stride, prefill_cache, m.context_lens + decodes, prefills, rows, heads, nope, v, E,
                          stream);
  // k[r, h, :nope] = c_kv[r] @ W_uk_h^T and v[r, h, :v] = c_kv[r] @ W_uv_h^T (kv_b_proj's row blocks;
  // every head reads the same latent row: a head stride of 0).
  const int64_t kv_b_rows = nope + v;
  const kc::HeadMatrix latent{ws.mla_expanded_rows, rank + rope, 0};
  head_gemm_.run(ws.mla_expanded_k, int64_t{heads} * E, E, latent, {kv_b, rank, kv_b_rows * rank},
                 kc::HeadGemmB::kTransposed, rows, nope, rank, heads, stream);
  head_gemm_.run(ws.mla_expanded_v, int64_t{heads} * E, E, latent, {kv_b + int64_t{nope} * rank, rank, kv_b_rows * rank},
                 kc::HeadGemmB::kTransposed, rows, v, rank, heads, stream);
  // The queries' rows of the prefill sequences (decode rows come first, one each).
  kc::mla_expanded_queries(ws.mla_expanded_q, ws.q_full, ws.q_absorbed, decodes, shape.num_tokens, heads, nope, rope,
                           rank, E, stream);
  const kc::PagedKvView kv{.k_cache = ws.mla_expanded_k,
                           .v_cache = ws.mla_expanded_v,
                           .block_tables = ws.mla_expanded_tables,
                           .block_table_stride = table_stride,
                           .block_size = block,
                           .num_kv_heads = heads,
                           .head_dim = E};
  kc::paged_prefill_attention(ws.mla_expanded_out, ws.mla_expanded_q, kv, m.query_starts + decodes,
                              m.context_lens + decodes, prefills, shape.num_tokens, shape.max_query_len,
                              {.num_heads = heads, .scale = softmax_scale_}, stream);
  kc::mla_expanded_output(ws.attn, ws.mla_expanded_out, decodes, shape.num_tokens, heads, v, E, stream);
  ++expanded_prefill_layers_;
}

void LatentAttentionBlock::attend_split(const GpuStep& step, const kc::PagedLatentView& cache) {
  const ModelConfig& c = ctx_.config;
  Workspace& ws = ctx_.ws;
  cudaStream_t stream = ctx_.stream;
  dist::Communicator& group = *ctx_.dcp_comm;
  const size_t N = static_cast<size_t>(ctx_.limits.dcp.size), T = static_cast<size_t>(step.shape.num_tokens);
  const size_t H = static_cast<size_t>(c.num_attention_heads), rank = static_cast<size_t>(c.kv_lora_rank);
  const size_t qa = rank + static_cast<size_t>(c.qk_rope_head_dim);
  const auto d2d = cudaMemcpyDeviceToDevice;
  // The group's queries: each rank holds its TP heads and every rank's tokens are needed by all;
  // the gather's [N, T, H, qa] regrouped to [T, N * H, qa] (rank r's heads at r * H).
  group.all_gather(ws.q_absorbed, ws.dcp_q_gathered, T * H * qa * 2, stream);
  for (size_t r = 0; r < N; ++r) {
    TACHYON_CUDA_CHECK(cudaMemcpy2DAsync(ws.dcp_q_group + r * H * qa, N * H * qa * 2, ws.dcp_q_gathered + r * T * H * qa,
                                         H * qa * 2, H * qa * 2, T, d2d, stream));
  }
  attend(ws.dcp_attn_group, ws.dcp_q_group, static_cast<int32_t>(N * H), ws.dcp_lse_group, step, cache);
  // ONE all_to_all_v sends each rank only the heads it restores: the run for rank r holds this
  // rank's partials of r's heads, [T, H, rank] and [T, H]; every rank receives the group's
  // partials of its own heads in rank order (1/N of a gather's bytes).
  for (size_t r = 0; r < N; ++r) {
    TACHYON_CUDA_CHECK(cudaMemcpy2DAsync(ws.dcp_send_out + r * T * H * rank, H * rank * 2,
                                         ws.dcp_attn_group + r * H * rank, N * H * rank * 2, H * rank * 2, T, d2d,
                                         stream));
    TACHYON_CUDA_CHECK(cudaMemcpy2DAsync(ws.dcp_send_lse + r * T * H, H * 4, ws.dcp_lse_group + r * H, N * H * 4, H * 4,
                                         T, d2d, stream));
  }
  const std::vector<size_t> out_counts(N, T * H * rank * 2), lse_counts(N, T * H * 4);
  const dist::AllToAllItem items[] = {
      {ws.dcp_send_out, out_counts, ws.dcp_recv_out, out_counts},
      {ws.dcp_send_lse, lse_counts, ws.dcp_recv_lse, lse_counts},
  };
  group.all_to_all_v(items, stream);
  kc::dcp_merge_partials(ws.attn_latent, ws.dcp_recv_out, ws.dcp_recv_lse, static_cast<int32_t>(N),
                         static_cast<int64_t>(T * H), static_cast<int32_t>(rank), stream);
}

}  // namespace tachyon::model::gpu
