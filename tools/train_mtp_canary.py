#!/usr/bin/env python3
"""Trains the MTP canary: a ~6M-parameter DeepSeek-V3 (MLA, a dense layer then MoE layers with a
shared expert and sigmoid group-limited routing) with one multi-token-prediction module, on the
canary task (tools/make_canary_task.py), for real MTP acceptance in speculative decoding.

Plain torch (tools/mtp_canary_model.py: transformers has no MTP module), torch 1.13 or 2.x, on the
GPU when there is one (bf16 autocast) else the CPU (f32; smoke runs). The data is
tools/train_canary.py's (its few-shot blocks, schedule and tokenizer files), so the model learns the
0-shot and k-shot prompts of `tachyon eval` as the canary does. The loss is DeepSeek-V3's:
next-token loss + --mtp-weight x the MTP module's loss (row t reads the main hidden state at t,
before the final norm, and token t + 1, and predicts token t + 2: what tachyon's drafter runs,
src/tachyon/model/mtp.h). Writes a Hugging Face folder that `tachyon serve` loads: config.json
(deepseek_v3, num_nextn_predict_layers 1), model.safetensors (bf16; routing biases f32),
generation_config.json, the tokenizer files of assets/canary, and train_log.json with the
accuracy (greedy, 0-shot and 3-shot, weights as saved), the MTP module's held-out loss and top-1,
and the k=1 acceptance length its drafts would get on the 3-shot completions.

  python3 tools/train_mtp_canary.py --out assets/canary-mtp --time-budget 210   # ~4 minutes on an H200
  python3 tools/train_mtp_canary.py --out /tmp/smoke --smoke                     # seconds on a CPU

Tokenization: HF `tokenizers` when importable, else tools/canary_tokens.py's plain-Python BPE
(same ids on the task's ASCII text); the script prints which.
"""
import argparse
import json
import os
import random
import re
import shutil
import sys
import time

import torch
import torch.nn.functional as F

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import make_canary_task  # noqa: E402
from canary_tokens import CanaryTokens  # noqa: E402
from mtp_canary_model import DeepseekV3Mtp, checkpoint_tensors, config_json, save_safetensors  # noqa: E402
from train_canary import ASSETS, EOS, gold, lr_at, make_blocks, progress_at, prompt  # noqa: E402

SHAPE_KEYS = ("hidden", "layers", "dense_layers", "heads", "q_lora_rank", "kv_lora_rank", "qk_nope", "qk_rope",
              "v_head", "intermediate", "moe_intermediate", "experts", "top_k", "n_group", "topk_group",
              "routed_scaling", "max_positions")
# --smoke: a tiny shape and a few dozen steps, for checking the pipeline (and tachyon's loader) on a CPU.
SMOKE = {"hidden": 64, "layers": 2, "heads": 2, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope": 16, "qk_rope": 8,
         "v_head": 16, "intermediate": 128, "moe_intermediate": 32, "steps": 40, "warmup": 5, "batch": 4,
         "block": 256, "train": 3000, "eval": 8}


def train_losses(model, x, y):
    """(main loss, MTP loss) of blocks x, labels y [b, T]. Main: row t predicts y[t + 1]. MTP: row t
    reads main hidden t and token x[t + 1] (roped at t + 1) and predicts y[t + 2]."""
    t = x.shape[1]
    hidden, logits = model(x)
    main = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), y[:, 1:].flatten(), ignore_index=-100)
    positions = torch.arange(1, t - 1, device=x.device).expand(x.shape[0], t - 2)
    _, mtp_logits = model.mtp_forward(hidden[:, :-2], x[:, 1:-1], positions)
    mtp = F.cross_entropy(mtp_logits.flatten(0, 1).float(), y[:, 2:].flatten(), ignore_index=-100)
    return main, mtp


def ends_completion(ids, eos_id, sep):
    return ids[-1:] == [eos_id] or (len(ids) >= len(sep) and ids[-len(sep):] == sep)


