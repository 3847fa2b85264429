#!/usr/bin/env bash
# Runs on the GPU machine: `tachyon bench serve` (this tree's client for both) against
# `tachyon serve` of a base tree and of this tree, one after the other in one call, on the same
# random-weight model, so that a change to the serving path is compared on equal terms.
#   BASE_SRC=DIR bench/serve_vs_base.sh TACHYON_NEW OUT_DIR [MODEL_PRESET]
# BASE_SRC holds an earlier commit's src/ (git archive <commit> src | tar -x -C DIR); the base
# CLI is built from it into /tmp/tachyon-serve-base-build. Default: Llama-3.1-8B shape,
# concurrency 64, 1,024 tokens in and out (CONCURRENCY, INPUT_LEN, OUTPUT_LEN, NUM_PROMPTS).
set -euo pipefail
cd "$(dirname "$0")/.."
NEW=${1:?usage: BASE_SRC=DIR bench/serve_vs_base.sh TACHYON_NEW OUT_DIR [preset]}
OUT_DIR=${2:?usage}
PRESET=${3:-llama-3.1-8b}
BASE_SRC=${BASE_SRC:?set BASE_SRC}
CONCURRENCY=${CONCURRENCY:-64} INPUT_LEN=${INPUT_LEN:-1024} OUTPUT_LEN=${OUTPUT_LEN:-1024}
NUM_PROMPTS=${NUM_PROMPTS:-256}
MODEL=/tmp/tachyon-serve-bench-$PRESET
mkdir -p "$OUT_DIR"

BASE=/tmp/tachyon-serve-base-build/bin/tachyon
if [ ! -x "$BASE" ]; then
  base_tree=/tmp/tachyon-serve-base-tree
  rm -rf "$base_tree" && mkdir -p "$base_tree"
  cp -r CMakeLists.txt assets bench tests tools "$base_tree"/
  cp -r "$BASE_SRC" "$base_tree/src"
  cmake -S "$base_tree" -B /tmp/tachyon-serve-base-build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTACHYON_CUDA=ON \
    -DTACHYON_TESTS=OFF > "$OUT_DIR/base-build.log" 2>&1
  cmake --build /tmp/tachyon-serve-base-build -j "$(nproc)" --target tachyon_cli >> "$OUT_DIR/base-build.log" 2>&1
fi

# The server needs a tokenizer (Llama-3's, from third_party/tokenizers/models/llama3); the prompts
# are token ids below 32,000 either way.
[ -f "$MODEL/config.json" ] || "$NEW" make-model --arch llama --preset "$PRESET" --seed 0 --out "$MODEL" > /dev/null
[ -f "$MODEL/tokenizer.json" ] || cp third_party/tokenizers/models/llama3/tokenizer*.json "$MODEL"/
port=8765
for side in ${SIDES:-base new}; do
  port=$((port + 1))  # a port of its own: the previous server may still hold its own
  binary=$BASE
  [ $side = new ] && binary=$NEW
  "$binary" serve "$MODEL" --port $port --device cuda --max-model-len 4096 --max-num-seqs 256 \
    > "$OUT_DIR/serve-$side.log" 2>&1 &
  server=$!
  for _ in $(seq 600); do curl -sf localhost:$port/health > /dev/null 2>&1 && break; sleep 0.5; done
  "$NEW" bench serve --base-url http://127.0.0.1:$port --vocab-size 32000 --random-input-len "$INPUT_LEN" \
    --random-output-len "$OUTPUT_LEN" --random-range-ratio 0 --ignore-eos --num-prompts "$NUM_PROMPTS" \
    --max-concurrency "$CONCURRENCY" --num-warmups 8 --metric-percentiles 50,99 --result-dir "$OUT_DIR" --result-filename "serve-$side.json" \
    --no-progress > "$OUT_DIR/bench-$side.log" 2>&1 || tail -5 "$OUT_DIR/bench-$side.log"
  kill -TERM $server && wait $server || true
  grep -E "Failed requests|Output token throughput|Median TPOT|P99 TPOT|Median ITL|P99 ITL|Median TTFT" "$OUT_DIR/bench-$side.log" | sed "s/^/$side: /"
done
