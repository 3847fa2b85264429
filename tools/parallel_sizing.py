#!/usr/bin/env python3
"""Per-rank sizing of DeepSeek-V3, DeepSeek-V3.2 and GLM-5 on 8 GPUs under TP8, DP8+EP8 and
TP2xDP4+EP8: weight bytes and KV bytes per token per rank, KV tokens that fit, and the bytes
each rank sends per decode token. Derived figures (no run): docs/parallelism.md's sizing table
is this script's output.

The shapes come from src/tachyon/model/model_presets.cpp's real-shape presets (parsed: every
`c.field = value;` up to the preset's push_back, or up to glm5_reduced_shape()'s return), which
keep the real per-layer shapes but only 4 layers and 64 experts; FULL_SIZE below puts back the
published layer counts and expert counts. A config.json (HF names) can be given instead:
    tools/parallel_sizing.py                      # the three models, markdown tables
    tools/parallel_sizing.py --config config.json # one HF config
`--num-blocks / rank` is what `tachyon serve --num-blocks` takes for that memory: the flag counts
one rank's blocks, and under --dp every replica gets that many (one KV pool per replica), so the
layout holds `KV tokens, all replicas`.
Assumptions (printed with the tables): H200 of 141e9 bytes, 90% of it for weights + KV (the
rest: activations, workspace, CUDA graphs); FP8 weights are E4M3 with an f32 scale per 128x128
block (norms, router and biases stay bf16/f32); the KV cache is the MLA latent [512 | rope 64]
per token and layer (bf16: 1152 bytes; FP8: 656, FlashMLA's layout of 512 E4M3 + 4 f32 scales +
64 bf16 rope) plus, for DSA, the indexer key (128 values: 256 bytes bf16, 132 FP8); the MTP
module is not counted (DeepSeek's 671B excludes it).
"""
import argparse
import json
import math
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRESETS = REPO / "src/tachyon/model/model_presets.cpp"
GPU_BYTES = 141e9
MEMORY_SHARE = 0.90
RANKS = 8
BATCH = 256  # sequences decoding together over the 8 GPUs, for the per-step column
BLOCK_SIZE = 16  # tokens per KV block (tachyon serve's default --block-size), for the --num-blocks column

# (preset or shape function, display name, published sizes the reduced presets cut down)
MODELS = [
    ("deepseek-v3-reduced", "DeepSeek-V3", {"num_hidden_layers": 61, "num_experts": 256, "first_k_dense_replace": 3}),
    ("deepseek-v32-reduced", "DeepSeek-V3.2", {"num_hidden_layers": 61, "num_experts": 256, "first_k_dense_replace": 3}),
    ("glm5_reduced_shape", "GLM-5", {"num_hidden_layers": 78, "num_experts": 256, "first_k_dense_replace": 3}),
]

HF_NAMES = {"n_routed_experts": "num_experts", "num_local_experts": "num_experts"}


def preset_shapes():
    """{preset name or shape function: {field: value}} from model_presets.cpp."""
    text = PRESETS.read_text()
    shapes, current = {}, {}
    token = re.compile(r'(ModelConfig c;|c = ModelConfig\{\};)|c\.([a-z_]+) = ([^;]+);|presets\.push_back\(\{"([^"]+)"'
                       r'|^ModelConfig ([a-z0-9_]+)\(\)|(return c;)', re.M)
    function = None
    for m in token.finditer(text):
        reset, field, value, preset, fn, ret = m.groups()
        if fn:
            function = fn
        elif reset:
            current = {}
        elif field:
            value = value.strip()
            try:
                current[field] = float(value) if "." in value or "e" in value.lower() else int(value)
            except ValueError:
                current[field] = value  # enums, bools: not sizes
        elif preset:
            shapes[preset] = dict(current)
        elif ret and function:
            shapes[function] = dict(current)
            function = None
    return shapes


