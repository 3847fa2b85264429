#!/usr/bin/env bash
# Runs on the GPU machine after scripts/gpu-test.sh has built build-gpu/. Makes random-weight
# models at real shapes and times the issue's goal configurations with `tachyon bench latency`,
# then HF transformers on the same directories (tools/hf_baseline.py), writing one JSON per run
# into OUT_DIR and a table at the end.
#   scripts/gpu-bench.sh OUT_DIR [tachyon] [hf]     (default: both)
#   ONLY="8b-b1-decode 1b-b1-decode" scripts/gpu-bench.sh ...   runs a subset
#   TACHYON_BENCH_ARGS="--async-scheduling off" scripts/gpu-bench.sh ...   extra flags for tachyon
# The DeepSeek-family runs (DEEPSEEK_RUNS: DeepSeek-V2-Lite, DeepSeek-V3-reduced in bf16 and from
# an FP8 block checkpoint) run only when ONLY names them; a model is made when a run first needs it.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: scripts/gpu-bench.sh OUT_DIR [tachyon] [hf]}
shift
SUITES=${*:-tachyon hf}
TACHYON=${TACHYON:-build-gpu/bin/tachyon}
MODELS=${MODELS:-/tmp/tachyon-bench-models}
mkdir -p "$OUT_DIR" "$MODELS"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/tachyon-cache}

# name arch preset [make-model options]
MODEL_SPECS=(
  "llama-1b llama llama-3.2-1b"
  "llama-8b llama llama-3.1-8b"
  "v2-lite deepseek_v3 deepseek-v2-lite"
  "v3r deepseek_v3 deepseek-v3-reduced"
  "v3r-fp8 deepseek_v3 deepseek-v3-reduced --quantization-format fp8-block"
)
make_model() {  # name (of MODEL_SPECS), once per MODELS folder
  local spec name arch preset extra
  for spec in "${MODEL_SPECS[@]}"; do
    read -r name arch preset extra <<< "$spec"
    [ "$name" = "$1" ] || continue
    # shellcheck disable=SC2086
    [ -f "$MODELS/$name/config.json" ] || "$TACHYON" make-model --arch "$arch" --preset "$preset" --seed 0 $extra \
      --out "$MODELS/$name" > /dev/null
  done
}

# name model batch input output
RUNS=(
  "8b-b1-decode llama-8b 1 128 256"
  "1b-b1-decode llama-1b 1 128 256"
  "8b-prefill-2048 llama-8b 1 2048 2"
  "8b-b64-ctx1k llama-8b 64 1024 64"
  "8b-b32-ctx8k llama-8b 32 8192 64"
  "8b-b1-ctx32k llama-8b 1 32768 64"
)
DEEPSEEK_RUNS=(
  "v2lite-b1-decode v2-lite 1 128 128"
  "v2lite-prefill-2048 v2-lite 1 2048 2"
  "v3r-b32 v3r 32 128 64"
  "v3r-fp8-b1 v3r-fp8 1 128 64"
  "v3r-fp8-b32 v3r-fp8 32 128 64"
)
for run in "${RUNS[@]}" "${DEEPSEEK_RUNS[@]}"; do
  read -r name model batch input output <<< "$run"
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
  if [ -z "${ONLY:-}" ] && [[ " ${DEEPSEEK_RUNS[*]} " == *" $name $model "* ]]; then continue; fi
  make_model "$model"
  if [[ " $SUITES " == *" tachyon "* ]]; then
    "$TACHYON" bench latency "$MODELS/$model" --device cuda --batch-size "$batch" --input-len "$input" \
      --output-len "$output" --num-iters 3 --num-iters-warmup 1 ${TACHYON_BENCH_ARGS:-} \
      --output-json "$OUT_DIR/tachyon-$name.json" \
      > "$OUT_DIR/tachyon-$name.log" 2>&1 || { echo "tachyon $name failed:"; tail -5 "$OUT_DIR/tachyon-$name.log"; }
  fi
  if [[ " $SUITES " == *" hf "* ]]; then
    python3 tools/hf_baseline.py --model "$MODELS/$model" --batch-size "$batch" --input-len "$input" \
      --output-len "$output" --repeats 2 --warmup 1 --no-manual --out "$OUT_DIR/hf-$name.json" \
      > "$OUT_DIR/hf-$name.log" 2>&1 || { echo "hf $name failed:"; tail -5 "$OUT_DIR/hf-$name.log"; }
  fi
done

python3 - "$OUT_DIR" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
print(f"{'run':<18} {'prefill ms':>10} {'decode ms':>10} {'floor ms':>9} {'ratio':>6} {'tok/s':>9} {'idle us':>8} | {'hf prefill':>10} {'hf decode':>10}")
names = sorted({os.path.basename(p).split("-", 1)[1][:-5] for p in glob.glob(f"{out}/*-*.json")})
for name in names:
    path = f"{out}/tachyon-{name}.json"
    t = json.load(open(path)) if os.path.exists(path) else {"prefill_ms_median": 0, "decode_step_ms_median": 0, "decode_tokens_per_s": 0}
    hf_path = f"{out}/hf-{name}.json"
    hf = json.load(open(hf_path)) if os.path.exists(hf_path) else {}
    floor = t.get("floor", {})
    print(f"{name:<18} {t['prefill_ms_median']:>10.2f} {t['decode_step_ms_median']:>10.3f} "
          f"{floor.get('decode_step_floor_ms', 0):>9.3f} {floor.get('decode_step_ratio_to_floor', 0):>6.2f} "
          f"{t['decode_tokens_per_s']:>9.0f} {t.get('decode_gpu_idle_us_median', -1):>8.1f} | "
          f"{hf.get('prefill_ms_median', 0):>10.2f} {hf.get('decode_step_ms_median', 0):>10.3f}")
PY
