#!/usr/bin/env bash
# Runs on the GPU machine: one `tachyon serve` on a random-weight model at a real shape, and
# `tachyon bench serve` against it at each concurrency of a sweep (1K in / 1K out by default),
# one result JSON per concurrency plus the server's /metrics after each, then a table.
#   bench/serve_sweep.sh TACHYON OUT_DIR [serve options, e.g. --quantization fp8]
# Environment: PRESET (llama-3.1-8b), CONCURRENCIES ("1 16 64 128 256"), WAVES (2: prompts per
# concurrency = WAVES x concurrency, at least 4), INPUT_LEN / OUTPUT_LEN (1024), LABEL (serve),
# MAX_NUM_SEQS (256: the server's sequences a step; raise it with a concurrency above 256), DEVICE
# (cuda; cpu with a tiny PRESET checks the script).
set -euo pipefail
cd "$(dirname "$0")/.."
TACHYON=${1:?usage: bench/serve_sweep.sh TACHYON OUT_DIR [serve options]}
OUT_DIR=${2:?usage: bench/serve_sweep.sh TACHYON OUT_DIR [serve options]}
shift 2
PRESET=${PRESET:-llama-3.1-8b}
CONCURRENCIES=${CONCURRENCIES:-1 16 64 128 256}
WAVES=${WAVES:-2}
INPUT_LEN=${INPUT_LEN:-1024} OUTPUT_LEN=${OUTPUT_LEN:-1024}
LABEL=${LABEL:-serve}
MODEL=${MODEL:-/tmp/tachyon-serve-bench-$PRESET}
PORT=${PORT:-8790}
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/tachyon-cache}
mkdir -p "$OUT_DIR"

[ -f "$MODEL/config.json" ] || "$TACHYON" make-model --arch llama --preset "$PRESET" --seed 0 --out "$MODEL" > /dev/null
# The server needs a tokenizer; the prompts are token ids either way.
[ -f "$MODEL/tokenizer.json" ] || cp third_party/tokenizers/models/llama3/tokenizer*.json "$MODEL"/

max_len=$((INPUT_LEN + OUTPUT_LEN + 64))
"$TACHYON" serve "$MODEL" --port "$PORT" --device "${DEVICE:-cuda}" --max-model-len "$max_len" \
  --max-num-seqs "${MAX_NUM_SEQS:-256}" "$@" \
  > "$OUT_DIR/$LABEL-server.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2> /dev/null; wait $server 2> /dev/null || true' EXIT
for _ in $(seq 600); do curl -sf "localhost:$PORT/health" > /dev/null 2>&1 && break; sleep 0.5; done
curl -sf "localhost:$PORT/health" > /dev/null || { echo "server did not start:"; tail -5 "$OUT_DIR/$LABEL-server.log"; exit 1; }

for c in $CONCURRENCIES; do
  prompts=$((WAVES * c))
  [ $prompts -lt 4 ] && prompts=4
  "$TACHYON" bench serve --base-url "http://127.0.0.1:$PORT" --random-input-len "$INPUT_LEN" \
    --random-output-len "$OUTPUT_LEN" --random-range-ratio 0 --ignore-eos --num-prompts $prompts \
    --max-concurrency "$c" --num-warmups 2 --metric-percentiles 50,99 --result-dir "$OUT_DIR" \
    --result-filename "$LABEL-c$c.json" --no-progress > "$OUT_DIR/$LABEL-c$c.log" 2>&1 \
    || { echo "$LABEL c=$c failed:"; tail -5 "$OUT_DIR/$LABEL-c$c.log"; }
  curl -sf "localhost:$PORT/metrics" > "$OUT_DIR/$LABEL-c$c.metrics" || true
done

python3 - "$OUT_DIR" "$LABEL" <<'PY'
import glob, json, re, sys
out, label = sys.argv[1], sys.argv[2]
print(f"{label}: {'conc':>5} {'out tok/s':>10} {'med TTFT ms':>12} {'med TPOT ms':>12} {'p99 ITL ms':>11} {'failed':>6}")
rows, summary = [], {}
for path in glob.glob(f"{out}/{label}-c*.json"):
    c = int(re.search(r"-c(\d+)\.json$", path).group(1))
    rows.append((c, json.load(open(path))))
for c, r in sorted(rows):
    print(f"{label}: {c:>5} {r.get('output_throughput', 0):>10.0f} {r.get('median_ttft_ms', 0):>12.1f} "
          f"{r.get('median_tpot_ms', 0):>12.2f} {r.get('p99_itl_ms', 0):>11.2f} {r.get('failed', 0):>6}")
    summary[c] = {k: v for k, v in r.items() if not isinstance(v, (list, dict))}
    try:  # the server's counters after this concurrency (cumulative over the sweep)
        for line in open(f"{out}/{label}-c{c}.metrics"):
            name = line.split("{")[0].split(" ")[0]
            if name in ("tachyon:iteration_tokens_count", "tachyon:iteration_tokens_sum",
                        "tachyon:num_preemptions_total", "tachyon:generation_tokens_total"):
                summary[c][name] = float(line.split()[-1])
    except OSError:
        pass
# The scalars of every run in one file (the per-request lists stay in the per-concurrency files).
json.dump(summary, open(f"{out}/{label}-summary.json", "w"), indent=1, sort_keys=True)
PY
