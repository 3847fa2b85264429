#!/usr/bin/env bash
# The multi-GPU runs (a machine with 2, 4 or 8 GPUs), everything into OUT_DIR:
#   1. scripts/gpu-tp-test.sh at every TP size the machine allows (2, 4, 8), on the Llama-3.1-8B and
#      Qwen3-8B shapes: the NCCL / peer / TP runner GPU tests, the two-node emulation, and the
#      batch-1 decode step at TP = 1 and TP = N (OUT_DIR/<preset>-tp<N>/tp*.json);
#   2. bench_collectives at world 2, 4, 8: all-reduce / all-gather bus bandwidth, 8 KB to 256 MB,
#      ours beside NCCL (OUT_DIR/collectives-world<N>.json);
#   3. `tachyon bench serve` against `tachyon serve` at TP = 1 and TP = every GPU on the 8B shape,
#      concurrency 1, 16 and 64 (OUT_DIR/serve-tp<N>-c<C>.json);
#   4. the DeepSeek-family reduced real shapes (deepseek-v3-reduced, deepseek-v32-reduced,
#      deepseek-v2-lite) at TP = 1 and every TP size: batch-1 decode with a 2,048-token prefill
#      and batch-32 decode (OUT_DIR/<preset>-tp<N>-b<B>.json);
#   5. bench_topk_exchange at DCP 2, 4, 8: the sparse indexer's candidate gather, 24 per CUDA
#      graph, rows 16-512 of [rows, 2048] int32, ours beside NCCL, bit-identity on every rank
#      (OUT_DIR/topk-exchange-dcp<N>.json).
# Step 1 also runs the DCP, PCP and DP groups and expert parallelism across GPUs
# (gpu_tp_cuda_runner's `separate` and `_ep` cases, gpu_pcp_cuda_runner's and gpu_dp_cuda_runner's
# `separate` cases); the CLI refuses --dcp, --pcp, --dp and --enable-expert-parallel across GPUs
# until they have passed, so their timings (DCP against TP at 8K / 32K / 128K, PCP TTFT, DP and
# EP against TP) come after.
#   scripts/gpu-multi-runs.sh OUT_DIR
# Needs .deps/ and third_party/tokenizers/models/llama3 carried. Multicast stays off
# (docs/parallelism.md). Each step is time-bounded, so one hang cannot take the whole run.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: scripts/gpu-multi-runs.sh OUT_DIR}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/tachyon-cache}
mkdir -p "$OUT_DIR"
GPUS=$(nvidia-smi -L | wc -l)
SIZES=()
for n in 2 4 8; do [ "$n" -le "$GPUS" ] && SIZES+=("$n"); done
[ ${#SIZES[@]} -gt 0 ] || { echo "gpu-multi-runs: needs at least 2 GPUs, this machine has $GPUS"; exit 1; }
status=0

for spec in llama:llama-3.1-8b qwen3:qwen3-8b; do
  arch=${spec%%:*} preset=${spec#*:}
  for tp in "${SIZES[@]}"; do
    echo "== $preset, TP $tp"
    timeout 900 scripts/gpu-tp-test.sh "$OUT_DIR/$preset-tp$tp" "$tp" "$preset" "$arch" || status=1
  done
done

cmake --build build-gpu -j "$(nproc)" --target bench_collectives bench_topk_exchange > "$OUT_DIR/build-bench.log" 2>&1 \
  || { tail -20 "$OUT_DIR/build-bench.log"; exit 1; }
for n in "${SIZES[@]}"; do
  echo "== collectives, world $n"
  timeout 300 build-gpu/bin/bench_collectives --world "$n" --json "$OUT_DIR/collectives-world$n.json" \
    > "$OUT_DIR/collectives-world$n.log" 2>&1 || status=1
  grep -E " (8192|1048576|33554432|268435456) B" "$OUT_DIR/collectives-world$n.log"
  echo "== top-k exchange, DCP $n"
  timeout 300 build-gpu/bin/bench_topk_exchange --world "$n" --json "$OUT_DIR/topk-exchange-dcp$n.json" || status=1
done

# The DeepSeek-family layouts at their reduced real shapes: TP = 1 against every TP size.
for spec in deepseek_v3:deepseek-v3-reduced deepseek_v32:deepseek-v32-reduced deepseek_v3:deepseek-v2-lite; do
  arch=${spec%%:*} preset=${spec#*:}
  model=/tmp/tachyon-tp-models/$preset
  [ -f "$model/config.json" ] || build-gpu/bin/tachyon make-model --arch "$arch" --preset "$preset" --seed 0 \
    --out "$model" > /dev/null
  for tp in 1 "${SIZES[@]}"; do
    for shape in "1 2048 64" "32 1024 64"; do
      read -r batch input output <<< "$shape"
      out="$OUT_DIR/$preset-tp$tp-b$batch"
      timeout 300 build-gpu/bin/tachyon bench latency "$model" --device cuda --tp "$tp" \
        --batch-size "$batch" --input-len "$input" --output-len "$output" --num-iters 3 --num-iters-warmup 1 \
        --output-json "$out.json" > "$out.log" 2>&1 \
        || { echo "$preset --tp $tp batch $batch failed:"; tail -3 "$out.log"; status=1; continue; }
      echo "-- $preset TP $tp batch $batch:"
      grep -E '"(decode_step_ms_median|decode_step_floor_ms|prefill_ms_median)"' "$out.log"
    done
  done
done

# Serving: a random-weight 8B model with the Llama 3 tokenizer, TP 1 and TP = every GPU.
model=/tmp/tachyon-tp-models/llama-3.1-8b-served
[ -f "$model/config.json" ] || build-gpu/bin/tachyon make-model --arch llama --preset llama-3.1-8b --seed 0 \
  --tokenizer third_party/tokenizers/models/llama3 --out "$model" > /dev/null
for tp in 1 "$GPUS"; do
  build-gpu/bin/tachyon serve "$model" --device cuda --tp "$tp" --port 0 --served-model-name m \
    > "$OUT_DIR/serve-tp$tp.log" 2>&1 &
  server=$!
  port=""
  for _ in $(seq 1 600); do
    port=$(sed -n 's/.*serving m on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$OUT_DIR/serve-tp$tp.log")
    [ -n "$port" ] && break
    sleep 0.5
  done
  if [ -z "$port" ]; then echo "serve --tp $tp did not start"; tail -5 "$OUT_DIR/serve-tp$tp.log"; kill $server; status=1; continue; fi
  for c in 1 16 64; do
    timeout 300 build-gpu/bin/tachyon bench serve --host 127.0.0.1 --port "$port" --model m --random-input-len 1024 \
      --random-output-len 128 --vocab-size 128000 --num-prompts $((c * 8)) --max-concurrency "$c" --ignore-eos \
      --num-warmups "$c" --save-result --result-filename "$OUT_DIR/serve-tp$tp-c$c.json" \
      > "$OUT_DIR/serve-tp$tp-c$c.log" 2>&1 || status=1
    echo "-- serve TP $tp, concurrency $c:"; grep -iE "throughput|TTFT|ITL" "$OUT_DIR/serve-tp$tp-c$c.log" | head -6
  done
  kill -TERM $server; wait $server
done
exit $status