@torch.no_grad()
def greedy(model, prompts, eos_id, sep, device, max_new=128, batch=64):
    """Greedy completions (token ids) of the prompts (token id lists), cut after the first blank
    line or <|endoftext|> (where `tachyon eval` stops). Left-padded batches, no KV cache: each step
    recomputes the batch (positions from the real tokens, padding masked)."""
    out = []
    for start in range(0, len(prompts), batch):
        part = prompts[start:start + batch]
        width = max(map(len, part))
        ids = torch.tensor([[eos_id] * (width - len(p)) + p for p in part], device=device)
        valid = torch.tensor([[False] * (width - len(p)) + [True] * len(p) for p in part], device=device)
        done = [False] * len(part)
        completions = [[] for _ in part]
        for _ in range(max_new):
            n = ids.shape[1]
            positions = (valid.long().cumsum(-1) - 1).clamp(min=0)
            causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
            eye = torch.eye(n, dtype=torch.bool, device=device)
            mask = ((causal & valid[:, None, :]) | eye).unsqueeze(1)  # padding rows see themselves: no NaN
            _, logits = model(ids, positions, mask)
            nxt = logits[:, -1].argmax(-1)
            for r, token in enumerate(nxt.tolist()):
                if not done[r]:
                    completions[r].append(token)
                    done[r] = ends_completion(completions[r], eos_id, sep)
            if all(done):
                break
            ids = torch.cat((ids, nxt[:, None]), dim=1)
            valid = torch.cat((valid, torch.ones_like(valid[:, :1])), dim=1)
        out.extend(completions)
    return out


def score(records, texts):
    """Exact match of the first "#### N" of each completion with the gold answer (train_canary.py's rule)."""
    correct = 0
    for r, text in zip(records, texts):
        match = re.search(r"#### (\-?[0-9\.\,]+)", text.split("\n\n")[0])
        correct += match is not None and match.group(1).rstrip(".") == gold(r)
    return correct / len(records)


@torch.no_grad()
def mtp_argmax(model, ids, device):
    """Row j of one sequence -> the MTP module's greedy token for position j + 2 (reading token j + 1)."""
    x = torch.tensor([ids], device=device)
    hidden, _ = model(x)
    positions = torch.arange(1, len(ids), device=device)[None]
    _, logits = model.mtp_forward(hidden[:, :-1], x[:, 1:], positions)
    return logits[0].argmax(-1).tolist()


def acceptance_k1(drafts, ids, first, max_end=None):
    """The k = 1 loop of tachyon's MTP drafter over a finished greedy sequence: the token at `first`
    comes from the prompt's step; after each step whose last sampled token is at E, the draft for
    E + 1 is drafts[E - 1]; accepted, the step also samples E + 2. A step that could pass max_end
    (the prompt + max_tokens) with its extra token gets no draft, as the scheduler plans it.
    Returns (drafts, accepted)."""
    end, e, proposed, accepted = len(ids), first, 0, 0
    max_end = max_end if max_end is not None else end + 1
    while e + 1 < end:
        if e + 2 >= max_end:
            e += 1
            continue
        proposed += 1
        if drafts[e - 1] == ids[e + 1]:
            accepted += 1
            e += 2
        else:
            e += 1
    return proposed, accepted


@torch.no_grad()
def heldout_mtp(model, tok, records, eos_id, device):
    """Teacher-forced on the 0-shot texts "Question: q\\nAnswer: a<eos>": the MTP module's loss and
    top-1 (token t + 2) and, for reference, the main model's top-1 (token t + 1)."""
    loss, mtp_hits, main_hits, count = 0.0, 0, 0, 0
    for r in records:
        ids = tok.encode(f"{prompt(r)} {r['answer']}") + [eos_id]
        x = torch.tensor([ids], device=device)
        hidden, logits = model(x)
        positions = torch.arange(1, len(ids) - 1, device=device)[None]
        _, mtp_logits = model.mtp_forward(hidden[:, :-2], x[:, 1:-1], positions)
        target = x[0, 2:]
        loss += F.cross_entropy(mtp_logits[0].float(), target, reduction="sum").item()
        mtp_hits += (mtp_logits[0].argmax(-1) == target).sum().item()
        main_hits += (logits[0, :-1].argmax(-1) == x[0, 1:]).sum().item() - (logits[0, 0].argmax() == x[0, 1]).item()
        count += len(target)
    return {"mtp_loss": loss / count, "mtp_top1": mtp_hits / count, "main_top1": main_hits / count}


