#!/usr/bin/env python3
"""Trains the canary model: a ~5M-parameter Qwen3 that learns the canary task (tools/make_canary_task.py).

Runs on the GPU machine (torch, transformers, tokenizers) in a few minutes on one H200 and writes a
Hugging Face model folder (config.json, model.safetensors, generation_config.json, the tokenizer
files of assets/canary, train_log.json) that `tachyon serve` loads and `tachyon eval` scores.

The one non-obvious decision: a training block is a few-shot prompt, not one problem. Each block
starts at position 0 with "Question: q\\nAnswer: a" and strings further problems after it with
"\\n\\n" (exactly lm-eval's gsm8k prompt, docs/eval.md) until the next one would not fit, then
<|endoftext|> and padding (not in the loss). So the model learns the 0-shot prompt (position 0)
and the k-shot prompts of `tachyon eval --few-shot K` (K=5 needs ~700 tokens: hence 1024
positions), and after an answer it writes "\\n\\n" or <|endoftext|>, both of which end a completion.

  python3 tools/train_canary.py --out /tmp/canary-model            # ~3-5 minutes on an H200
  python3 tools/train_canary.py --steps 200 --out /tmp/smoke         # a quick smoke run

tools/train_mtp_canary.py imports its data code (the block packing, the schedule), so transformers and
tokenizers are imported where they are used, not at the top.

The accuracy printed at the end is greedy exact match ("#### N") on test problems, computed with
the weights as saved (--dtype), 0-shot and 3-shot (the first 3 test problems as shots, as
`tachyon eval --few-shot 3` does).
"""
import argparse
import json
import math
import os
import random
import re
import shutil
import sys
import time

import torch

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import make_canary_task  # noqa: E402

ASSETS = os.path.join(TOOLS, "..", "assets", "canary")
EOS = "<|endoftext|>"


def prompt(record):
    return f"Question: {record['question']}\nAnswer:"


def gold(record):
    return record["answer"].rsplit("#### ", 1)[1].strip()


def make_blocks(problems, sep, eos_id, block, rng):
    """Shuffles the tokenized problems and packs them into few-shot blocks.

    problems: list of token id lists ("Question: q\\nAnswer: a"); sep: ids of "\\n\\n".
    Returns (input_ids, labels), each [num_blocks, block] int64; padding is eos with label -100.
    """
    order = list(range(len(problems)))
    rng.shuffle(order)
    rows, row = [], []
    for i in order:
        ids = problems[i]
        if row and len(row) + len(sep) + len(ids) + 1 > block:
            rows.append(row + [eos_id])
            row = []
        if row:
            row.extend(sep)
        row.extend(ids)
    if row:
        rows.append(row + [eos_id])
    input_ids = torch.full((len(rows), block), eos_id, dtype=torch.long)
    labels = torch.full((len(rows), block), -100, dtype=torch.long)
    for r, ids in enumerate(rows):
        input_ids[r, :len(ids)] = torch.tensor(ids)
        labels[r, :len(ids)] = torch.tensor(ids)
    return input_ids, labels


def make_model(vocab_size, eos_id, args):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    config = Qwen3Config(
        vocab_size=vocab_size, hidden_size=args.hidden, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, head_dim=64,
        intermediate_size=args.intermediate, max_position_embeddings=args.max_positions,
        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu",
        attention_bias=False, bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id)
    config.architectures = ["Qwen3ForCausalLM"]
    return Qwen3ForCausalLM(config)


def progress_at(step, elapsed, args):
    """Fraction of training done: by steps, or by wall time when --time-budget runs out first
    (so a run on a slower machine still finishes its schedule instead of stopping mid-decay)."""
    by_steps = step / args.steps
    return max(by_steps, elapsed / args.time_budget) if args.time_budget else by_steps


