#!/usr/bin/env python3
"""Writes tests/data/tokenizer/corpus.json: the strings the tokenizer conformance tests encode.

Stdlib only and seeded, so the corpus is the same on every machine. The strings aim at the
places where tokenizers disagree: whitespace runs, digit runs, contractions in any case,
scripts without spaces, emoji sequences, decomposed accents (NFC), special-token text inside
ordinary text, and long inputs. tools/tokenizer_reference.py turns it into expected ids.

Usage: python3 tools/make_tokenizer_corpus.py [--out tests/data/tokenizer/corpus.json]
"""
import argparse
import json
import random
import unicodedata

SEED = 20261129

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "Hello, world! How are you doing today?",
    "In 1969, Apollo 11 landed on the Moon; Neil Armstrong said: \"That's one small step for man.\"",
    "Tokenizers split text into pieces; each piece maps to an integer id.",
    "She said she'd go, but they'll see whether we've got time - I'm not sure.",
    "Mr. O'Neil's dog isn't here; it's at the vet's.",
    "The price rose from $1,234.56 to $7,890.12 (an increase of 539.4%).",
    "Email me at john.doe+test@example.com or call +1 (555) 123-4567.",
    "Large language models predict the next token given all previous tokens.",
    "   Leading spaces, and trailing ones too.   ",
    "Wait...what?! No way!!! Really???",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 co\u00f6perate fa\u00e7ade Stra\u00dfe \u00c5ngstr\u00f6m",
    "ALL CAPS SENTENCE WITH NUMBERS 12345 AND SYMBOLS #@!",
]

WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which "
         "but have an they you were her she there been one all we their has would when if so no will "
         "can more about said what up out them into some could time only new like other do just then "
         "model token batch kernel tensor cache latency throughput memory stream engine scheduler").split()

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\n\nint main(void) {\n\tprintf(\"Hello, %s!\\n\", \"world\");\n\treturn 0;\n}\n",
    "fn main() {\n    let v: Vec<i32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "function add(a, b) {\n  return a + b;\n}\nconsole.log(add(2, 3)); // 5\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "class Foo:\n    \"\"\"Docstring.\"\"\"\n\n    def __init__(self, x: int = 0) -> None:\n        self._x = x\n\n    @property\n    def x(self):\n        return self._x\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfor i := 0; i < 3; i++ {\n\t\tfmt.Println(i)\n\t}\n}\n",
    "template <typename T>\nstruct Vec3 {\n  T x{}, y{}, z{};\n  T dot(const Vec3& o) const { return x*o.x + y*o.y + z*o.z; }\n};\n",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do\n  echo \"$f\" | tr 'a-z' 'A-Z'\ndone\n",
    "<html>\n  <body>\n    <div class=\"main\">&nbsp;&lt;tag&gt;</div>\n  </body>\n</html>\n",
    "x = [i**2 for i in range(100) if i % 3 == 0]\r\nprint(sum(x))\r\n",
    "    \t  mixed = {'a': 1, \"b\": [2, 3.0e-5, None, True]}  \t\n",
]

SPECIALS = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
    "<s>", "</s>", "<unk>", "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>",
    "<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>", "<\uff5ctool\u2581sep\uff5c>", "<|reserved_special_token_5|>",
    "<|fim_prefix|>", "<|vision_start|>",
]

CJK = ["\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u6563\u6b65\u5427\u3002",
       "\u5927\u8bed\u8a00\u6a21\u578b\u7684\u63a8\u7406\u5f15\u64ce\u9700\u8981\u9ad8\u6548\u7684\u5206\u8bcd\u5668\u3002",
       "\u6771\u4eac\u90fd\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002",
       "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c\uff01\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3002",
       "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc740 \ub744\uc5b4\uc4f0\uae30\ub97c \ud569\ub2c8\ub2e4.",
       "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645\u060c \u0643\u064a\u0641 \u062d\u0627\u0644\u0643\u061f",
       "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e, \u0906\u092a \u0915\u0948\u0938\u0947 \u0939\u0948\u0902?",
       "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u042d\u0442\u043e \u0442\u0435\u0441\u0442.",
       "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
       "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
       "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
       "Vi\u1ec7t Nam xin ch\u00e0o",
       ]

