#!/usr/bin/env python3
"""Checks that a model written by tools/train_mtp_canary.py runs in tachyon as it runs in torch:
the main model's greedy continuations and their logprobs (`tachyon generate --device cpu
--logprobs 0`) against tools/mtp_canary_model.py's f32 forward of the same bf16 weights, and the
MTP module's drafts: with `--speculative-method mtp` the text is the plain run's, and at k = 1 the
accepted draft count equals what torch's MTP module predicts for the same greedy sequence
(train_mtp_canary.acceptance_k1, the drafter's k = 1 loop). Also checks the fallback tokenizer
(tools/canary_tokens.py) against @lenml/tokenizers when node and the package are there.

Needs torch (not in CI): a manual check, run after training.
  python3 tools/train_mtp_canary.py --smoke --out /tmp/mtp-smoke
  python3 tools/check_mtp_canary.py --tachyon build/bin/tachyon --model /tmp/mtp-smoke
Exit 1 on a difference in tokens, on a logprob further than --tolerance, or on unequal acceptance.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import torch

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import make_canary_task  # noqa: E402
from canary_tokens import CanaryTokens  # noqa: E402
from mtp_canary_model import DeepseekV3Mtp, load_safetensors  # noqa: E402
from train_canary import prompt  # noqa: E402
from train_mtp_canary import acceptance_k1, mtp_argmax  # noqa: E402

NODE_ENCODE = """
const {TokenizerLoader} = require('@lenml/tokenizers');
const fs = require('fs');
const [dir, texts] = [process.argv[1], JSON.parse(fs.readFileSync(0, 'utf8'))];
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(dir + '/tokenizer.json', 'utf8')),
  tokenizerConfig: JSON.parse(fs.readFileSync(dir + '/tokenizer_config.json', 'utf8'))});
console.log(JSON.stringify(texts.map(t => tok.encode(t, {add_special_tokens: false}))));
"""


def load_model(folder):
    config = json.load(open(os.path.join(folder, "config.json")))
    shape = {"hidden": config["hidden_size"], "layers": config["num_hidden_layers"],
             "dense_layers": config["first_k_dense_replace"], "heads": config["num_attention_heads"],
             "q_lora_rank": config["q_lora_rank"], "kv_lora_rank": config["kv_lora_rank"],
             "qk_nope": config["qk_nope_head_dim"], "qk_rope": config["qk_rope_head_dim"],
             "v_head": config["v_head_dim"], "intermediate": config["intermediate_size"],
             "moe_intermediate": config["moe_intermediate_size"], "experts": config["n_routed_experts"],
             "top_k": config["num_experts_per_tok"], "n_group": config["n_group"], "topk_group": config["topk_group"],
             "routed_scaling": config["routed_scaling_factor"], "max_positions": config["max_position_embeddings"]}
    model = DeepseekV3Mtp(shape, config["vocab_size"])
    model.load_checkpoint_tensors({k: v.float() for k, v in load_safetensors(os.path.join(folder, "model.safetensors")).items()})
    return model.float().eval(), config


@torch.no_grad()
def torch_greedy(model, ids, max_tokens, eos_id):
    """Greedy tokens after `ids` and each one's logprob, stopping at eos as `tachyon generate` does."""
    ids, out = list(ids), []
    for _ in range(max_tokens):
        _, logits = model(torch.tensor([ids]))
        logprobs = logits[0, -1].float().log_softmax(-1)
        token = int(logprobs.argmax())
        out.append((token, float(logprobs[token])))
        ids.append(token)
        if token == eos_id:
            break
    return out


def token_text(tok, token, eos_id):
    """A token's text as `tachyon generate --logprobs` prints it (special tokens by name)."""
    return "<|endoftext|>" if token == eos_id else tok.decode([token])


def tachyon_generate(args, ids, extra):
    cmd = [args.tachyon, "generate", args.model, "--device", "cpu", "--prompt-ids", ",".join(map(str, ids)),
           "--max-tokens", str(args.max_tokens), "--logprobs", "0"] + extra
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{run.stderr}")
    lines = run.stdout.split("--- logprobs: token logprob ---\n", 1)[1].splitlines()
    tokens = []
    for line in lines:
        text, value = line.rsplit(" ", 1)
        tokens.append((json.loads(text), float(value)))
    spec = re.search(r"(\d+) of (\d+) draft tokens accepted.*over (\d+) drafts", run.stderr)
    return tokens, (tuple(int(g) for g in spec.groups()) if spec else None)