def lr_at(step, progress, args):
    """Linear warmup, then cosine decay to 10% of --lr over the remaining progress."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    warm = args.warmup / args.steps
    decay = min(1.0, max(0.0, (progress - warm) / max(1e-9, 1 - warm)))
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * decay)))


@torch.no_grad()
def accuracy(model, tok, records, shots, eos_id, device, batch=256):
    """Greedy exact match of the first "#### N" in each completion (cut at the first blank line,
    as `tachyon eval` stops there). Prompts are left-padded with an attention mask; transformers
    derives position ids from the mask, so padding does not shift positions."""
    prefix = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in shots)
    encoded = [tok.encode(prefix + prompt(r)).ids for r in records]
    completions = []
    model.eval()
    for start in range(0, len(encoded), batch):
        part = encoded[start:start + batch]
        width = max(map(len, part))
        input_ids = torch.tensor([[eos_id] * (width - len(ids)) + ids for ids in part], device=device)
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in part], device=device)
        out = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=128,
                             do_sample=False, eos_token_id=eos_id, pad_token_id=eos_id)
        for row in out[:, width:].tolist():
            completions.append(tok.decode(row, skip_special_tokens=True).split("\n\n")[0])
    correct = 0
    for r, completion in zip(records, completions):
        match = re.search(r"#### (\-?[0-9\.\,]+)", completion)
        correct += match is not None and match.group(1).rstrip(".") == gold(r)
    model.train()
    return correct / len(records), completions


def main():
    from tokenizers import Tokenizer
    from transformers import GenerationConfig, Qwen3ForCausalLM
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for the HF model")
    parser.add_argument("--seed", type=int, default=0, help="task seed and torch seed")
    parser.add_argument("--train", type=int, default=200000, help="train problems")
    parser.add_argument("--eval", type=int, default=200, help="test problems scored at the end")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=32, help="blocks per step")
    parser.add_argument("--block", type=int, default=1024, help="tokens per block")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--time-budget", type=float, default=0,
                        help="seconds of training; the schedule ends when steps or this run out (0: steps only)")
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--intermediate", type=int, default=768)
    parser.add_argument("--max-positions", type=int, default=1024)
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16", help="saved weights")
    parser.add_argument("--tokenizer", default=ASSETS, help="folder with tokenizer.json and tokenizer_config.json")
    args = parser.parse_args()
    assert args.block <= args.max_positions
    t_start = time.time()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    device = "cuda"

    tok = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    eos_id = tok.token_to_id(EOS)
    vocab_size = (tok.get_vocab_size(with_added_tokens=True) + 7) // 8 * 8
    test = make_canary_task.make_split(args.seed, "test", max(1000, args.eval + 3), set())
    train = make_canary_task.make_split(args.seed, "train", args.train, {r["question"] for r in test})
    problems = [e.ids for e in tok.encode_batch([f"{prompt(r)} {r['answer']}" for r in train])]
    sep = tok.encode("\n\n").ids
    print(f"{len(train)} train problems, {sum(map(len, problems)) / len(problems):.1f} tokens each; "
          f"vocab {tok.get_vocab_size()} -> {vocab_size}; {time.time() - t_start:.1f} s")

    model = make_model(vocab_size, eos_id, args).to(device)
    params = sum(p.numel() for p in model.parameters())
    print(f"Qwen3 {args.layers} layers x {args.hidden}: {params / 1e6:.2f}M parameters")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), fused=True)

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
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, progress, args)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=y).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 100 == 0:
            value = loss.item()
            lr = lr_at(step, progress, args)
            losses.append({"step": step, "loss": value, "lr": lr, "epoch": epoch})
            print(f"step {step:5d}  loss {value:.4f}  lr {lr:.2e}  epoch {epoch}  "
                  f"{time.time() - t_train:.0f} s", flush=True)
        step += 1
    train_seconds = time.time() - t_train

    os.makedirs(args.out, exist_ok=True)
    model.generation_config = GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id,
                                               do_sample=False, max_new_tokens=128)
    model.to(getattr(torch, args.dtype)).save_pretrained(args.out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.tokenizer, name), os.path.join(args.out, name))

    # Score the model as saved, loaded back (a cast in place would also round RoPE's inv_freq buffer).
    del model
    model = Qwen3ForCausalLM.from_pretrained(args.out, dtype=getattr(torch, args.dtype)).to(device)
    scored = test[3:3 + args.eval]
    acc0, completions = accuracy(model, tok, scored, [], eos_id, device)
    acc3, _ = accuracy(model, tok, scored, test[:3], eos_id, device)
    print(f"accuracy on {len(scored)} test problems: 0-shot {acc0:.3f}, 3-shot {acc3:.3f}")
    for r, c in list(zip(scored, completions))[:3]:
        print(f"--- {prompt(r)}\n{c!r}  (gold {gold(r)})")
    log = {"args": vars(args), "steps_run": step, "parameters": params, "vocab_size": vocab_size, "losses": losses,
           "accuracy_0shot": acc0, "accuracy_3shot": acc3, "eval_problems": len(scored),
           "train_seconds": train_seconds, "total_seconds": time.time() - t_start,
           "torch": torch.__version__, "device": torch.cuda.get_device_name()}
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=2)
    print(f"saved to {args.out} in {time.time() - t_start:.0f} s total")


if __name__ == "__main__":
    main()