EMOJI = ["\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466",
         "\U0001F1FA\U0001F1F8", "\U0001F1EF\U0001F1F5", "\u2764\ufe0f", "\U0001F9D1\U0001F3FF\u200d\U0001F4BB",
         "\U0001F3F3\ufe0f\u200d\U0001F308", "\U0001F525", "\u2728", "\U0001F916", "\U0001F44B\U0001F3FB"]

# Blocks assigned long ago, so that every Unicode table version in play agrees on them.
SOUP_RANGES = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF),
               (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F),
               (0x2190, 0x21FF), (0x2200, 0x22FF), (0x2500, 0x257F), (0x3000, 0x303F), (0x3040, 0x30FF),
               (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x1F300, 0x1F5FF), (0x1F600, 0x1F64F),
               (0x300, 0x36F), (0x9, 0xD)]


def soup_char(rng):
    while True:
        lo, hi = rng.choice(SOUP_RANGES)
        c = chr(rng.randint(lo, hi))
        if unicodedata.category(c) not in ("Cn", "Cs", "Co"):
            return c


def words(rng, n):
    out = []
    for _ in range(n):
        w = rng.choice(WORDS)
        r = rng.random()
        if r < 0.1:
            w = w.upper()
        elif r < 0.2:
            w = w.capitalize()
        out.append(w)
    return " ".join(out)


def decomposed(s):
    return unicodedata.normalize("NFD", s)


def gen_whitespace(rng):
    pieces = [" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", "   ", "\t\t", " \n ", "\u00a0", "\u3000", "\u2003"]
    s = ""
    for _ in range(rng.randint(1, 8)):
        s += rng.choice(pieces) * rng.randint(1, 4)
        if rng.random() < 0.6:
            s += rng.choice(WORDS)
    return s


def gen_digits(rng):
    n = rng.randint(1, 40)
    d = "".join(rng.choice("0123456789") for _ in range(n))
    fmt = rng.choice(["{}", "x{}y", " {} ", "{}.{}", "${}", "{},000", "v{}-rc", "{}%", "\u0661\u0662\u0663{}", "{}\u2460\u00bd"])
    return fmt.format(d, d[::-1]) if "{}.{}" == fmt else fmt.format(d)


def gen_contraction(rng):
    subj = rng.choice(["it", "he", "she", "we", "they", "you", "I", "John", "that", "there"])
    suf = rng.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "'Ll", "'rE", "\u2019s"])
    s = f"{subj}{suf} {rng.choice(WORDS)}"
    return s.upper() if rng.random() < 0.3 else s


def gen_special_mix(rng):
    parts = []
    for _ in range(rng.randint(1, 5)):
        r = rng.random()
        if r < 0.4:
            parts.append(rng.choice(SPECIALS))
        elif r < 0.7:
            parts.append(words(rng, rng.randint(1, 5)))
        else:
            parts.append(rng.choice([" ", "\n", "", "  ", "\t"]))
    return "".join(parts)


def gen_url(rng):
    host = rng.choice(["example.com", "github.com/huggingface/tokenizers", "en.wikipedia.org/wiki/Byte_pair_encoding", "localhost:8080"])
    q = "&".join(f"{rng.choice(WORDS)}={rng.randint(0, 99999)}" for _ in range(rng.randint(0, 3)))
    return f"https://{host}/path/{rng.choice(WORDS)}?{q}#frag"


def gen_json(rng):
    obj = {rng.choice(WORDS): rng.choice([rng.randint(-1000, 100000), rng.random(), words(rng, 3), None, True, [1, 2, 3]])
           for _ in range(rng.randint(1, 6))}
    return json.dumps(obj, indent=rng.choice([None, 2, 4]), ensure_ascii=rng.random() < 0.5)


