#!/usr/bin/env bash
# The MTP canary (assets/canary-mtp, tools/train_mtp_canary.py: a DeepSeek-V3 with one MTP module
# trained on the canary task) served plain and with its own MTP drafts: the plain run keeps the
# accuracy floor, every completion with --speculative-method mtp (k = 1 and k = 3) equals the
# plain run's (so the accuracy is the same), and the drafts are accepted for real: at k = 1 the
# mean acceptance length must exceed MIN_LENGTH_K1 (a module that drafts from the wrong hidden
# state, position or token is accepted about as often as chance, length ~1.0).
#   canary_mtp.sh TACHYON MODEL_DIR OUT_DIR LIMIT MIN_LENGTH_K1 [serve args...]
set -euo pipefail
TACHYON=$1
MODEL=$2
OUT=$3
LIMIT=$4
MIN_LENGTH=$5
shift 5
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT"
MIN_ACCURACY=0.97 "$ROOT/scripts/canary-eval.sh" "$TACHYON" "$MODEL" "$OUT/plain" "$LIMIT" "$@" > "$OUT/plain.log" 2>&1 \
  || { cat "$OUT/plain.log"; exit 1; }
tail -n 1 "$OUT/plain.log"
for k in 1 3; do
  echo "--- --speculative-method mtp --num-speculative-tokens $k"
  floor=$([ $k = 1 ] && echo "$MIN_LENGTH" || true)  # k = 3: the text only
  MIN_ACCEPTANCE_LENGTH=$floor CANARY_MODEL="$MODEL" "$ROOT/scripts/canary-speculative.sh" "$TACHYON" "$OUT/plain/eval.json" \
    "$OUT/mtp-k$k" "$LIMIT" --speculative-method mtp --num-speculative-tokens "$k" "$@"
done
