#!/usr/bin/env python3
"""Expected token ids for the tokenizer conformance tests, from HF `tokenizers` (the Rust library).

Runs on the GPU machine (which has `tokenizers`); reads the corpus written by
tools/make_tokenizer_corpus.py and every <models>/<name>/tokenizer.json, and writes
<out>/expected_<name>.json: a list, one entry per corpus string, of
{"ids": encode(text, add_special_tokens=True).ids, "decoded": decode(ids, skip_special_tokens=False)}.

Usage: python3 tools/tokenizer_reference.py --corpus tests/data/tokenizer/corpus.json \
           --models third_party/tokenizers/models --out tests/data/tokenizer
"""
import argparse
import json
import os
import sys


def reference(tokenizer, corpus):
    out = []
    for text in corpus:
        ids = tokenizer.encode(text, add_special_tokens=True).ids
        out.append({"ids": ids, "decoded": tokenizer.decode(ids, skip_special_tokens=False)})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from tokenizers import Tokenizer, __version__  # imported late so --help works without it

    with open(args.corpus, encoding="utf-8") as f:
        corpus = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    names = sorted(n for n in os.listdir(args.models)
                   if os.path.isfile(os.path.join(args.models, n, "tokenizer.json")))
    if not names:
        sys.exit(f"no <name>/tokenizer.json under {args.models}")
    for name in names:
        tokenizer = Tokenizer.from_file(os.path.join(args.models, name, "tokenizer.json"))
        expected = reference(tokenizer, corpus)
        path = os.path.join(args.out, f"expected_{name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(expected, f, ensure_ascii=False, separators=(",", ":"))
        total = sum(len(e["ids"]) for e in expected)
        print(f"tokenizers {__version__}: {name}: {len(expected)} strings, {total} ids -> {path}")


if __name__ == "__main__":
    main()
