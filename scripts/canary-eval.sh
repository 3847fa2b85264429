#!/usr/bin/env bash
# Serves a canary model with `tachyon serve` and scores it with `tachyon eval` on the canary test
# split (tools/make_canary_task.py, seed 0), 3-shot, greedy. Used by ctest (CPU) and by
# scripts/gpu-test.sh (--device cuda), so both paths are scored the same way.
#   scripts/canary-eval.sh TACHYON MODEL_DIR OUT_DIR LIMIT [serve args...]
# MODEL_DIR "-" serves the built-in default model (the canary linked into the binary).
# Writes OUT_DIR/eval.json (tachyon eval's report) and prints its summary. Exits non-zero when the
# server or the eval fails; MIN_ACCURACY=x also fails when strict-match accuracy is below x.
# Also writes OUT_DIR/metrics.txt, the server's /metrics after the eval (speculative decoding's
# acceptance counters, for one).
set -euo pipefail
TACHYON=$1
MODEL=$2
OUT=$3
LIMIT=$4
shift 4
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
python3 "$ROOT/tools/make_canary_task.py" --seed 0 --train 0 --test $((LIMIT + 3)) --out "$OUT/task" > /dev/null
model_arg=("$MODEL")
[ "$MODEL" = - ] && model_arg=()
: > "$OUT/serve.log"  # exists before the server's redirect does: the loop below may read it first
"$TACHYON" serve "${model_arg[@]}" --port 0 --served-model-name canary "$@" > "$OUT/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 1200); do  # a cold GPU start tunes its GEMMs first: up to a minute
  port=$(sed -n 's/.*serving canary on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$OUT/serve.log")
  [ -n "$port" ] && break
  kill -0 $server 2> /dev/null || break
  sleep 0.05
done
if [ -z "${port:-}" ]; then cat "$OUT/serve.log"; kill $server 2> /dev/null; exit 1; fi
status=0
"$TACHYON" eval --base-url "http://127.0.0.1:$port/v1" --dataset "$OUT/task/test.jsonl" --few-shot 3 \
  --limit "$LIMIT" --max-tokens 128 --concurrency "${CONCURRENCY:-16}" --no-progress --output-json "$OUT/eval.json" \
  || status=$?
curl -s "http://127.0.0.1:$port/metrics" > "$OUT/metrics.txt" || true
kill -TERM $server
wait $server || { echo "server exited with $?"; cat "$OUT/serve.log"; exit 1; }
[ $status = 0 ] || exit $status
if [ -n "${MIN_ACCURACY:-}" ]; then
  python3 - "$OUT/eval.json" "$MIN_ACCURACY" <<'PY'
import json, sys
report, floor = json.load(open(sys.argv[1])), float(sys.argv[2])
accuracy = report["strict"]["accuracy"]
print(f"canary strict-match accuracy {accuracy:.4f} (floor {floor})")
sys.exit(0 if accuracy >= floor else 1)
PY
fi