def evaluate(model, tok, scored, shots, eos_id, device):
    """Greedy accuracy 0-shot and 3-shot, and the k = 1 MTP acceptance on the 3-shot completions."""
    sep = tok.encode("\n\n")
    result = {}
    for name, few in (("0shot", []), ("3shot", shots)):
        prefix = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in few)
        prompts = [tok.encode(prefix + prompt(r)) for r in scored]
        completions = greedy(model, prompts, eos_id, sep, device)
        result[f"accuracy_{name}"] = score(scored, [tok.decode(c) for c in completions])
        if name == "3shot":
            proposed = accepted = 0
            for p, c in zip(prompts, completions):
                ids = p + c
                d, a = acceptance_k1(mtp_argmax(model, ids, device), ids, len(p))
                proposed, accepted = proposed + d, accepted + a
            result["mtp_k1_acceptance_length_3shot"] = 1 + accepted / max(1, proposed)
        result[f"completions_{name}"] = [tok.decode(c) for c in completions[:3]]
    return result


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for the HF model")
    parser.add_argument("--smoke", action="store_true", help="tiny shape, 40 steps, CPU-sized (a pipeline check)")
    parser.add_argument("--seed", type=int, default=0, help="task seed and torch seed")
    parser.add_argument("--train", type=int, default=200000, help="train problems")
    parser.add_argument("--eval", type=int, default=200, help="test problems scored at the end")
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=32, help="blocks per step")
    parser.add_argument("--block", type=int, default=1024, help="tokens per block")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--time-budget", type=float, default=0,
                        help="seconds of training; the schedule ends when steps or this run out (0: steps only)")
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--mtp-weight", type=float, default=0.3, help="lambda of the MTP loss (DeepSeek-V3: 0.3)")
    parser.add_argument("--bias-speed", type=float, default=1e-3,
                        help="the routing bias step of auxiliary-loss-free balancing (DeepSeek-V3: 0.001)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=5, help="main decoder layers")
    parser.add_argument("--dense-layers", type=int, default=1, help="first_k_dense_replace")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--q-lora-rank", type=int, default=128)
    parser.add_argument("--kv-lora-rank", type=int, default=64)
    parser.add_argument("--qk-nope", type=int, default=32, help="qk_nope_head_dim")
    parser.add_argument("--qk-rope", type=int, default=32, help="qk_rope_head_dim")
    parser.add_argument("--v-head", type=int, default=64, help="v_head_dim (= qk_nope + qk_rope: flash attention on the GPU needs one head width)")
    parser.add_argument("--intermediate", type=int, default=768, help="the dense layers' MLP width")
    parser.add_argument("--moe-intermediate", type=int, default=112, help="each expert's (and the shared expert's) width")
    parser.add_argument("--experts", type=int, default=8, help="n_routed_experts")
    parser.add_argument("--top-k", type=int, default=2, help="num_experts_per_tok")
    parser.add_argument("--n-group", type=int, default=4)
    parser.add_argument("--topk-group", type=int, default=2)
    parser.add_argument("--routed-scaling", type=float, default=2.5, help="routed_scaling_factor")
    parser.add_argument("--max-positions", type=int, default=1024)
    parser.add_argument("--tokenizer", default=ASSETS, help="folder with tokenizer.json and tokenizer_config.json")
    args = parser.parse_args()
    if args.smoke:
        given = {a.lstrip("-").split("=")[0].replace("-", "_") for a in sys.argv[1:] if a.startswith("--")}
        for key, value in SMOKE.items():
            if key not in given:
                setattr(args, key, value)
    assert args.block <= args.max_positions
    return args


def main():
    args = parse_args()
    t_start = time.time()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    tok = CanaryTokens(args.tokenizer)
    print(f"tokenizer: {tok.which}")
    eos_id = tok.token_to_id(EOS)
    vocab_size = (tok.vocab_size() + 7) // 8 * 8
    test = make_canary_task.make_split(args.seed, "test", max(1000, args.eval + 3), set())
    train = make_canary_task.make_split(args.seed, "train", args.train, {r["question"] for r in test})
    problems = tok.encode_batch([f"{prompt(r)} {r['answer']}" for r in train])
    sep = tok.encode("\n\n")
    print(f"{len(train)} train problems, {sum(map(len, problems)) / len(problems):.1f} tokens each; "
          f"vocab {tok.vocab_size()} -> {vocab_size}; {time.time() - t_start:.1f} s")

    shape = {k: getattr(args, k) for k in SHAPE_KEYS}
    model = DeepseekV3Mtp(shape, vocab_size).to(device)
    params = sum(p.numel() for p in model.parameters())
    mtp_params = sum(p.numel() for p in model.mtp.parameters())
    print(f"DeepSeek-V3 {args.layers} layers x {args.hidden} ({args.dense_layers} dense, then MoE {args.experts} experts "
          f"top-{args.top_k} + 1 shared) + 1 MTP module: {params / 1e6:.2f}M parameters "
          f"({mtp_params / 1e6:.2f}M in the MTP module besides the shared embedding and head)")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    fused = {"fused": True} if device == "cuda" and int(torch.__version__.split(".")[0]) >= 2 else {}
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), **fused)

    losses, epoch, cursor = [], 0, 0
    input_ids, labels = make_blocks(problems, sep, eos_id, args.block, rng)
    model.train()
    t_train = time.time()
    step = 0
    while True:
        progress = progress_at(step, time.time() - t_train, args)
        if progress >= 1:
            break
        if cursor + args.batch > len(input_ids):  # next epoch: a new shuffle and packing
            input_ids, labels = make_blocks(problems, sep, eos_id, args.block, rng)
            epoch, cursor = epoch + 1, 0
        x = input_ids[cursor:cursor + args.batch].to(device, non_blocking=True)
        y = labels[cursor:cursor + args.batch].to(device, non_blocking=True)
        cursor += args.batch
        lr = lr_at(step, progress, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
            main_loss, mtp_loss = train_losses(model, x, y)
            loss = main_loss + args.mtp_weight * mtp_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        model.update_routing_bias(args.bias_speed)
        if step % (10 if args.smoke else 100) == 0:
            entry = {"step": step, "loss": loss.item(), "main_loss": main_loss.item(), "mtp_loss": mtp_loss.item(),
                     "lr": lr, "epoch": epoch}
            losses.append(entry)
            print(f"step {step:5d}  loss {entry['loss']:.4f}  main {entry['main_loss']:.4f}  "
                  f"mtp {entry['mtp_loss']:.4f}  lr {lr:.2e}  epoch {epoch}  {time.time() - t_train:.0f} s", flush=True)
        step += 1
    train_seconds = time.time() - t_train

    os.makedirs(args.out, exist_ok=True)
    tensors = checkpoint_tensors(model)
    save_safetensors(os.path.join(args.out, "model.safetensors"), tensors)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config_json(shape, vocab_size, eos_id), f, indent=2)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": eos_id, "eos_token_id": eos_id, "pad_token_id": eos_id, "do_sample": False,
                   "max_new_tokens": 128}, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.tokenizer, name), os.path.join(args.out, name))

    # Score the model as saved: bf16 weights (routing biases f32), computed in f32 as tachyon's CPU does.
    model.load_checkpoint_tensors({k: v.float() for k, v in tensors.items()})
    model.float().eval()
    scored = test[3:3 + args.eval]
    result = evaluate(model, tok, scored, test[:3], eos_id, device)
    held = heldout_mtp(model, tok, scored, eos_id, device)
    print(f"accuracy on {len(scored)} test problems: 0-shot {result['accuracy_0shot']:.3f}, "
          f"3-shot {result['accuracy_3shot']:.3f}")
    print(f"held-out MTP: loss {held['mtp_loss']:.4f}, top-1 {held['mtp_top1']:.3f} (main model top-1 "
          f"{held['main_top1']:.3f}); k=1 acceptance length on the 3-shot completions "
          f"{result['mtp_k1_acceptance_length_3shot']:.3f}")
    for r, c in list(zip(scored, result["completions_0shot"]))[:3]:
        print(f"--- {prompt(r)}\n{c!r}  (gold {gold(r)})")
    log = {"args": vars(args), "steps_run": step, "parameters": params, "mtp_parameters": mtp_params,
           "vocab_size": vocab_size, "losses": losses,
           "accuracy_0shot": result["accuracy_0shot"], "accuracy_3shot": result["accuracy_3shot"],
           "heldout_mtp_loss": held["mtp_loss"], "heldout_mtp_top1": held["mtp_top1"],
           "heldout_main_top1": held["main_top1"],
           "mtp_k1_acceptance_length_3shot": result["mtp_k1_acceptance_length_3shot"],
           "eval_problems": len(scored), "train_seconds": train_seconds, "total_seconds": time.time() - t_start,
           "torch": torch.__version__, "tokenizer": tok.which,
           "device": torch.cuda.get_device_name() if device == "cuda" else "cpu"}
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=2)
    print(f"saved to {args.out} in {time.time() - t_start:.0f} s total")


if __name__ == "__main__":
    main()
