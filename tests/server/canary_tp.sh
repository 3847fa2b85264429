#!/usr/bin/env bash
# The canary served with tensor (or prefill context) parallelism on CPU thread ranks scores exactly
# what one rank scores: each of its LIMIT completions equals the plain canary run's (server.canary_accuracy's
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
python3 "$ROOT/tools/compare_eval_samples.py" --prefix "$PLAIN" "$OUT/eval.json"
