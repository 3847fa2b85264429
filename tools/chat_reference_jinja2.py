#!/usr/bin/env python3
"""Chat-template reference renderings with Python jinja2, configured as HF transformers does.

Runs on the dev machine (needs only `jinja2`). For each model folder with a chat_template in its
tokenizer_config.json, renders every conversation of --conversations and writes
<out>/expected_jinja2_<name>.json. With --cases, also renders the small feature templates of
tests/data/chat/jinja_cases.json ({name, template, vars}) into <out>/expected_jinja2_cases.json,
which tests/unit/test_jinja_conformance.cpp checks the interpreter against. A conversation the template refuses (raise_exception, a type
error) is recorded as {"error": "..."}; tachyon's renderer must raise for it too.

The environment mirrors transformers' chat_template_utils._compile_jinja_template:
ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks, loopcontrols), tojson = json.dumps with
ensure_ascii=False (key order kept), raise_exception and strftime_now as globals.

  python3 tools/chat_reference_jinja2.py --conversations tests/data/chat/conversations.json \
      --models third_party/tokenizers/models --out tests/data/chat \\
      --cases tests/data/chat/jinja_cases.json
"""
import argparse
import copy
import json
import os
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_content(token):
    # bos_token / eos_token may be a string or an AddedToken object {"content": ...}.
    if isinstance(token, dict):
        return token.get("content")
    return token


def render_all(env, config, conversations):
    template = env.from_string(config["chat_template"])
    special = {}
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        value = token_content(config.get(key))
        if value is not None:
            special[key] = value
    results = []
    for conv in conversations:
        kwargs = dict(special)
        kwargs.update(copy.deepcopy(conv.get("extra") or {}))
        entry = {"name": conv["name"]}
        try:
            entry["rendered"] = template.render(
                messages=copy.deepcopy(conv["messages"]), tools=copy.deepcopy(conv.get("tools")),
                documents=None, add_generation_prompt=conv.get("add_generation_prompt", False),
                **kwargs)
        except Exception as e:  # the template refused this conversation
            entry["error"] = f"{type(e).__name__}: {e}"
        results.append(entry)
    return results


def render_cases(env, cases):
    results = []
    for case in cases:
        entry = {"name": case["name"]}
        try:
            entry["rendered"] = env.from_string(case["template"]).render(**copy.deepcopy(case["vars"]))
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"
        results.append(entry)
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cases", help="feature cases: [{name, template, vars}]")
    args = parser.parse_args()
    with open(args.conversations, encoding="utf-8") as f:
        conversations = json.load(f)
    env = make_environment()
    os.makedirs(args.out, exist_ok=True)
    if args.cases:
        with open(args.cases, encoding="utf-8") as f:
            results = render_cases(env, json.load(f))
        path = os.path.join(args.out, "expected_jinja2_cases.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"reference": f"jinja2 {jinja2.__version__}", "results": results}, f,
                      ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"cases: {len(results)} -> {path}")
    for name in sorted(os.listdir(args.models)):
        config_path = os.path.join(args.models, name, "tokenizer_config.json")
        if not os.path.isfile(config_path):
            continue
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
        if not isinstance(config.get("chat_template"), str):
            continue
        results = render_all(env, config, conversations)
        out = {"reference": f"jinja2 {jinja2.__version__}", "model": name, "results": results}
        path = os.path.join(args.out, f"expected_jinja2_{name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
            f.write("\n")
        errors = sum(1 for r in results if "error" in r)
        print(f"{name}: {len(results)} conversations, {errors} refused -> {path}")


if __name__ == "__main__":
    main()