def check_tokenizer(tok, texts, folder):
    node_modules = os.path.join(TOOLS, "..", "third_party", "tokenizers", "node_modules")
    if not os.path.isdir(os.path.join(node_modules, "@lenml", "tokenizers")):
        print("tokenizer: @lenml/tokenizers not installed; not compared")
        return True
    run = subprocess.run(["node", "-e", NODE_ENCODE, folder], input=json.dumps(texts), capture_output=True, text=True,
                         env=dict(os.environ, NODE_PATH=node_modules))
    if run.returncode != 0:
        print(f"tokenizer: node failed: {run.stderr.strip()[:300]}")
        return False
    reference = json.loads(run.stdout)
    same = sum(tok.encode(t) == r for t, r in zip(texts, reference))
    print(f"tokenizer ({tok.which}): {same}/{len(texts)} prompts encode as @lenml/tokenizers does")
    return same == len(texts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tachyon", required=True, help="the tachyon binary")
    parser.add_argument("--model", required=True, help="a folder written by tools/train_mtp_canary.py")
    parser.add_argument("--problems", type=int, default=4, help="held-out canary problems (0-shot prompts)")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--tolerance", type=float, default=2e-3, help="largest logprob difference allowed")
    args = parser.parse_args()
    torch.manual_seed(0)
    model, config = load_model(args.model)
    eos_id = config["eos_token_id"]
    tok = CanaryTokens(args.model)
    records = make_canary_task.make_split(0, "test", args.problems + 3, set())[3:]
    texts = [prompt(r) for r in records]
    tokenizer_ok = check_tokenizer(tok, texts, args.model)
    main_same = spec_same = True
    worst, spec_worst, predicted, measured = 0.0, 0.0, [0, 0], {1: [0, 0], 3: [0, 0]}
    for text in texts:
        ids = tok.encode(text)
        expected = torch_greedy(model, ids, args.max_tokens, eos_id)
        plain, _ = tachyon_generate(args, ids, [])
        texts_expected = [token_text(tok, t, eos_id) for t, _ in expected]
        if texts_expected == [t for t, _ in plain]:
            worst = max([worst] + [abs(a[1] - b[1]) for a, b in zip(expected, plain)])
        else:
            main_same = False
            print(f"  tokens differ on {text!r}:\n    torch   {texts_expected}\n"
                  f"    tachyon {[t for t, _ in plain]}")
        full = ids + [t for t, _ in expected]
        drafts, accepted = acceptance_k1(mtp_argmax(model, full, "cpu"), full, len(ids), len(ids) + args.max_tokens)
        predicted = [predicted[0] + drafts, predicted[1] + accepted]
        for k in (1, 3):
            spec, counts = tachyon_generate(args, ids, ["--speculative-method", "mtp", "--num-speculative-tokens", str(k)])
            if [t for t, _ in spec] != [t for t, _ in plain] or counts is None:
                print(f"  k={k}: the speculative run's tokens differ from the plain run's on {text!r}")
                spec_same = False
                continue
            spec_worst = max([spec_worst] + [abs(a[1] - b[1]) for a, b in zip(spec, plain)])
            measured[k] = [measured[k][0] + counts[2], measured[k][1] + counts[0]]
    print(f"main model: greedy tokens {'identical' if main_same else 'DIFFER'} on {len(texts)} prompts x "
          f"{args.max_tokens} tokens; largest logprob difference {worst:.2e} (tolerance {args.tolerance:g}; "
          f"tachyon prints 4 decimals)")
    print(f"MTP k=1: torch predicts {predicted[1]} of {predicted[0]} drafts accepted; tachyon accepted "
          f"{measured[1][1]} of {measured[1][0]}")
    print(f"MTP k=3: tachyon accepted {measured[3][1]} tokens over {measured[3][0]} drafts (mean acceptance length "
          f"{1 + measured[3][1] / max(1, measured[3][0]):.2f})")
    print(f"speculative runs (k=1, 3): tokens {'identical to' if spec_same else 'DIFFERENT from'} the plain run's; "
          f"largest logprob difference {spec_worst:.2e}")
    ok = tokenizer_ok and main_same and spec_same and worst <= args.tolerance and spec_worst <= args.tolerance \
        and predicted == measured[1]
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
