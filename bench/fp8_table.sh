#!/usr/bin/env bash
# Runs on the GPU machine: FP8 against bf16 in one call with one binary. The Llama-3.1-8B shape
# (PRESET) with random weights in bf16, the baseline, and as an FP8 checkpoint (FORMAT, per-channel
# by default) served with the FP8 KV cache:
#   1. `bench latency` at batch 1: the prefill of LATENCY_INPUT_LEN (2,048) tokens and the decode
#      step against its floor (the bytes a step reads / the measured copy bandwidth), for each;
#   2. bench/serve_sweep.sh, 1K in / 1K out: bf16 at BF16_CONCURRENCIES ("64"), FP8 at
#      FP8_CONCURRENCIES ("64 256 512", with MAX_NUM_SEQS 512);
#   3. last, a DeepSeek-V3 shape (DEEPSEEK_PRESET, deepseek-v3-reduced; empty for none) in bf16 and
#      as a block-scaled FP8 checkpoint: `bench latency` at batch 1 (DEEPSEEK_INPUT_LEN, 128, tokens
#      in), the decode step against its floor;
#   4. OUT_DIR/fp8-table.json: every figure, the ratios to the floor, FP8 over bf16 at each
#      concurrency both ran and the best FP8 concurrency; the same as a table on stdout.
#   bench/fp8_table.sh TACHYON OUT_DIR
# The models are made first, each timed, on /dev/shm where it has room (writing 24 GB to a slow
# disk can take minutes): nothing starts on a half-made model. DEADLINE_S (seconds from the
# start) skips the steps that would begin too late, naming them, and the table holds what ran.
# MODELS (a folder) keeps the models between runs; DEVICE (cuda) lets the script run on the CPU
# with a tiny PRESET as a check of the script itself (INPUT_LEN / OUTPUT_LEN pass to the sweep).
set -euo pipefail
cd "$(dirname "$0")/.."
TACHYON=${1:?usage: bench/fp8_table.sh TACHYON OUT_DIR}
OUT_DIR=${2:?usage: bench/fp8_table.sh TACHYON OUT_DIR}
PRESET=${PRESET:-llama-3.1-8b}
FORMAT=${FORMAT:-fp8-channel}
DEVICE=${DEVICE:-cuda}
LATENCY_INPUT_LEN=${LATENCY_INPUT_LEN:-2048}
BF16_CONCURRENCIES=${BF16_CONCURRENCIES:-64}
FP8_CONCURRENCIES=${FP8_CONCURRENCIES:-64 256 512}
MAX_NUM_SEQS=${MAX_NUM_SEQS:-512}
DEEPSEEK_PRESET=${DEEPSEEK_PRESET-deepseek-v3-reduced}
DEEPSEEK_INPUT_LEN=${DEEPSEEK_INPUT_LEN:-128}
TOKENIZER=third_party/tokenizers/models/llama3
mkdir -p "$OUT_DIR"
started=$(date +%s)
elapsed() { echo $(($(date +%s) - started)); }
# in_time SECONDS WHAT: true when WHAT can start with SECONDS left before DEADLINE_S.
in_time() {
  [ -z "${DEADLINE_S:-}" ] && return 0
  [ $((DEADLINE_S - $(elapsed))) -ge "$1" ] && return 0
  echo "$2: not run (DEADLINE_S $DEADLINE_S, at $(elapsed) s)"
  return 1
}
if [ -z "${MODELS:-}" ]; then
  MODELS=/tmp
  [ "$(df --output=avail -k /dev/shm 2> /dev/null | tail -1)" -gt 40000000 ] 2> /dev/null && MODELS=/dev/shm
fi
BF16_MODEL=$MODELS/tachyon-fp8-table-$PRESET-bf16
FP8_MODEL=$MODELS/tachyon-fp8-table-$PRESET-$FORMAT
DEEPSEEK_BF16_MODEL=$MODELS/tachyon-fp8-table-$DEEPSEEK_PRESET-bf16
DEEPSEEK_FP8_MODEL=$MODELS/tachyon-fp8-table-$DEEPSEEK_PRESET-fp8-block

make_model() {  # DIR ARCH PRESET [make-model options]
  local dir=$1 arch=$2 preset=$3 t0 seconds
  shift 3
  if [ -f "$dir/config.json" ]; then
    echo "model $dir: kept from an earlier run"
    return
  fi
  t0=$(date +%s)
  "$TACHYON" make-model --arch "$arch" --preset "$preset" --seed 0 --out "$dir" "$@" > /dev/null
  seconds=$(($(date +%s) - t0))
  echo "{\"dir\": \"$dir\", \"seconds\": $seconds}" > "$OUT_DIR/model-$(basename "$dir").json"
  echo "model $dir: made in $seconds s"
}
latency() {  # LABEL DIR INPUT_LEN [bench latency options]
  local label=$1 dir=$2 input_len=$3
  shift 3
  in_time 60 "latency $label" || return 0
  "$TACHYON" bench latency "$dir" --device "$DEVICE" --batch-size 1 --input-len "$input_len" --output-len 128 \
    --num-iters 5 --num-iters-warmup 2 --output-json "$OUT_DIR/latency-$label.json" "$@" \
    > "$OUT_DIR/latency-$label.log" 2>&1 || { echo "latency $label failed:"; tail -3 "$OUT_DIR/latency-$label.log"; }
}
sweep() {  # LABEL DIR CONCURRENCIES [serve options]
  local label=$1 dir=$2 concurrencies=$3 limit=()
  shift 3
  in_time 90 "serve $label" || return 0
  [ -n "${DEADLINE_S:-}" ] && limit=(timeout $((DEADLINE_S - $(elapsed))))
  MODEL=$dir CONCURRENCIES=$concurrencies LABEL=$label MAX_NUM_SEQS=$MAX_NUM_SEQS DEVICE=$DEVICE \
    "${limit[@]}" bench/serve_sweep.sh "$TACHYON" "$OUT_DIR" "$@" || echo "serve $label stopped early"
}

