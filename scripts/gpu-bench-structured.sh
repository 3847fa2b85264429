#!/usr/bin/env bash
# Runs on the GPU machine after a CUDA build: issue 22's two structured-output speed figures, in
# one JSON (OUT_DIR/structured.json, with the commands) and a summary line each.
#  1. "The first mask of a new schema is ready within 50 ms": compile + first mask (a fresh
#     compiler, nothing cached) of every accepted schema of the corpus
#     (tests/data/structured/schema_corpus.json) over Llama-3's 128K vocabulary, on the host
#     (bench_structured_masks --corpus): the median and the max over the schemas.
#  2. "At batch 64 with a 128K vocabulary, constrained decode costs at most 5% more per step than
#     unconstrained": `tachyon bench serve` against `tachyon serve --device cuda` on the
#     Llama-3.1-8B shape (random weights, the Llama-3 tokenizer), concurrency 64, once plain
#     (--ignore-eos) and once with every request under a JSON schema; the per-output-token time
#     (TPOT median) of each and their ratio. The schema (tests/data/structured/bench_long_records.json,
#     an array of at least 64 records) cannot end before max_tokens, so both runs generate exactly
#     the same number of tokens (a constraint refuses ignore_eos: the grammar decides the end); the
#     script fails if they do not.
#   scripts/gpu-bench-structured.sh OUT_DIR     (TACHYON=build-gpu/bin/tachyon, MASKS=build-gpu/bin/bench_structured_masks)
# The same pieces on the CPU, a check that the commands run (never a figure): DEVICE=cpu, which
# also shrinks the defaults below (the tiny preset, 8 prompts of 16 tokens, concurrency 4):
#   DEVICE=cpu TACHYON=build/bin/tachyon MASKS=build/bin/bench_structured_masks scripts/gpu-bench-structured.sh OUT_DIR
# Knobs: PRESET, CONCURRENCY, NUM_PROMPTS, INPUT_LEN, OUTPUT_LEN, SERVE_ARGS, MODELS (model cache).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: scripts/gpu-bench-structured.sh OUT_DIR}
DEVICE=${DEVICE:-cuda}
TACHYON=${TACHYON:-build-gpu/bin/tachyon}
MASKS=${MASKS:-build-gpu/bin/bench_structured_masks}
MODELS=${MODELS:-/tmp/tachyon-bench-models}
TOKENIZER=third_party/tokenizers/models/llama3
CORPUS=tests/data/structured/schema_corpus.json
SCHEMA=tests/data/structured/bench_long_records.json
if [ "$DEVICE" = cpu ]; then
  PRESET=${PRESET:-tiny} CONCURRENCY=${CONCURRENCY:-4} NUM_PROMPTS=${NUM_PROMPTS:-8}
  INPUT_LEN=${INPUT_LEN:-16} OUTPUT_LEN=${OUTPUT_LEN:-16} SERVE_ARGS=${SERVE_ARGS:---max-model-len 512 --num-blocks 256}
else
  PRESET=${PRESET:-llama-3.1-8b} CONCURRENCY=${CONCURRENCY:-64} NUM_PROMPTS=${NUM_PROMPTS:-192}
  INPUT_LEN=${INPUT_LEN:-128} OUTPUT_LEN=${OUTPUT_LEN:-256} SERVE_ARGS=${SERVE_ARGS:-}
fi
mkdir -p "$OUT_DIR" "$MODELS"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/tachyon-cache}
commands=()
run() {  # logs the command for the JSON, then runs it (in this shell: not in a pipe or with &)
  commands+=("$*")
  "$@"
}

# 1. Compile + first mask over the corpus.
run "$MASKS" --tokenizer "$TOKENIZER" --corpus "$CORPUS" --json "$OUT_DIR/first_mask.json" > "$OUT_DIR/first_mask.log"

# 2. The served step, plain and constrained, against one server.
model="$MODELS/llama-$PRESET-llama3tok"
[ -f "$model/config.json" ] ||
  run "$TACHYON" make-model --arch llama --preset "$PRESET" --seed 0 --tokenizer "$TOKENIZER" --out "$model" > /dev/null
