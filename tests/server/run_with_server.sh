#!/usr/bin/env bash
# Starts `tachyon serve` on a tiny model with the real Qwen3 tokenizer on a free port, runs the
# given client command with the base URL and model name appended, then stops the server with
# SIGTERM and requires a clean exit. Used by ctest for the openai npm client and curl tests.
# MODEL_ARCH / MODEL_PRESET pick another make-model architecture and preset (default qwen3 tiny),
# so the same clients check that every architecture is served; MODEL_TOKENIZER another real
# tokenizer and chat template (default qwen3). SERVE_ARGS adds serve options;
# in them, @DRAFT@ stands for a draft model made beside the served one (its twin: same seed).
#   run_with_server.sh TACHYON TOKENIZERS_DIR -- command args...
set -euo pipefail
TACHYON=$1
TOKENIZERS=$2
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
: > "$work/log"  # exists before the server's redirect does: the loop below may read it first
if [ "${DEFAULT_MODEL:-0}" = 1 ]; then  # the built-in default model, cached under XDG_CACHE_HOME
  XDG_CACHE_HOME="$work/cache" "$TACHYON" serve --port 0 --served-model-name tiny > "$work/log" 2>&1 &
else
  "$TACHYON" make-model --arch "${MODEL_ARCH:-qwen3}" --preset "${MODEL_PRESET:-tiny}" --seed 3 \
    --tokenizer "$TOKENIZERS/${MODEL_TOKENIZER:-qwen3}" --out "$work/model" > /dev/null
  extra=${SERVE_ARGS:-}
  if [[ "$extra" == *@DRAFT@* ]]; then
    "$TACHYON" make-model --arch "${MODEL_ARCH:-qwen3}" --preset "${MODEL_PRESET:-tiny}" --seed 3 \
      --tokenizer "$TOKENIZERS/qwen3" --out "$work/draft" > /dev/null
    extra=${extra//@DRAFT@/$work/draft}
  fi
  # shellcheck disable=SC2086  # SERVE_ARGS is a list of options
  "$TACHYON" serve "$work/model" --port 0 --served-model-name tiny --max-model-len 512 --num-blocks 128 $extra \
    > "$work/log" 2>&1 &
fi
server=$!
for _ in $(seq 1 200); do
  port=$(sed -n 's/.*serving tiny on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$work/log")
  [ -n "$port" ] && break
  sleep 0.05
done
if [ -z "${port:-}" ]; then cat "$work/log"; kill $server; exit 1; fi
status=0
"$@" "http://127.0.0.1:$port/v1" tiny || status=$?
kill -TERM $server
wait $server || { echo "server exited with $?"; cat "$work/log"; exit 1; }
exit $status