def weights(c, fp8):
    """Bytes of each part of the whole model (main layers, no MTP)."""
    h, layers, dense_layers = c["hidden_size"], c["num_hidden_layers"], c["first_k_dense_replace"]
    heads, qk = c["num_attention_heads"], c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    linear = 1 + 4 / (128 * 128) if fp8 else 2  # bytes per GEMM weight (FP8: + its block scale)
    q_lora = c.get("q_lora_rank", 0)
    indexer = 0
    if c.get("index_n_heads"):
        indexer = q_lora * c["index_n_heads"] * c["index_head_dim"] + h * c["index_head_dim"] + h * c["index_n_heads"]
    expert = 3 * h * c["moe_intermediate_size"]
    moe_layers = layers - dense_layers
    return {
        # split over TP
        "embed_head": 2 * c["vocab_size"] * h * 2,  # bf16 in FP8 checkpoints too
        "q_up": layers * (q_lora if q_lora else h) * heads * qk * linear,  # q_b_proj (or q_proj)
        "kv_up_o": layers * (c["kv_lora_rank"] * heads * (c["qk_nope_head_dim"] + c["v_head_dim"])
                             + heads * c["v_head_dim"] * h) * linear,  # kv_b_proj, o_proj
        "dense_mlp": dense_layers * 3 * h * c["intermediate_size"] * linear,
        # whole on every rank: the q LoRA down, the latent's projection, the indexer, the router
        "q_down": layers * h * q_lora * linear,
        "latent": layers * h * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * linear,
        "indexer": layers * indexer * linear,
        "router": moe_layers * c["num_experts"] * h * 4,
        # experts
        "routed": moe_layers * c["num_experts"] * expert * linear,
        "shared": moe_layers * c.get("n_shared_experts", 0) * expert * linear,
    }


def per_rank_weights(w, tp, ep):
    """One rank's weight bytes: heads, dense MLP and vocab split over tp (what tp_shard.h splits);
    routed experts over ep ranks whole with the shared expert whole (ep == 0: every expert and
    the shared one split over tp, as TP does)."""
    split = (w["embed_head"] + w["q_up"] + w["kv_up_o"] + w["dense_mlp"]) / tp
    whole = w["q_down"] + w["latent"] + w["indexer"] + w["router"]
    experts = w["routed"] / ep + w["shared"] if ep else (w["routed"] + w["shared"]) / tp
    return split + whole + experts


def kv_per_token(c, fp8):
    """KV bytes of one token on a rank that holds it: every layer's latent (+ indexer key)."""
    latent = 656 if fp8 else 2 * (c["kv_lora_rank"] + c["qk_rope_head_dim"])
    index = (c["index_head_dim"] + 4 if fp8 else 2 * c["index_head_dim"]) if c.get("index_n_heads") else 0
    return c["num_hidden_layers"] * (latent + index)


