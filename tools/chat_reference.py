#!/usr/bin/env python3
"""Chat-template reference renderings with HF transformers' apply_chat_template.

Runs on the GPU machine (transformers installed, no internet). For each model folder
<models>/<name> holding tokenizer.json + tokenizer_config.json with a chat_template, loads
AutoTokenizer.from_pretrained(folder) and renders every conversation of --conversations with
apply_chat_template(messages, tools=..., add_generation_prompt=..., tokenize=False, **extra),
writing <out>/expected_hf_<name>.json. A conversation the template refuses is recorded as
{"error": "..."}; tachyon's renderer must raise for it too.

  python3 tools/chat_reference.py --conversations tests/data/chat/conversations.json \
      --models third_party/tokenizers/models --out $OUT
"""
import argparse
import copy
import json
import os

import transformers
from transformers import AutoTokenizer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.conversations, encoding="utf-8") as f:
        conversations = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    for name in sorted(os.listdir(args.models)):
        folder = os.path.join(args.models, name)
        config_path = os.path.join(folder, "tokenizer_config.json")
        if not os.path.isfile(config_path):
            continue
        with open(config_path, encoding="utf-8") as f:
            if not isinstance(json.load(f).get("chat_template"), str):
                continue
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder)
        except Exception as e:
            print(f"{name}: cannot load tokenizer: {type(e).__name__}: {e}")
            continue
        results = []
        for conv in conversations:
            entry = {"name": conv["name"]}
            try:
                rendered = tokenizer.apply_chat_template(
                    copy.deepcopy(conv["messages"]), tools=copy.deepcopy(conv.get("tools")),
                    add_generation_prompt=conv.get("add_generation_prompt", False),
                    tokenize=False, **copy.deepcopy(conv.get("extra") or {}))
                if isinstance(rendered, str):
                    entry["rendered"] = rendered
                else:
                    entry["error"] = f"unexpected return type {type(rendered).__name__}"
            except Exception as e:  # the template refused this conversation
                entry["error"] = f"{type(e).__name__}: {e}"
            results.append(entry)
        out = {"reference": f"transformers {transformers.__version__}", "model": name,
               "tokenizer_class": type(tokenizer).__name__, "results": results}
        path = os.path.join(args.out, f"expected_hf_{name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
            f.write("\n")
        errors = sum(1 for r in results if "error" in r)
        print(f"{name}: {len(results)} conversations, {errors} refused -> {path}")


if __name__ == "__main__":
    main()