def gen_markdown(rng):
    lines = [f"# {words(rng, 3).title()}", "", f"- **{rng.choice(WORDS)}**: {words(rng, 6)}",
             f"- `{rng.choice(WORDS)}()` returns _{rng.choice(WORDS)}_", "", "| a | b |", "|---|---|",
             f"| {rng.randint(0, 99)} | {rng.choice(WORDS)} |", "", "```python", rng.choice(CODE).rstrip(), "```",
             f"> {words(rng, 8)}", f"[link]({gen_url(rng)})"]
    return "\n".join(lines[: rng.randint(3, len(lines))])


def gen_unicode_soup(rng):
    return "".join(soup_char(rng) for _ in range(rng.randint(1, 60)))


def gen_multilingual(rng):
    parts = [rng.choice(CJK), words(rng, 3), rng.choice(EMOJI), rng.choice(CJK)[: rng.randint(1, 8)]]
    rng.shuffle(parts)
    return rng.choice(["", " ", "\n"]).join(parts)


def gen_emoji(rng):
    return rng.choice(["", " "]).join(rng.choice(EMOJI) for _ in range(rng.randint(1, 8))) + rng.choice(["", " ok", "!"])


def gen_combining(rng):
    base = rng.choice(["caf\u00e9", "\u00c5ngstr\u00f6m", "na\u00efve", "se\u00f1or", "\u1ec7", "\ud55c\uad6d\uc5b4", "\u00fc\u00f6\u00e4", "Cr\u00e8me br\u00fbl\u00e9e"])
    s = decomposed(base) if rng.random() < 0.7 else base
    if rng.random() < 0.3:
        s += "e\u0301\u0302\u0323"  # stacked marks with no precomposed form
    return s + " " + words(rng, 2)


def gen_code(rng):
    s = rng.choice(CODE)
    if rng.random() < 0.3:
        s = s.replace("    ", "\t")
    if rng.random() < 0.3:
        s = s.replace("\n", "\r\n")
    return s


def gen_prose(rng):
    return rng.choice(PROSE) if rng.random() < 0.3 else words(rng, rng.randint(1, 40)) + rng.choice([".", "!", "?", "", "\n", "  "])


def gen_long(rng):
    target = rng.randint(5000, 20000)
    gens = [gen_prose, gen_code, gen_multilingual, gen_whitespace, gen_digits, gen_markdown, gen_emoji, gen_json]
    s = ""
    while len(s) < target:
        s += rng.choice(gens)(rng) + rng.choice([" ", "\n", "\n\n", ""])
    return s


GENERATORS = [
    (gen_prose, 300), (gen_code, 150), (gen_whitespace, 200), (gen_digits, 200), (gen_contraction, 150),
    (gen_special_mix, 200), (gen_url, 60), (gen_json, 80), (gen_markdown, 80), (gen_unicode_soup, 200),
    (gen_multilingual, 150), (gen_emoji, 100), (gen_combining, 120),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/tokenizer/corpus.json")
    args = ap.parse_args()
    rng = random.Random(SEED)
    corpus = ["", " ", "  ", "\n", "\t", "a", "A", "0", "00", "000", "0000", "'s", "'S", " 's", "\r\n",
              "\u2581", "\u2581\u2581x", "<0x0A>", "\ufffd", "\u00a0", "   \n\n   ", "x   ", "<s><s></s>",
              "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "\U0001F600" * 5]
    corpus += PROSE + CODE + SPECIALS + CJK + EMOJI
    for i in range(1, 41):
        corpus.append("1234567890" * (i // 10) + "1234567890"[: i % 10])
    for gen, count in GENERATORS:
        corpus += [gen(rng) for _ in range(count)]
    corpus += [gen_long(rng) for _ in range(40)]
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(corpus, f, ensure_ascii=False)
    print(f"{len(corpus)} strings, {sum(len(s.encode()) for s in corpus)} bytes -> {args.out}")


if __name__ == "__main__":
    main()
