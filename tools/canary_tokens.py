"""The canary tokenizer (assets/canary/tokenizer.json) for the training scripts: HF `tokenizers` when
it is importable (the GPU machine), else a merge-by-rank byte-level BPE in plain Python that gives
the same ids on the canary task's text (ASCII only), so the scripts also run where `tokenizers` is
missing. `which` says which one is used; tools/check_mtp_canary.py compares the fallback with
@lenml/tokenizers (the project's encoding reference) on the held-out prompts.

The fallback follows the file: the GPT-2 split pattern with single digits, written with ASCII
classes (train_canary_tokenizer.py's SPLIT_REGEX_ASCII; Python's `re` has no \\p{L}), then
byte-level characters merged by rank. It refuses non-ASCII text rather than guess.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_canary_tokenizer import SPLIT_REGEX_ASCII, bytes_to_unicode  # noqa: E402


class CanaryTokens:
    def __init__(self, folder):
        path = os.path.join(folder, "tokenizer.json")
        try:
            from tokenizers import Tokenizer
            self._hf = Tokenizer.from_file(path)
            self.which = "tokenizers (HF)"
        except ImportError:
            self._hf = None
            self.which = "the plain-Python BPE of tools/canary_tokens.py (no `tokenizers` here)"
            spec = json.load(open(path, encoding="utf-8"))
            self._vocab = dict(spec["model"]["vocab"])
            for added in spec["added_tokens"]:
                self._vocab[added["content"]] = added["id"]
            merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in spec["model"]["merges"]]
            self._rank = {pair: i for i, pair in enumerate(merges)}
            self._byte_char = bytes_to_unicode()
            self._char_byte = {c: b for b, c in self._byte_char.items()}
            self._id_token = {i: t for t, i in self._vocab.items()}
            self._special = {a["id"] for a in spec["added_tokens"] if a.get("special")}
            self._cache = {}

    def token_to_id(self, token):
        return self._hf.token_to_id(token) if self._hf else self._vocab[token]

    def vocab_size(self):
        return self._hf.get_vocab_size(with_added_tokens=True) if self._hf else len(self._vocab)

    def encode(self, text):
        if self._hf:
            return self._hf.encode(text).ids
        assert text.isascii(), "the fallback BPE splits only ASCII text the way the tokenizer.json pattern does"
        ids = []
        for piece in re.findall(SPLIT_REGEX_ASCII, text):
            ids.extend(self._encode_piece(piece))
        return ids

    def encode_batch(self, texts):
        if self._hf:
            return [e.ids for e in self._hf.encode_batch(texts)]
        return [self.encode(t) for t in texts]

    def decode(self, ids):
        """Text of `ids` with special tokens skipped."""
        if self._hf:
            return self._hf.decode(ids, skip_special_tokens=True)
        chars = "".join(self._id_token[i] for i in ids if i not in self._special)
        return bytes(self._char_byte[c] for c in chars).decode("utf-8", errors="replace")

    def _encode_piece(self, piece):
        if piece in self._cache:
            return self._cache[piece]
        parts = [self._byte_char[b] for b in piece.encode("utf-8")]
        while len(parts) > 1:
            ranked = [(self._rank.get((a, b), len(self._rank)), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            best, i = min(ranked)
            if best == len(self._rank):
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        ids = [self._vocab[p] for p in parts]
        self._cache[piece] = ids
        return ids
