"""A DeepSeek-V3 model with one multi-token-prediction (MTP) module, in plain torch (1.13 and 2.x),
for tools/train_mtp_canary.py and tools/check_mtp_canary.py. transformers has no MTP module, so
the model is written here, as tachyon's CPU reference computes it (src/tachyon/model/mla.h, moe.h,
mtp.h), and saved with DeepSeek-V3's config fields and tensor names (model_weights.cpp).

- MLA: q = q_b_proj(q_a_layernorm(q_a_proj(x))); [c_kv | k_pe] = kv_a_proj_with_mqa(x);
  [k_nope | v] = kv_b_proj(kv_a_layernorm(c_kv)); rope on q_pe and the one shared k_pe after
  de-interleaving their pairs (rope_interleave true, DeepSeek-V3's default); scale qk_head_dim^-0.5.
- MoE (layers >= first_k_dense_replace): sigmoid scores; the choice adds e_score_correction_bias;
  the topk_group groups with the best sum of their 2 largest choices are kept (others 0.0); the k
  largest choices are the experts, weighted by their ORIGINAL scores / (sum + 1e-20) *
  routed_scaling_factor; plus the shared expert. Training runs every expert on every token and
  zeroes the unchosen ones' weight (the same sum; no gather, a fixed shape). The bias is not
  trained by gradient: DeepSeek-V3's auxiliary-loss-free balancing moves it after each step
  (update_routing_bias).
- MTP module (layer num_hidden_layers): row t reads the main model's hidden state at t BEFORE the
  final norm (what tachyon's drafter feeds it, model/mtp.h) and token t + 1, and predicts token t + 2:
  x = eh_proj([enorm(embed(token_{t+1})) | hnorm(h_t)]) (embedding first), one MoE decoder layer
  roped at t + 1, logits = shared_head.head(shared_head.norm(h')). It shares the main embedding and
  LM head (as in the paper); the checkpoint holds copies under its own names, as DeepSeek-V3's does.
"""
import json
import math
import struct

import torch
import torch.nn.functional as F
from torch import nn

LATENT_NORM_EPS = 1e-6  # q_a_layernorm / kv_a_layernorm: RMSNorm's default whatever rms_norm_eps says


