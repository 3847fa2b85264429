#!/usr/bin/env bash
# The canary served with tensor parallelism on CPU thread ranks scores exactly what one rank
# scores: each of its LIMIT completions equals the plain canary run's (server.canary_accuracy's
# eval.json, 200 problems) on the same problem, and so do the strict and flexible scores over them.
# A shorter run compares with the plain run's first problems: the canary task's first K test
# problems are the same whatever its size (tools/make_canary_task.py) and the 3 shots are its
# first 3, so problem i is the same prompt in both.
#   canary_tp.sh TACHYON PLAIN_EVAL_JSON OUT_DIR LIMIT [serve args...]
set -euo pipefail
TACHYON=$1
PLAIN=$2
OUT=$3
LIMIT=$4
shift 4
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
"$ROOT/scripts/canary-eval.sh" "$TACHYON" - "$OUT" "$LIMIT" "$@" > "$OUT.log" 2>&1 || { cat "$OUT.log"; exit 1; }
python3 - "$PLAIN" "$OUT/eval.json" <<'PY'
import json, sys
plain, run = (json.load(open(p)) for p in sys.argv[1:3])
b = run["samples"]
a = plain["samples"][:len(b)]
if len(a) != len(b) or not b:
    sys.exit(f"the plain run has {len(plain['samples'])} samples, this run {len(b)}")
differ = [i for i, (x, y) in enumerate(zip(a, b)) if x["completion"] != y["completion"]]
for key in ("strict_correct", "flexible_correct"):
    mine, theirs = sum(s[key] for s in b), sum(s[key] for s in a)
    print(f"{key}: {mine}/{len(b)}, the plain run {theirs}/{len(a)}")
    if mine != theirs:
        differ.append(-1)
print(f"completions identical: {len(b) - len([i for i in differ if i >= 0])}/{len(b)}")
for i in [i for i in differ if i >= 0][:3]:
    print(f"  sample {i}: {a[i]['completion']!r} vs {b[i]['completion']!r}")
sys.exit(1 if differ else 0)
PY
