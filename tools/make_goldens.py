#!/usr/bin/env python3
"""Writes the model goldens with HF transformers, the numerical reference (GPU machine).

For every variant of tests/data/goldens/manifest.json it loads MODELS/<name> (written by
tools/make_golden_models.sh) with transformers in float32 on the CPU (eager attention, no TF32),
and writes OUT/<name>.json: the prompt, the logits of every prompt position, and the greedy
continuation of greedy_tokens tokens (argmax over a full recompute each step).

    python3 tools/make_goldens.py --manifest tests/data/goldens/manifest.json \
        --models out/golden-models --out tests/data/goldens

FP8 checkpoints (fp8_manifest.json) load through transformers' own FP8 support; with no GPU
visible it dequantizes the weights (value * factor) into float32, the format's definition, which
is what the CPU reference computes with:
    CUDA_VISIBLE_DEVICES= python3 tools/make_goldens.py --manifest tests/data/goldens/fp8_manifest.json \
        --models M --out tests/data/goldens

The GPU path is compared with transformers in bfloat16 on the GPU (sdpa attention):
    python3 tools/make_goldens.py --manifest tests/data/goldens/gpu_manifest.json \
        --models M --out O --dtype bfloat16 --device cuda
"""
import argparse
import base64
import json
import os
import sys
import traceback

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM


def greedy(model, prompt, steps, device):
    """Argmax continuation, and the smallest gap between the best and second-best logit on the
    way: a near-tie there would make the golden flip with any change of summation order."""
    ids = torch.tensor([prompt], dtype=torch.long, device=device)
    out = []
    margins = []
    for _ in range(steps):
        logits = model(ids).logits[0, -1].float()
        top2 = torch.topk(logits, 2).values
        margins.append(float(top2[0] - top2[1]))
        token = int(torch.argmax(logits))
        out.append(token)
        ids = torch.cat([ids, torch.tensor([[token]], device=device)], dim=1)
    return out, margins


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    attn = "eager" if args.device == "cpu" else "sdpa"
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    manifest = json.load(open(args.manifest))
    os.makedirs(args.out, exist_ok=True)
    failed = []
    for variant in manifest["variants"]:
        try:
            path = os.path.join(args.models, variant["name"])
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attn).to(args.device)
            model.eval()
            with torch.no_grad():
                prompt = variant["prompt"]
                logits = model(torch.tensor([prompt], device=args.device)).logits[0].float().cpu().numpy()
                continuation, margins = greedy(model, prompt, manifest["greedy_tokens"], args.device)
            golden = {
                "name": variant["name"],
                "transformers": transformers.__version__,
                "torch": torch.__version__,
                "dtype": args.dtype,
                "quantization": variant.get("quantization", ""),
                # How transformers held the FP8 weights: a quantizer class, or none (dequantized).
                "hf_quantizer": type(getattr(model, "hf_quantizer", None)).__name__,
                "hf_linear_weight_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
                "device": args.device,
                "prompt": prompt,
                "logits_shape": list(logits.shape),
                # little-endian float32, row-major [prompt_length, vocab_size]
                "logits_f32_base64": base64.b64encode(logits.astype("<f4").tobytes()).decode(),
                "greedy": continuation,
                "greedy_min_margin": min(margins),
                "greedy_margins": margins,  # top-1 minus top-2 logit at each greedy step
            }
            with open(os.path.join(args.out, variant["name"] + ".json"), "w") as f:
                json.dump(golden, f)
            print(variant["name"], logits.shape, continuation[:8], "min margin %.3g" % min(margins), flush=True)
        except Exception:  # one variant's failure (a transformers change, a missing class) must not hide the others
            failed.append(variant["name"])
            traceback.print_exc()
    if failed:
        sys.exit("make_goldens: no golden for " + ", ".join(failed))


if __name__ == "__main__":
    main()
