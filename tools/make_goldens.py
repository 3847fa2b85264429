#!/usr/bin/env python3
"""Writes the model goldens with HF transformers, the numerical reference (GPU machine).

For every variant of tests/data/goldens/manifest.json it loads MODELS/<name> (written by
tools/make_golden_models.sh) with transformers in float32 on the CPU (eager attention, no TF32),
and writes OUT/<name>.json: the prompt, the logits of every prompt position, and the greedy
continuation of greedy_tokens tokens (argmax over a full recompute each step).

    python3 tools/make_goldens.py --manifest tests/data/goldens/manifest.json \
        --models out/golden-models --out tests/data/goldens
"""
import argparse
import base64
import json
import os

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM


def greedy(model, prompt, steps):
    """Argmax continuation, and the smallest gap between the best and second-best logit on the
    way: a near-tie there would make the golden flip with any change of summation order."""
    ids = torch.tensor([prompt], dtype=torch.long)
    out = []
    min_margin = float("inf")
    for _ in range(steps):
        logits = model(ids).logits[0, -1]
        top2 = torch.topk(logits, 2).values
        min_margin = min(min_margin, float(top2[0] - top2[1]))
        token = int(torch.argmax(logits))
        out.append(token)
        ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    return out, min_margin


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    manifest = json.load(open(args.manifest))
    os.makedirs(args.out, exist_ok=True)
    for variant in manifest["variants"]:
        path = os.path.join(args.models, variant["name"])
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        with torch.no_grad():
            prompt = variant["prompt"]
            logits = model(torch.tensor([prompt])).logits[0].float().numpy()
            continuation, min_margin = greedy(model, prompt, manifest["greedy_tokens"])
        golden = {
            "name": variant["name"],
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "prompt": prompt,
            "logits_shape": list(logits.shape),
            # little-endian float32, row-major [prompt_length, vocab_size]
            "logits_f32_base64": base64.b64encode(logits.astype("<f4").tobytes()).decode(),
            "greedy": continuation,
            "greedy_min_margin": min_margin,
        }
        with open(os.path.join(args.out, variant["name"] + ".json"), "w") as f:
            json.dump(golden, f)
        print(variant["name"], logits.shape, continuation[:8], "min margin %.3g" % min_margin, flush=True)


if __name__ == "__main__":
    main()
