#!/usr/bin/env bash
# Data-parallel attention through `tachyon serve` (docs/parallelism.md): a tiny DeepSeek-V3 with
# Llama-3's tokenizer (its 128256 tokens divide by --tp 2; DeepSeek-V3's 128815 do not) served
# with --dp 2, with --data-parallel-size 2 --tp 2, and plainly; 8 different greedy prompts sent
# at once to each must get the plain server's text, and at shutdown the DP servers must report
# the 8 sequences spread over both replicas (each new sequence goes to the replica running the
# fewest, so 4 and 4 when all 8 overlap; the count only needs both used); with n-gram drafts
# verified over the replicas the same text; with FP8 weights and an FP8 KV cache the text of the
# plain server with the same; with --async-scheduling on the plain text. --dp on a dense model or
# with --device cuda is refused at start-up in one line naming why.
#   run_dp.sh TACHYON TOKENIZERS_DIR
set -euo pipefail
TACHYON=$1
TOKENIZERS=$2
work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
"$TACHYON" make-model --arch deepseek_v3 --preset tiny-deepseek --seed 3 --tokenizer "$TOKENIZERS/llama3" \
  --out "$work/model" > /dev/null
"$TACHYON" make-model --arch qwen3 --preset tiny --seed 3 --tokenizer "$TOKENIZERS/qwen3" --out "$work/dense" > /dev/null
refused() {  # expected message, serve args...
  local want=$1; shift
  if "$TACHYON" serve "$@" --port 0 > "$work/refused.log" 2>&1; then echo "serve $* started"; exit 1; fi
  grep -q -- "$want" "$work/refused.log" || { echo "serve $*: no '$want' in:"; cat "$work/refused.log"; exit 1; }
}
refused "has no mixture-of-experts layer" "$work/dense" --dp 2
refused "on --device cuda is not served yet" "$work/model" --dp 2 --device cuda
# The 8 prompts go out together, so they share steps and the replicas run side by side.
ask() {  # name, serve args...: writes $work/<name>.out, one answer per line, prompt order
  local name=$1; shift
  : > "$work/$name.log"
  "$TACHYON" serve "$work/model" --device cpu --port 0 --served-model-name tiny --max-model-len 256 \
    --num-blocks 128 "$@" > "$work/$name.log" 2>&1 &
  local pid=$!
  pids+=($pid)
  local port=""
  for _ in $(seq 1 400); do
    port=$(sed -n 's/.*serving tiny on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$work/$name.log" | head -1)
    [ -n "$port" ] && break
    sleep 0.05
  done
  [ -n "$port" ] || { cat "$work/$name.log"; exit 1; }
  local clients=()
  for i in 0 1 2 3 4 5 6 7; do
    local words
    words=$(printf 'word%.0s ' $(seq 0 $((i * 3))))
    curl -sS -f "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"model\":\"tiny\",\"prompt\":\"prompt $i says $words\",\"max_tokens\":8,\"temperature\":0}" \
      > "$work/$name.$i.json" &
    clients+=($!)
  done
  for client in "${clients[@]}"; do wait "$client"; done
  for i in 0 1 2 3 4 5 6 7; do
    python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["choices"][0]["text"]))' \
      "$work/$name.$i.json"
  done > "$work/$name.out"
  kill -TERM $pid
  wait $pid || { echo "$name: server exited with $?"; cat "$work/$name.log"; exit 1; }
}
ask plain
ask dp2 --dp 2
ask dp2tp2 --data-parallel-size 2 --tp 2
ask dp2ngram --dp 2 --speculative-method ngram --num-speculative-tokens 2 --ngram-min 1 --ngram-max 2
ask dp2async --dp 2 --async-scheduling on
ask fp8 --kv-cache-dtype fp8 --quantization fp8
ask dp2fp8 --dp 2 --kv-cache-dtype fp8 --quantization fp8
diff "$work/fp8.out" "$work/dp2fp8.out" || { echo "dp2fp8 answers differ from the plain FP8 server's"; exit 1; }
[ "$(wc -l < "$work/plain.out")" = 8 ] && grep -qv '^""$' "$work/plain.out" || { cat "$work/plain.out"; exit 1; }
for name in dp2 dp2tp2 dp2ngram dp2async; do
  diff "$work/plain.out" "$work/$name.out" || { echo "$name answers differ from the plain server's"; exit 1; }
  placed=$(sed -n 's/.*sequences started per replica: \([0-9]*\) \([0-9]*\)$/\1 \2/p' "$work/$name.log")
  read -r first second <<< "${placed:-0 0}"
  [ $((first + second)) = 8 ] && [ "$first" -gt 0 ] && [ "$second" -gt 0 ] ||
    { echo "$name: no report of 8 sequences over both replicas in:"; cat "$work/$name.log"; exit 1; }
done
echo "dp: all checks passed"
