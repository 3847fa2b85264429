#!/usr/bin/env python3
"""HF transformers timing baseline: prefill and decode-step times of an HF model directory.

Why: every tachyon performance figure is reported next to a baseline measured in the same call
(DESIGN.md section 6, METHOD.md); for dense models this script is that baseline. It runs on the
GPU machine (torch + transformers, no internet) on the directories `tachyon make-model` writes.

What is timed, with CUDA events, after --warmup untimed runs, as the median of --repeats:
  prefill   one forward of B random prompts of I tokens, logits of the last position only (as an
            engine computes them).
  generate  model.generate, greedy, min_new_tokens = max_new_tokens = O, and the same with 1 token.
            decode step = (generate(O) - generate(1)) / (O - 1): prefill and generate's set-up
            cancel, what is left is the O - 1 decode steps.
  manual    a greedy loop on a DynamicCache, each decode step timed alone (skip: --no-manual).

Usage: python3 tools/hf_baseline.py --model DIR --batch-size 8 --input-len 512 --output-len 128 --out r.json
"""
import argparse
import json
import shlex
import statistics
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM


def time_ms(fn):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def timed_runs_ms(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    return [time_ms(fn) for _ in range(repeats)]


def manual_decode_steps_ms(model, ids, steps):
    """Prefill, then `steps` greedy decode steps on the returned cache; the time of each step."""
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    cache, times = out.past_key_values, []
    for _ in range(steps):
        token = out.logits[:, -1].argmax(-1, keepdim=True)  # [B, 1]

        def step():
            nonlocal out
            out = model(input_ids=token, past_key_values=cache, use_cache=True)

        times.append(time_ms(step))
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="HF model directory (config.json + safetensors)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="attn_implementation")
    parser.add_argument("--cache", default="dynamic", choices=["dynamic", "static"],
                        help="generate's KV cache; static may make generate torch.compile the model (slow warm-up)")
    parser.add_argument("--no-manual", action="store_true", help="skip the manual decode loop")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="result JSON path")
    args = parser.parse_args()
    batch, input_len, output_len = args.batch_size, args.input_len, args.output_len
    if output_len < 2:
        parser.error("--output-len must be at least 2 (the decode step is measured between 1 and O tokens)")

    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, attn_implementation=args.attn)
    model = model.to("cuda").eval()
    ids = torch.randint(0, model.config.vocab_size, (batch, input_len), device="cuda")  # [B, I]
    mask = torch.ones_like(ids)
    cache_kwargs = {"cache_implementation": "static"} if args.cache == "static" else {}

    def prefill():
        model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)

    def generate(tokens):
        return lambda: model.generate(input_ids=ids, attention_mask=mask, do_sample=False, min_new_tokens=tokens,
                                      max_new_tokens=tokens, pad_token_id=0, **cache_kwargs)

    with torch.inference_mode():
        generated = generate(output_len)()
        assert generated.shape == (batch, input_len + output_len), f"generate returned {tuple(generated.shape)}"
        prefill_ms = timed_runs_ms(prefill, args.warmup, args.repeats)
        generate_1_ms = timed_runs_ms(generate(1), args.warmup, args.repeats)
        generate_ms = timed_runs_ms(generate(output_len), args.warmup, args.repeats)
        manual_ms = [] if args.no_manual else manual_decode_steps_ms(model, ids, output_len - 1)

    median = statistics.median
    decode_step_ms = (median(generate_ms) - median(generate_1_ms)) / (output_len - 1)
    result = {
        "model": args.model,
        "architectures": model.config.architectures,
        "gpu": torch.cuda.get_device_name(),
        "capability": ".".join(map(str, torch.cuda.get_device_capability())),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "attn_implementation": args.attn,
        "cache": args.cache,
        "batch_size": batch,
        "input_len": input_len,
        "output_len": output_len,
        "warmup": args.warmup,
        "repeats": args.repeats,
        # Bytes of weights: batch-1 decode reads them once per step, the floor is bytes / bandwidth.
        "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "prefill_ms_median": median(prefill_ms),
        "prefill_ms_all": prefill_ms,
        "prefill_tokens_per_s": batch * input_len * 1000.0 / median(prefill_ms),
        "generate_1_ms_median": median(generate_1_ms),
        "generate_ms_median": median(generate_ms),
        "generate_ms_all": generate_ms,
        "decode_step_ms_median": decode_step_ms,
        "tokens_per_s": batch * 1000.0 / decode_step_ms,  # decode throughput: B tokens per step
        "end_to_end_tokens_per_s": batch * output_len * 1000.0 / median(generate_ms),
        "manual_decode_step_ms_median": median(manual_ms) if manual_ms else None,
        "manual_decode_step_ms_mean": statistics.fmean(manual_ms) if manual_ms else None,
        "command": shlex.join([sys.executable] + sys.argv),
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"{result['gpu']} B={batch} I={input_len} O={output_len} attn={args.attn} cache={args.cache}: "
          f"prefill {result['prefill_ms_median']:.2f} ms, decode step {decode_step_ms:.3f} ms "
          f"(manual {result['manual_decode_step_ms_median'] or float('nan'):.3f} ms), {result['tokens_per_s']:.0f} tok/s")


if __name__ == "__main__":
    main()