def expected_owner_ranks(c, ep):
    """Ranks a token's top-k experts live on (its dispatch fan-out) over ep ranks of E / ep experts.
    Group-limited routing with n_group == ep keeps a token within topk_group groups = ranks; the
    expectation for unrestricted choice is ep * (1 - C(E - E/ep, k) / C(E, k))."""
    e, k = c["num_experts"], c["num_experts_per_tok"]
    free = ep * (1 - math.comb(e - e // ep, k) / math.comb(e, k))
    if c.get("n_group", 1) == ep and c.get("topk_group", ep) < ep:
        return min(free, c["topk_group"])
    return free


def comm_per_token(c, tp, dp):
    """Bytes one rank sends per decode token of its batch (bf16 activations). TP all-reduce of
    [hidden] as a ring: 2 (tp - 1) / tp x the payload; EP dispatch: the bf16 row to each remote
    owner rank; EP return: one bf16 row per (token, expert) on a remote rank (ours: per expert,
    so the combine adds in expert order), against one pre-summed row per remote owner (DeepEP's)."""
    h, layers, moe_layers = c["hidden_size"], c["num_hidden_layers"], c["num_hidden_layers"] - c["first_k_dense_replace"]
    row = 2 * h
    ring = 2 * (tp - 1) / tp * row if tp > 1 else 0
    ep = tp * dp
    out = {"tp_allreduce": 0.0, "dispatch": 0.0, "combine_ours": 0.0, "combine_presummed": 0.0}
    if dp == 1:  # TP over all ranks: two all-reduces per layer, the experts split by intermediate
        out["tp_allreduce"] = (2 * layers + 1) * ring
        return out
    # DP x TP: attention's and dense layers' all-reduces within the TP group; a MoE layer's
    # tokens are sliced over the TP group (each TP rank sources 1/tp of them) and regathered.
    out["tp_allreduce"] = (layers + c["first_k_dense_replace"] + 1) * ring + moe_layers * (tp - 1) / tp * row
    owners = expected_owner_ranks(c, ep)
    remote_owners = owners * (ep - 1) / ep
    remote_experts = c["num_experts_per_tok"] * (ep - 1) / ep
    per_source = 1 / tp  # each token is sourced by one TP rank of its replica
    out["dispatch"] = moe_layers * remote_owners * row * per_source
    out["combine_ours"] = moe_layers * remote_experts * row * per_source
    out["combine_presummed"] = moe_layers * remote_owners * row * per_source
    return out


def table(name, c):
    lines = [f"**{name}** ({c['num_hidden_layers']} layers, hidden {c['hidden_size']}, {c['num_experts']} experts "
             f"top-{c['num_experts_per_tok']}, first {c['first_k_dense_replace']} dense"
             + (f", DSA {c['index_n_heads']} x {c['index_head_dim']}" if c.get("index_n_heads") else "") + ")", "",
             "| layout | dtype | weights / rank | KV / token | KV tokens / rank | --num-blocks / rank "
             f"({BLOCK_SIZE}-token blocks) | KV tokens, all replicas "
             "| sent per token of the rank's batch: TP | EP dispatch | EP return (ours / pre-summed) "
             f"| sent per rank, one step of {BATCH} sequences |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for fp8 in (True, False):
        w = weights(c, fp8)
        for label, tp, dp in (("TP8", 8, 1), ("DP8 + EP8", 1, 8), ("TP2 x DP4 + EP8", 2, 4)):
            per_rank = per_rank_weights(w, tp, 0 if dp == 1 else tp * dp)
            kv = kv_per_token(c, fp8)
            budget = MEMORY_SHARE * GPU_BYTES - per_rank
            tokens = max(budget, 0) / kv
            comm = comm_per_token(c, tp, dp)
            lines.append(
                f"| {label} | {'FP8' if fp8 else 'bf16'} | {per_rank / 1e9:.1f} GB | {kv / 1e3:.1f} KB | "
                + (f"{tokens / 1e3:,.0f}K" if budget > 0 else "does not fit") + " | "
                + (f"{math.floor(tokens / BLOCK_SIZE):,}" if budget > 0 else "-") + " | "
                + (f"{tokens * dp / 1e3:,.0f}K" if budget > 0 else "-") + " | "
                f"{comm['tp_allreduce'] / 1e3:.0f} KB | {comm['dispatch'] / 1e3:.0f} KB | "
                f"{comm['combine_ours'] / 1e3:.0f} / {comm['combine_presummed'] / 1e3:.0f} KB | "
                f"{BATCH / dp * (comm['tp_allreduce'] + comm['dispatch'] + comm['combine_ours']) / 1e6:.0f} MB |")
    return "\n".join(lines)


def totals(c):
    return {("FP8" if fp8 else "bf16"): sum(weights(c, fp8).values()) / 1e9 for fp8 in (True, False)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, help="an HF config.json instead of the presets")
    args = parser.parse_args()
    if args.config:
        raw = json.loads(args.config.read_text())
        c = {HF_NAMES.get(k, k): v for k, v in raw.items()}
        c.setdefault("first_k_dense_replace", 0)
        models = [(args.config.parent.name or "model", c)]
    else:
        shapes = preset_shapes()
        models = [(name, {**shapes[preset], **full}) for preset, name, full in MODELS]
    for name, c in models:
        t = totals(c)
        print(table(name, c))
        print(f"\nWhole model: {t['FP8']:.0f} GB in FP8, {t['bf16']:.0f} GB in bf16 (main layers, no MTP).\n")


if __name__ == "__main__":
    main()
