#!/usr/bin/env python3
"""The layer rule of src/tachyon, enforced: every #include "tachyon/<module>/..." must point to a
module its own module may depend on (STYLE.md's dependency direction, docs/architecture.md's map).

    base <- tensor <- core <- kernels <- dist <- model <- runner <- engine <- app <- server <- cli
    tokenizer and eval hang off base alone; structured (grammars and token masks) off base and
    tokenizer, and the engine and the server read it

core holds the plain data that engine and runner both read (the plan, the configs, sampled
tokens); the engine reaches the runner only through its interface (runner/model_runner.h); the
offline LLM API and the runner factory (app/) sit above the engine. Run:
    tests/unit/check_layers.py src/tachyon      (ctest -R unit.layers)
Exit status 1 lists every include that points the wrong way.
"""
import os
import re
import sys

BELOW = {
    "base": [],
    "tensor": ["base"],
    "core": ["base", "tensor"],
    "kernels": ["base", "tensor", "core"],
    "dist": ["base", "tensor", "core", "kernels"],
    "model": ["base", "tensor", "core", "kernels", "dist"],
    "tokenizer": ["base"],
    "eval": ["base"],
    "structured": ["base", "tokenizer"],
    "runner": ["base", "tensor", "core", "kernels", "dist", "model"],
    # The engine drives a runner through its interface alone.
    "engine": ["base", "tensor", "core", "runner/model_runner.h", "structured"],
    "app": ["base", "tensor", "core", "kernels", "dist", "model", "tokenizer", "structured", "runner", "engine"],
    "server": ["base", "tensor", "core", "tokenizer", "structured", "engine", "app"],
    "cli": ["base", "tensor", "core", "kernels", "dist", "model", "tokenizer", "eval", "structured", "runner", "engine",
            "app", "server"],
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"tachyon/([^"]+)"')


def allowed(module, target):
    target_module = target.split("/")[0]
    if target_module == module:
        return True
    return any(target == rule or target_module == rule for rule in BELOW[module])


def main(root):
    errors = []
    seen = set()
    for directory, _, files in os.walk(root):
        for name in sorted(files):
            path = os.path.join(directory, name)
            module = os.path.relpath(path, root).split(os.sep)[0]
            if module not in BELOW:
                if os.path.dirname(os.path.relpath(path, root)):
                    errors.append(f"{path}: module '{module}' has no place in the layer table of {__file__}")
                continue
            seen.add(module)
            with open(path, encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, 1):
                    match = INCLUDE.match(line)
                    if match and not allowed(module, match.group(1)):
                        errors.append(f"{path}:{number}: {module}/ may not include tachyon/{match.group(1)}")
    if not seen:
        errors.append(f"no sources found under {root}")
    for error in errors:
        print(error)
    print(f"check_layers: {len(errors)} include(s) point the wrong way in {len(seen)} modules")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "src/tachyon"))