def config_json(a, vocab_size, eos_id):
    """Every field tachyon's loader (model_config.cpp) and transformers' DeepseekV3Config read."""
    heads = a["heads"]
    return {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "vocab_size": vocab_size, "hidden_size": a["hidden"], "intermediate_size": a["intermediate"],
        "moe_intermediate_size": a["moe_intermediate"], "num_hidden_layers": a["layers"],
        "num_attention_heads": heads, "num_key_value_heads": heads,
        "q_lora_rank": a["q_lora_rank"], "kv_lora_rank": a["kv_lora_rank"],
        "qk_nope_head_dim": a["qk_nope"], "qk_rope_head_dim": a["qk_rope"], "v_head_dim": a["v_head"],
        "head_dim": a["qk_rope"], "rope_interleave": True, "rope_theta": 10000.0, "rope_scaling": None,
        "n_routed_experts": a["experts"], "num_experts_per_tok": a["top_k"], "n_shared_experts": 1,
        "n_group": a["n_group"], "topk_group": a["topk_group"], "first_k_dense_replace": a["dense_layers"],
        "routed_scaling_factor": a["routed_scaling"], "norm_topk_prob": True, "scoring_func": "sigmoid",
        "topk_method": "noaux_tc", "num_nextn_predict_layers": 1,
        "max_position_embeddings": a["max_positions"], "rms_norm_eps": 1e-6, "hidden_act": "silu",
        "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0,
        "initializer_range": 0.02, "use_cache": True,
        "bos_token_id": eos_id, "eos_token_id": eos_id, "pad_token_id": eos_id, "torch_dtype": "bfloat16",
    }


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope(x, cos, sin):
    """x: [b, heads, n, rope]; pairs (x0, x1), (x2, x3) ... de-interleaved to [x0, x2 .. | x1, x3 ..],
    then rotate-half rope (transformers' apply_rotary_pos_emb_interleave; the order stays so)."""
    b, h, n, d = x.shape
    x = x.reshape(b, h, n, d // 2, 2).transpose(-1, -2).reshape(b, h, n, d)
    half = torch.cat((-x[..., d // 2:], x[..., :d // 2]), dim=-1)
    return (x * cos + half * sin).to(x.dtype)


def attention(q, k, v, mask):
    """q, k: [b, heads, n, qk]; v: [b, heads, n, vd]; mask: None (causal) or [b, 1, n, n] bool (True
    attends). Softmax scale qk^-0.5 (no YaRN here)."""
    if hasattr(F, "scaled_dot_product_attention"):
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    n = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
    if mask is None:
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(-1).to(v.dtype) @ v


class Mla(nn.Module):
    def __init__(self, a):
        super().__init__()
        h, self.heads = a["hidden"], a["heads"]
        self.nope, self.rope_dim, self.v_dim, self.latent = a["qk_nope"], a["qk_rope"], a["v_head"], a["kv_lora_rank"]
        qk = self.nope + self.rope_dim
        self.q_a_proj = nn.Linear(h, a["q_lora_rank"], bias=False)
        self.q_a_layernorm = RMSNorm(a["q_lora_rank"], LATENT_NORM_EPS)
        self.q_b_proj = nn.Linear(a["q_lora_rank"], self.heads * qk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, self.latent + self.rope_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(self.latent, LATENT_NORM_EPS)
        self.kv_b_proj = nn.Linear(self.latent, self.heads * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.heads * self.v_dim, h, bias=False)

    def forward(self, x, cos, sin, mask):
        b, n, _ = x.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(b, n, self.heads, -1).transpose(1, 2)
        q_nope, q_pe = q.split([self.nope, self.rope_dim], dim=-1)
        c_kv, k_pe = self.kv_a_proj_with_mqa(x).split([self.latent, self.rope_dim], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(c_kv)).view(b, n, self.heads, -1).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.v_dim], dim=-1)
        q_pe = rope(q_pe, cos, sin)
        k_pe = rope(k_pe.view(b, 1, n, self.rope_dim), cos, sin).expand(b, self.heads, n, self.rope_dim)
        q = torch.cat((q_nope, q_pe), dim=-1)
        k = torch.cat((k_nope, k_pe), dim=-1)
        out = attention(q, k, v, mask)  # [b, heads, n, v_dim]
        return self.o_proj(out.transpose(1, 2).reshape(b, n, self.heads * self.v_dim))


class Mlp(nn.Module):
    def __init__(self, h, inter):
        super().__init__()
        self.gate_proj = nn.Linear(h, inter, bias=False)
        self.up_proj = nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Moe(nn.Module):
    def __init__(self, a):
        super().__init__()
        h, e, i = a["hidden"], a["experts"], a["moe_intermediate"]
        self.top_k, self.n_group, self.topk_group = a["top_k"], a["n_group"], a["topk_group"]
        self.scaling = a["routed_scaling"]
        self.gate_weight = nn.Parameter(torch.randn(e, h) * 0.02)  # mlp.gate.weight
        self.register_buffer("e_score_correction_bias", torch.zeros(e))  # f32, moved by update_routing_bias
        self.gate_proj = nn.Parameter(torch.randn(e, i, h) * 0.02)  # experts.{e}.gate_proj.weight stacked
        self.up_proj = nn.Parameter(torch.randn(e, i, h) * 0.02)
        self.down_proj = nn.Parameter(torch.randn(e, h, i) * 0.02)
        self.shared_experts = Mlp(h, i)
        self.last_load = None  # [experts] tokens routed to each expert in the last forward (training)

    def route(self, x):
        """x: [N, hidden] -> (weights [N, E] zero off the chosen experts, chosen [N, top_k])."""
        device_type = x.device.type
        with torch.autocast(device_type=device_type, enabled=False):
            scores = F.linear(x.float(), self.gate_weight.float()).sigmoid()  # [N, E]
        n, e = scores.shape
        choice = scores + self.e_score_correction_bias
        grouped = choice.view(n, self.n_group, e // self.n_group)
        group_scores = grouped.topk(2, dim=-1).values.sum(-1)  # [N, n_group]
        kept = torch.zeros_like(group_scores).scatter(1, group_scores.topk(self.topk_group, dim=-1).indices, 1.0)
        keep = kept.unsqueeze(-1).expand(n, self.n_group, e // self.n_group).reshape(n, e).bool()
        chosen = choice.masked_fill(~keep, 0.0).topk(self.top_k, dim=-1).indices  # [N, top_k]
        w = scores.gather(1, chosen)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * self.scaling
        return torch.zeros_like(scores).scatter(1, chosen, w), chosen

    def forward(self, x):
        shape = x.shape
        t = x.reshape(-1, shape[-1])
        weights, chosen = self.route(t)
        if self.training:
            # scatter_add, not bincount: bincount reads its input's max back to the host (a sync per layer).
            ones = torch.ones(chosen.numel(), device=chosen.device)
            self.last_load = torch.zeros(weights.shape[1], device=chosen.device).scatter_add_(0, chosen.flatten(), ones)
        gate = torch.einsum("nh,eih->nei", t, self.gate_proj.to(t.dtype))
        up = torch.einsum("nh,eih->nei", t, self.up_proj.to(t.dtype))
        act = F.silu(gate) * up * weights.to(t.dtype).unsqueeze(-1)  # unchosen experts weigh 0
        routed = torch.einsum("nei,ehi->nh", act, self.down_proj.to(t.dtype))
        return (routed + self.shared_experts(t)).view(shape)


class DecoderLayer(nn.Module):
    def __init__(self, a, moe):
        super().__init__()
        self.input_layernorm = RMSNorm(a["hidden"], 1e-6)
        self.self_attn = Mla(a)
        self.post_attention_layernorm = RMSNorm(a["hidden"], 1e-6)
        self.mlp = Moe(a) if moe else Mlp(a["hidden"], a["intermediate"])

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class MtpModule(nn.Module):
    def __init__(self, a):
        super().__init__()
        h = a["hidden"]
        self.enorm = RMSNorm(h, 1e-6)
        self.hnorm = RMSNorm(h, 1e-6)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        self.layer = DecoderLayer(a, moe=True)  # DeepSeek-V3's MTP layer is a MoE layer
        self.shared_head_norm = RMSNorm(h, 1e-6)


class DeepseekV3Mtp(nn.Module):
    def __init__(self, a, vocab_size):
        super().__init__()
        self.a = a
        h = a["hidden"]
        self.embed_tokens = nn.Embedding(vocab_size, h)
        self.layers = nn.ModuleList([DecoderLayer(a, moe=l >= a["dense_layers"]) for l in range(a["layers"])])
        self.norm = RMSNorm(h, 1e-6)
        self.lm_head = nn.Linear(h, vocab_size, bias=False)
        self.mtp = MtpModule(a)
        rope_dim = a["qk_rope"]
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rope_dim, 2, dtype=torch.int64).float() / rope_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)

    def rope_tables(self, positions, dtype):
        """positions: [b, n] -> cos, sin [b, 1, n, rope] (computed in f32, as transformers does)."""
        freqs = positions.float().unsqueeze(-1) * self.inv_freq  # [b, n, rope / 2]
        emb = torch.cat((freqs, freqs), dim=-1).unsqueeze(1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, ids, positions=None, mask=None):
        """ids: [b, n] -> (hidden [b, n, h] before the final norm, logits [b, n, vocab]).
        positions [b, n] and mask [b, 1, n, n] only for left-padded batches (generation)."""
        if positions is None:
            positions = torch.arange(ids.shape[1], device=ids.device).expand(ids.shape)
        x = self.embed_tokens(ids)
        cos, sin = self.rope_tables(positions, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return x, self.lm_head(self.norm(x))

    def mtp_forward(self, hidden, next_ids, positions, mask=None):
        """hidden: [b, n, h] main hidden states at t (before the final norm); next_ids: [b, n] tokens
        t + 1; positions: [b, n] those tokens' positions -> (h' [b, n, h], logits for token t + 2)."""
        m = self.mtp
        x = m.eh_proj(torch.cat((m.enorm(self.embed_tokens(next_ids)), m.hnorm(hidden)), dim=-1))
        cos, sin = self.rope_tables(positions, x.dtype)
        x = m.layer(x, cos, sin, mask)
        return x, self.lm_head(m.shared_head_norm(x))

    def moe_layers(self):
        return [l.mlp for l in list(self.layers) + [self.mtp.layer] if isinstance(l.mlp, Moe)]

    @torch.no_grad()
    def update_routing_bias(self, speed):
        """DeepSeek-V3's auxiliary-loss-free balancing: each expert's bias moves by `speed` towards
        an equal load (down when it got more than the mean of the last step's tokens, up when less)."""
        for moe in self.moe_layers():
            if moe.last_load is not None:
                moe.e_score_correction_bias += speed * torch.sign(moe.last_load.mean() - moe.last_load)

    def state_for_checkpoint(self):
        """{DeepSeek-V3 tensor name: tensor}: main model, then the MTP module at layer num_hidden_layers."""
        out = {"model.embed_tokens.weight": self.embed_tokens.weight,
               "model.norm.weight": self.norm.weight, "lm_head.weight": self.lm_head.weight}
        for l, layer in enumerate(self.layers):
            out.update(layer_tensors(f"model.layers.{l}.", layer))
        p = f"model.layers.{len(self.layers)}."
        m = self.mtp
        out.update({p + "enorm.weight": m.enorm.weight, p + "hnorm.weight": m.hnorm.weight,
                    p + "eh_proj.weight": m.eh_proj.weight, p + "embed_tokens.weight": self.embed_tokens.weight,
                    p + "shared_head.norm.weight": m.shared_head_norm.weight,
                    p + "shared_head.head.weight": self.lm_head.weight})
        out.update(layer_tensors(p, m.layer))
        return out

    def load_checkpoint_tensors(self, tensors):
        """The inverse of state_for_checkpoint (the copies of embed / head are checked equal)."""
        own = self.state_for_checkpoint()
        assert set(own) == set(tensors), f"tensor names differ: {sorted(set(own) ^ set(tensors))[:5]}"
        with torch.no_grad():
            for name, t in own.items():
                t.copy_(tensors[name].to(t.dtype).view(t.shape))
        p = f"model.layers.{len(self.layers)}."
        for copy, main in (("embed_tokens.weight", "model.embed_tokens.weight"),
                           ("shared_head.head.weight", "lm_head.weight")):
            assert torch.equal(tensors[p + copy], tensors[main]), f"{p + copy} differs from {main}"


def layer_tensors(prefix, layer):
    a = layer.self_attn
    out = {prefix + "input_layernorm.weight": layer.input_layernorm.weight,
           prefix + "post_attention_layernorm.weight": layer.post_attention_layernorm.weight}
    for name in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
        out[f"{prefix}self_attn.{name}.weight"] = getattr(a, name).weight
    out[prefix + "self_attn.q_a_layernorm.weight"] = a.q_a_layernorm.weight
    out[prefix + "self_attn.kv_a_layernorm.weight"] = a.kv_a_layernorm.weight
    mlp = layer.mlp
    if isinstance(mlp, Mlp):
        for name in ("gate_proj", "up_proj", "down_proj"):
            out[f"{prefix}mlp.{name}.weight"] = getattr(mlp, name).weight
        return out
    out[prefix + "mlp.gate.weight"] = mlp.gate_weight
    out[prefix + "mlp.gate.e_score_correction_bias"] = mlp.e_score_correction_bias
    for name in ("gate_proj", "up_proj", "down_proj"):
        out[f"{prefix}mlp.shared_experts.{name}.weight"] = getattr(mlp.shared_experts, name).weight
        for e in range(mlp.gate_proj.shape[0]):
            out[f"{prefix}mlp.experts.{e}.{name}.weight"] = getattr(mlp, name)[e]
    return out


# The safetensors format: 8-byte little-endian header length, a JSON header {name: {dtype, shape,
# data_offsets}}, then the raw bytes. Written and read here too, so the scripts run without the package.
DTYPES = {torch.bfloat16: "BF16", torch.float32: "F32"}


def save_safetensors(path, tensors):
    """tensors: {name: tensor} in the dtype each is to be stored in. The `safetensors` package when
    importable, else the format written here."""
    try:
        from safetensors.torch import save_file
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, path, metadata={"format": "pt"})
        return
    except ImportError:
        pass
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        raw = t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32).numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def load_safetensors(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        begin, end = spec["data_offsets"]
        dtype = {"BF16": torch.bfloat16, "F32": torch.float32}[spec["dtype"]]
        out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype).view(spec["shape"]).clone()
    return out


def checkpoint_tensors(model):
    """What model.safetensors holds: bf16, except the routing biases in f32 (as DeepSeek-V3 stores
    them: a bias is added to scores in [0, 1] to choose experts, and bf16 would round it coarsely)."""
    return {name: (t.detach().float() if name.endswith("e_score_correction_bias") else t.detach().to(torch.bfloat16))
            .cpu().contiguous().clone() for name, t in model.state_for_checkpoint().items()}
