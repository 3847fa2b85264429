#!/usr/bin/env bash
# Runs on the GPU machine: the device time of every kernel of one decode step, with Nsight
# Compute. `tachyon bench latency` runs twice under ncu (eager, one iteration, no warm-up), with N
# and N + 1 output tokens; tools/kernel_profile.py takes the second run's extra kernels as the
# step and prints them in launch order, with the total and the costliest names. ncu serializes
# the kernels, so the times have no overlap between kernels (the step in a CUDA graph is
# shorter: compare with `bench latency`'s decode step). Each run is first made once without ncu,
# so that the timed kernel choices are cached and the profiled run launches none of their timing.
# PREFILL=N profiles one N-token prefill instead: the runs are one and two iterations of an N-token
# prompt with one output token (each iteration draws new tokens, so nothing comes from the prefix
# cache), and the second run's extra kernels are one prefill.
#   scripts/gpu-profile.sh MODEL_DIR OUT_DIR [bench latency options, e.g. --batch-size 8]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:?usage: scripts/gpu-profile.sh MODEL_DIR OUT_DIR [bench latency options]}
OUT_DIR=${2:?usage: scripts/gpu-profile.sh MODEL_DIR OUT_DIR [bench latency options]}
shift 2
TACHYON=${TACHYON:-build-gpu/bin/tachyon}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/tachyon-cache}
mkdir -p "$OUT_DIR"
if [ -n "${PREFILL:-}" ]; then
  N=1 what="one $PREFILL-token prefill"
else
  N=${OUTPUT_LEN:-2} what="one decode step"
fi
for n in "$N" $((N + 1)); do
  if [ -n "${PREFILL:-}" ]; then  # n iterations of a PREFILL-token prompt and one output token
    shape=(--num-iters "$n" --input-len "$PREFILL" --output-len 1)
  else  # one iteration of a 16-token prompt and n output tokens
    shape=(--num-iters 1 --input-len 16 --output-len "$n")
  fi
  args=(bench latency "$MODEL" --device cuda --enforce-eager --num-iters-warmup 0 "${shape[@]}" "$@")
  "$TACHYON" "${args[@]}" > "$OUT_DIR/warm-$n.log" 2>&1
  "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT_DIR/ncu-$n.csv" \
    "$TACHYON" "${args[@]}" > "$OUT_DIR/run-$n.log" 2>&1
done
python3 tools/kernel_profile.py "$OUT_DIR/ncu-$N.csv" "$OUT_DIR/ncu-$((N + 1)).csv" --json "$OUT_DIR/step.json" \
  --what "$what"
