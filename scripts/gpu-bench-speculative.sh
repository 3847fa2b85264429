#!/usr/bin/env bash
# Runs on the GPU machine after a CUDA build: speculative decoding's figures, each beside the same
# binary without speculation in the same call. Random-weight models at real shapes (so acceptance
# is forced: --speculative-forced-acceptance, the benchmark mode): the Llama-3.1-8B target with a
# Llama-3.2-1B draft, and the DeepSeek-V2-Lite shape with one MTP module drafting on the device
# (runs "dsl-*"; forced 0.81 gives DeepSeek's published mean acceptance length of 2.99 at k = 3:
# 1 + p + p^2 + p^3); the canary (trained) for real acceptance with the n-gram drafter and, when
# DRAFT_CANARY names a trained draft canary, the draft model; MTP_CANARY (a trained MTP canary,
# assets/canary-mtp) adds its plain and MTP runs.
#   scripts/gpu-bench-speculative.sh OUT_DIR        (TACHYON=build-gpu/bin/tachyon by default)
#   ONLY="8b-b1" ...  runs a subset of the bench runs
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: scripts/gpu-bench-speculative.sh OUT_DIR}
TACHYON=${TACHYON:-build-gpu/bin/tachyon}
MODELS=${MODELS:-/tmp/tachyon-bench-models}
mkdir -p "$OUT_DIR" "$MODELS"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/tachyon-cache}

make_model() {  # name arch preset
  [ -f "$MODELS/$1/config.json" ] || "$TACHYON" make-model --arch "$2" --preset "$3" --seed 0 --out "$MODELS/$1" > /dev/null
}
model_for() {  # run-name prefix -> the target model's directory, made on first use
  case $1 in
    8b) make_model llama-8b llama llama-3.1-8b; echo "$MODELS/llama-8b" ;;
    dsl) make_model dsl-mtp deepseek_v3 deepseek-v2-lite-mtp; echo "$MODELS/dsl-mtp" ;;
  esac
}

# name batch extra-args; every run: 128 prompt tokens, 256 generated.
DRAFT="--speculative-method draft --draft-model $MODELS/llama-1b --num-speculative-tokens 4"
MTP="--speculative-method mtp --num-speculative-tokens 3"
RUNS=(
  "8b-b1-plain 1"
  "8b-b1-draft4-forced1.0 1 $DRAFT --speculative-forced-acceptance 1"
  "8b-b1-draft4-forced0.8 1 $DRAFT --speculative-forced-acceptance 0.8"
  "8b-b1-draft4-exact 1 $DRAFT"
  "8b-b32-plain 32"
  "8b-b32-draft4-forced1.0 32 $DRAFT --speculative-forced-acceptance 1"
  "dsl-b1-plain 1"
  "dsl-b1-mtp3-forced1.0 1 $MTP --speculative-forced-acceptance 1"
  "dsl-b1-mtp3-forced0.81 1 $MTP --speculative-forced-acceptance 0.81"
  "dsl-b1-mtp3-exact 1 $MTP"
  "dsl-b32-plain 32"
  "dsl-b32-mtp3-forced0.81 32 $MTP --speculative-forced-acceptance 0.81"
)
for run in "${RUNS[@]}"; do
  read -r name batch extra <<< "$run"
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" ${name%%-*}-${batch} "* && " $ONLY " != *" $name "* ]]; then continue; fi
  model=$(model_for "${name%%-*}")
  [[ "$extra" == *"$MODELS/llama-1b"* ]] && make_model llama-1b llama llama-3.2-1b
  # shellcheck disable=SC2086  # extra is a list of options
  "$TACHYON" bench latency "$model" --device cuda --batch-size "$batch" --input-len 128 --output-len 256 \
    --num-iters 3 --num-iters-warmup 1 $extra --output-json "$OUT_DIR/$name.json" > "$OUT_DIR/$name.log" 2>&1 \
    || { echo "$name failed:"; tail -5 "$OUT_DIR/$name.log"; }
done

# The canary (real acceptance): plain, n-gram, and the draft canary when given; batch 1 decoding
# through the server with concurrency 1, so the eval's duration is the batch-1 speed.
if [ -z "${SKIP_CANARY:-}" ]; then
  CONCURRENCY=1 scripts/canary-eval.sh "$TACHYON" - "$OUT_DIR/canary-plain" 50 --device cuda > /dev/null
  CONCURRENCY=1 scripts/canary-speculative.sh "$TACHYON" "$OUT_DIR/canary-plain/eval.json" "$OUT_DIR/canary-ngram" 50 \
    --device cuda --speculative-method ngram --num-speculative-tokens 3 --ngram-min 1 --ngram-max 3 \
    | tee "$OUT_DIR/canary-ngram.txt"
  if [ -n "${MTP_CANARY:-}" ]; then
    CONCURRENCY=1 scripts/canary-eval.sh "$TACHYON" "$MTP_CANARY" "$OUT_DIR/canary-mtp-plain" 50 --device cuda > /dev/null
    CANARY_MODEL=$MTP_CANARY CONCURRENCY=1 scripts/canary-speculative.sh "$TACHYON" "$OUT_DIR/canary-mtp-plain/eval.json" \
      "$OUT_DIR/canary-mtp" 50 --device cuda --speculative-method mtp --num-speculative-tokens 3 \
      | tee "$OUT_DIR/canary-mtp.txt"
  fi
  if [ -n "${DRAFT_CANARY:-}" ]; then
    CONCURRENCY=1 scripts/canary-speculative.sh "$TACHYON" "$OUT_DIR/canary-plain/eval.json" "$OUT_DIR/canary-draft" 50 \
      --device cuda --speculative-method draft --num-speculative-tokens 3 --draft-model "$DRAFT_CANARY" \
      | tee "$OUT_DIR/canary-draft.txt"
  fi
fi

python3 - "$OUT_DIR" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
rows = {os.path.basename(p)[:-5]: json.load(open(p)) for p in glob.glob(f"{out}/*-b*-*.json")}
print(f"{'run':<26} {'decode tok/s':>12} {'vs plain':>8} {'step ms':>8} {'mean accept len':>15}")
for name in sorted(rows):
    r = rows[name]
    plain = rows.get(name.split("-")[0] + "-" + name.split("-")[1] + "-plain", r)
    spec = r.get("speculative", {})
    print(f"{name:<26} {r['decode_tokens_per_s']:>12.1f} {r['decode_tokens_per_s'] / plain['decode_tokens_per_s']:>8.2f} "
          f"{r['decode_step_ms_median']:>8.3f} {spec.get('mean_acceptance_length', 1.0):>15.2f}")
for name in ("plain", "ngram", "draft", "mtp-plain", "mtp"):
    path = f"{out}/canary-{name}/eval.json"
    if os.path.exists(path):
        e = json.load(open(path))
        print(f"canary {name:<6} strict {e['strict']['correct']}/{e['num_samples']}, {e['duration_s']:.2f} s")
PY
