#!/usr/bin/env python3
"""Trains the canary model's tokenizer: a small byte-level BPE (GPT-2 / Qwen style) on the canary task.

Writes tokenizer.json (Hugging Face `tokenizers` format, read both by HF and by
tachyon::tokenizer::Tokenizer) and tokenizer_config.json (with a trivial chat template that turns a chat into the task's prompt).
Python standard library only.

The text is the train split in the prompt format of docs/eval.md ("Question: q\\nAnswer: a\\n\\n"
per problem, concatenated as in a few-shot prompt). The pre-tokenizer is GPT-2's regex with one
change: a number is split into single digits (`\\p{N}` instead of ` ?\\p{N}+`, as Qwen does), so
every digit is its own token and the model sees 42 as "4" "2" wherever it stands. The one
non-obvious decision: Python's `re` has no \\p{L} / \\p{N}, so training splits with ASCII classes
([A-Za-z], [0-9]) and asserts the text is ASCII, where both patterns split identically; the JSON
keeps the Unicode classes so other text pre-tokenizes the way GPT-2's pattern would.

Deterministic: merges are learned from pair counts over the distinct pre-tokenized words; the most
frequent pair wins, ties go to the lexicographically smallest (left, right) pair. Training stops
at --vocab-size or when no pair occurs --min-frequency times (the task's vocabulary is small).

  python3 tools/train_canary_tokenizer.py --seed 0 --train 20000 --out assets/canary
The C++ side is checked by tests/unit/test_canary_tokenizer.cpp.
"""
import argparse
import collections
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_canary_task  # noqa: E402

EOS = "<|endoftext|>"
# GPT-2's pattern with single digits; the JSON form (Unicode classes) and the ASCII form used here.
SPLIT_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
SPLIT_REGEX_ASCII = r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+"""
# A chat is a few-shot prompt: user turns are questions, assistant turns answers, system turns dropped.
CHAT_TEMPLATE = ("{%- for message in messages %}"
                 "{%- if message['role'] == 'user' %}{{- 'Question: ' + message['content'] + '\\n' }}"
                 "{%- elif message['role'] == 'assistant' %}{{- 'Answer: ' + message['content'] + '\\n\\n' }}"
                 "{%- endif %}{%- endfor %}"
                 "{%- if add_generation_prompt %}{{- 'Answer:' }}{%- endif %}")
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}


def bytes_to_unicode():
    """GPT-2's table: printable Latin-1 bytes stand for themselves, the rest shift to U+0100 upwards."""
    out, shifted = {}, 0
    for b in range(256):
        if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + shifted)
            shifted += 1
    return out


def prompt_text(records):
    return "".join(f"Question: {r['question']}\nAnswer: {r['answer']}\n\n" for r in records)


def word_counts(text):
    """Pre-tokenized pieces of `text`, byte-level encoded, with their counts."""
    assert text.isascii(), "the ASCII split pattern equals the Unicode one only on ASCII text"
    byte_char = bytes_to_unicode()
    counts = collections.Counter(re.findall(SPLIT_REGEX_ASCII, text))
    return {"".join(byte_char[b] for b in piece.encode("utf-8")): n for piece, n in counts.items()}


def train_merges(counts, num_merges, min_frequency):
    """BPE merges over the distinct words; returns [(left, right), ...] in rank order."""
    words = [(list(word), n) for word, n in sorted(counts.items())]
    merges = []
    while len(merges) < num_merges:
        pairs = collections.Counter()
        for symbols, n in words:
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < min_frequency:
            break
        merges.append(best)
        merged = best[0] + best[1]
        for symbols, _ in words:
            i = 0
            while i + 1 < len(symbols):
                if symbols[i] == best[0] and symbols[i + 1] == best[1]:
                    symbols[i:i + 2] = [merged]
                i += 1
    return merges


def tokenizer_json(merges):
    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    for left, right in merges:
        assert left + right not in vocab, f"merge {left!r} {right!r} repeats a token"
        vocab[left + right] = len(vocab)
    eos_id = len(vocab)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": eos_id, "content": EOS, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_REGEX}, "behavior": "Isolated", "invert": False},
            BYTE_LEVEL]},
        "post_processor": BYTE_LEVEL,
        "decoder": BYTE_LEVEL,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[left, right] for left, right in merges]},
    }


def tokenizer_config(eos_id, model_max_length):
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(eos_id): {"content": EOS, "lstrip": False, "normalized": False,
                                               "rstrip": False, "single_word": False, "special": True}},
        "bos_token": EOS,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS,
        "model_max_length": model_max_length,
        "pad_token": EOS,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def write_json(path, obj):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)
        f.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="canary task seed")
    parser.add_argument("--train", type=int, default=20000, help="train problems to learn from")
    parser.add_argument("--test", type=int, default=1000, help="test problems kept out of the train split")
    parser.add_argument("--vocab-size", type=int, default=1024, help="most tokens, bytes and <|endoftext|> included")
    parser.add_argument("--min-frequency", type=int, default=2, help="a pair seen fewer times is not merged")
    parser.add_argument("--model-max-length", type=int, default=2048, help="tokenizer_config.json's model_max_length")
    parser.add_argument("--out", required=True, help="folder for tokenizer.json and tokenizer_config.json")
    args = parser.parse_args()

    # The train split exactly as `make_canary_task.py --seed S --train N --test T` writes it.
    test = make_canary_task.make_split(args.seed, "test", args.test, set())
    train = make_canary_task.make_split(args.seed, "train", args.train, {r["question"] for r in test})
    counts = word_counts(prompt_text(train))
    merges = train_merges(counts, args.vocab_size - 256 - 1, args.min_frequency)
    tok = tokenizer_json(merges)
    eos_id = tok["added_tokens"][0]["id"]
    os.makedirs(args.out, exist_ok=True)
    write_json(os.path.join(args.out, "tokenizer.json"), tok)
    write_json(os.path.join(args.out, "tokenizer_config.json"), tokenizer_config(eos_id, args.model_max_length))
    print(f"{len(counts)} distinct words, {len(merges)} merges, vocab size {eos_id + 1} "
          f"({EOS} = {eos_id}), written to {args.out}")


if __name__ == "__main__":
    main()
