#!/usr/bin/env bash
# Scores the canary with speculative decoding and requires every completion to equal the plain
# run's (greedy: exact verification must not change a token), printing the acceptance the server
# measured. Used by ctest (CPU) and scripts/gpu-test.sh (--device cuda).
#   [CANARY_MODEL=DIR] scripts/canary-speculative.sh TACHYON PLAIN_EVAL_JSON OUT_DIR LIMIT [serve args...]
# CANARY_MODEL: the model served (default "-", the built-in canary). LIMIT may be below the plain
# run's: its first LIMIT problems are compared (the task's first K problems are the same whatever
# its size, tools/make_canary_task.py). MIN_ACCEPTANCE_LENGTH=x also fails when the mean acceptance
# length is not above x (drafts that are never right still give the plain run's text).
set -euo pipefail
TACHYON=$1
PLAIN=$2
OUT=$3
LIMIT=$4
shift 4
ROOT=$(cd "$(dirname "$0")/.." && pwd)
"$ROOT/scripts/canary-eval.sh" "$TACHYON" "${CANARY_MODEL:--}" "$OUT" "$LIMIT" "$@" > "$OUT.log" 2>&1 || { cat "$OUT.log"; exit 1; }
python3 "$ROOT/tools/compare_eval_samples.py" --prefix "$PLAIN" "$OUT/eval.json" "$OUT/metrics.txt" | tee "$OUT/compare.txt"
if [ -n "${MIN_ACCEPTANCE_LENGTH:-}" ]; then
  python3 - "$OUT/compare.txt" "$MIN_ACCEPTANCE_LENGTH" <<'PY'
import re, sys
text, floor = open(sys.argv[1]).read(), float(sys.argv[2])
length = float(re.search(r"mean acceptance length ([0-9.]+)", text).group(1))
print(f"mean acceptance length {length:.2f} (floor {floor})")
sys.exit(0 if length > floor else 1)
PY
fi