: > "$OUT_DIR/serve.log"  # exists before the server's redirect does: the loop below may read it first
commands+=("$TACHYON serve $model --device $DEVICE --port 0 --served-model-name m $SERVE_ARGS")
# shellcheck disable=SC2086  # SERVE_ARGS is a list of options
"$TACHYON" serve "$model" --device "$DEVICE" --port 0 --served-model-name m $SERVE_ARGS > "$OUT_DIR/serve.log" 2>&1 &
server=$!
trap 'kill $server 2> /dev/null || true' EXIT
for _ in $(seq 1 1800); do  # a cold GPU start tunes its GEMMs first
  port=$(sed -n 's/.*serving m on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$OUT_DIR/serve.log")
  [ -n "$port" ] && break
  kill -0 $server 2> /dev/null || break
  sleep 0.05
done
if [ -z "${port:-}" ]; then echo "serve did not start:"; tail -20 "$OUT_DIR/serve.log"; exit 1; fi
bench=("$TACHYON" bench serve --host 127.0.0.1 --port "$port" --model m --random-input-len "$INPUT_LEN"
       --random-output-len "$OUTPUT_LEN" --random-range-ratio 0 --num-prompts "$NUM_PROMPTS"
       --max-concurrency "$CONCURRENCY" --num-warmups "$CONCURRENCY" --no-progress)
run "${bench[@]}" --ignore-eos --result-filename "$OUT_DIR/plain.json" > "$OUT_DIR/plain.log" 2>&1
run "${bench[@]}" --response-format json_schema --json-schema "$SCHEMA" --result-filename "$OUT_DIR/json_schema.json" \
  > "$OUT_DIR/json_schema.log" 2>&1
kill -TERM $server
wait $server || { echo "serve exited with $?:"; tail -20 "$OUT_DIR/serve.log"; exit 1; }
trap - EXIT

printf '%s\n' "${commands[@]}" > "$OUT_DIR/commands.txt"
python3 - "$OUT_DIR" "$DEVICE" "$PRESET" "$CONCURRENCY" "$OUTPUT_LEN" "$SCHEMA" <<'PY'
import json, sys
out, device, preset, concurrency, output_len, schema = sys.argv[1:7]
first = json.load(open(f"{out}/first_mask.json"))
runs = {name: json.load(open(f"{out}/{name}.json")) for name in ("plain", "json_schema")}
problems = []
for name, r in runs.items():
    if r["failed"] or r["completed"] != r["num_prompts"]:
        problems.append(f"{name}: {r['failed']} of {r['num_prompts']} requests failed")
    if any(n != int(output_len) for n in r["output_lens"]):
        problems.append(f"{name}: output lengths {sorted(set(r['output_lens']))}, not all {output_len}")
ratio = runs["json_schema"]["median_tpot_ms"] / runs["plain"]["median_tpot_ms"]
report = {
    "what": "issue 22's structured-output speed figures (scripts/gpu-bench-structured.sh)",
    "device": device,
    "first_mask_of_a_new_schema": {**first, "goal_ms": 50, "tokenizer": "llama3 (128,256 tokens)"},
    "constrained_decode": {
        "model": f"llama {preset}, random weights, llama3 tokenizer", "concurrency": int(concurrency),
        "output_tokens_per_request": int(output_len), "schema": schema,
        **{f"{name}_{key}": r[key] for name, r in runs.items()
           for key in ("median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "output_throughput", "total_output_tokens")},
        "tpot_ratio_json_schema_over_plain": ratio, "goal_ratio": 1.05,
    },
    "commands": open(f"{out}/commands.txt").read().splitlines(),
    "problems": problems,
}
json.dump(report, open(f"{out}/structured.json", "w"), indent=1)
print(f"first mask of a new schema: median {first['compile_and_first_mask_ms_median']:.3f} ms, "
      f"max {first['compile_and_first_mask_ms_max']:.3f} ms over {first['schemas']} schemas (goal 50 ms)")
print(f"TPOT median: plain {runs['plain']['median_tpot_ms']:.3f} ms, json_schema {runs['json_schema']['median_tpot_ms']:.3f} ms, "
      f"ratio {ratio:.3f} (goal 1.05) at concurrency {concurrency}, {output_len} tokens each")
for p in problems:
    print("problem:", p)
sys.exit(1 if problems else 0)
PY