# The served models carry the tokenizer; the DeepSeek ones keep their preset's vocabulary (bench
# latency needs no tokenizer).
make_model "$BF16_MODEL" llama "$PRESET" --tokenizer "$TOKENIZER"
make_model "$FP8_MODEL" llama "$PRESET" --tokenizer "$TOKENIZER" --quantization-format "$FORMAT"
latency bf16 "$BF16_MODEL" "$LATENCY_INPUT_LEN"
latency fp8-kv8 "$FP8_MODEL" "$LATENCY_INPUT_LEN" --kv-cache-dtype fp8
sweep bf16 "$BF16_MODEL" "$BF16_CONCURRENCIES"
sweep fp8-kv8 "$FP8_MODEL" "$FP8_CONCURRENCIES" --kv-cache-dtype fp8
# The DeepSeek rows last: the serve sweeps are the table's main figures. Its models are made only
# with time left for both latencies after them.
if [ -n "$DEEPSEEK_PRESET" ] && in_time 180 "the $DEEPSEEK_PRESET rows"; then
  make_model "$DEEPSEEK_BF16_MODEL" deepseek_v3 "$DEEPSEEK_PRESET"
  make_model "$DEEPSEEK_FP8_MODEL" deepseek_v3 "$DEEPSEEK_PRESET" --quantization-format fp8-block
  latency deepseek-bf16 "$DEEPSEEK_BF16_MODEL" "$DEEPSEEK_INPUT_LEN"
  latency deepseek-fp8 "$DEEPSEEK_FP8_MODEL" "$DEEPSEEK_INPUT_LEN"
fi

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1 || true)
python3 - "$OUT_DIR" "${gpu:-$DEVICE}" "$PRESET" "$FORMAT" "$DEEPSEEK_PRESET" <<'PY'
import glob, json, os, re, sys
out, device, preset, fmt, deepseek_preset = sys.argv[1:6]
table = {"device": device, "preset": preset, "fp8_format": fmt, "deepseek_preset": deepseek_preset,
         "make_model_seconds": {}, "latency": {}, "serve": {}}
for path in glob.glob(f"{out}/model-*.json"):
    m = json.load(open(path))
    table["make_model_seconds"][os.path.basename(m["dir"])] = m["seconds"]
for label in ("bf16", "fp8-kv8", "deepseek-bf16", "deepseek-fp8"):
    try:
        r = json.load(open(f"{out}/latency-{label}.json"))
    except (OSError, ValueError):
        continue
    floor = r.get("floor", {})
    table["latency"][label] = {
        "input_len": r["input_len"], "prefill_ms": r["prefill_ms_median"], "decode_step_ms": r["decode_step_ms_median"],
        "decode_step_floor_ms": floor.get("decode_step_floor_ms"),
        "decode_step_ratio_to_floor": floor.get("decode_step_ratio_to_floor"),
        "copy_bandwidth_bytes_per_s": floor.get("copy_bandwidth_bytes_per_s")}
for path in glob.glob(f"{out}/*-c*.json"):
    m = re.search(r"/(bf16|fp8-kv8)-c(\d+)\.json$", path)
    if not m:
        continue
    r = json.load(open(path))
    table["serve"].setdefault(m.group(1), {})[int(m.group(2))] = {
        k: r.get(k) for k in ("output_throughput", "median_ttft_ms", "median_tpot_ms", "p99_itl_ms", "failed")}
bf16, fp8 = table["serve"].get("bf16", {}), table["serve"].get("fp8-kv8", {})
table["fp8_over_bf16"] = {c: fp8[c]["output_throughput"] / bf16[c]["output_throughput"]
                          for c in sorted(set(bf16) & set(fp8)) if bf16[c]["output_throughput"]}
if fp8:
    best = max(fp8, key=lambda c: fp8[c]["output_throughput"] or 0)
    table["fp8_best"] = {"concurrency": best, "output_throughput": fp8[best]["output_throughput"]}
json.dump(table, open(f"{out}/fp8-table.json", "w"), indent=1, sort_keys=True)

print(f"== {preset} on {device}: bf16 against {fmt} + FP8 KV" + (f"; {deepseek_preset}: bf16 against fp8-block"
                                                                   if deepseek_preset else ""))
for label, r in table["latency"].items():
    ratio = r["decode_step_ratio_to_floor"]
    print(f"latency {label:13} prefill of {r['input_len']:5} {r['prefill_ms']:9.2f} ms   batch-1 step {r['decode_step_ms']:8.3f} ms"
          + (f" ({ratio:.3f}x its floor {r['decode_step_floor_ms']:.3f} ms)" if ratio else ""))
for label in ("bf16", "fp8-kv8"):
    for c, r in sorted(table["serve"].get(label, {}).items()):
        print(f"serve   {label:8} c{c:<4} {r['output_throughput'] or 0:10.0f} tok/s  TTFT {r['median_ttft_ms'] or 0:8.1f} ms"
              f"  TPOT {r['median_tpot_ms'] or 0:7.2f} ms  failed {r['failed']}")
for c, ratio in table["fp8_over_bf16"].items():
    print(f"FP8 / bf16 at c{c}: {ratio:.2f}x")
if "fp8_best" in table:
    print(f"FP8 best: {table['fp8_best']['output_throughput']:.0f} tok/s at c{table['fp8_best']['concurrency']}")
PY
