#!/usr/bin/env bash
# End-to-end prefill/decode disaggregation on the CPU (docs/disaggregation.md): a prefill server,
# a decode server and `tachyon router` in front of them, beside a plain server, all on a tiny
# make-model model. 50 greedy requests (completions and chat, streamed and not, mixed lengths)
# through the router must equal the plain server's answers; then the prefill server is killed
# and every further answer must be the plain server's text or a clean error, never a 200 with
# other text. Finally the decode server must hold no KV (its free blocks back to the total).
# TACHYON_PD_DEVICE=cuda (the GPU machine) serves the tiny-gpu preset on the GPU: the prefill and
# decode servers share it, so the KV moves by reference (CUDA IPC), and every import must have.
# Servers start one after another, so the later ones load the kernel choices the first one timed.
#   run_pd.sh TACHYON TOKENIZERS_DIR
set -euo pipefail
TACHYON=$1
TOKENIZERS=$2
work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
DEVICE=${TACHYON_PD_DEVICE:-cpu}
PRESET=tiny TOKENIZER=qwen3
# The GPU needs a vocabulary of a multiple of 8; a tiny preset takes its tokenizer's (Llama 3's is).
[ "$DEVICE" = cuda ] && PRESET=tiny-gpu TOKENIZER=llama3
"$TACHYON" make-model --arch qwen3 --preset "$PRESET" --seed 3 --tokenizer "$TOKENIZERS/$TOKENIZER" --out "$work/model" > /dev/null
serve() {  # name, extra args...
  local name=$1; shift
  : > "$work/$name.log"
  # On the GPU each server takes a cache of its own size, not a share of what the others left.
  "$TACHYON" serve "$work/model" --device "$DEVICE" --port 0 --served-model-name tiny --max-model-len 512 --num-blocks 128 \
    $([ "$DEVICE" = cuda ] && echo --kv-cache-memory-bytes 134217728) "$@" > "$work/$name.log" 2>&1 &
  pids+=($!)
  eval "${name}_pid=$!"
}
port_of() {  # log file, pattern
  for _ in $(seq 1 1200); do
    port=$(sed -n "s/.*$2:\([0-9]*\).*/\1/p" "$1" | head -1)
    [ -n "$port" ] && { echo "$port"; return; }
    sleep 0.05
  done
  cat "$1" >&2; exit 1
}
# What --role has no test for is refused at start-up, in one line.
refused() {  # expected message, serve args...
  local want=$1; shift
  if "$TACHYON" serve "$work/model" --port 0 "$@" > "$work/refused.log" 2>&1; then echo "serve $* started"; exit 1; fi
  grep -q -- "$want" "$work/refused.log" || { echo "serve $*: no '$want' in:"; cat "$work/refused.log"; exit 1; }
}
refused "--role needs --device cpu or cuda" --role prefill
refused "--role on cuda needs a bf16 KV cache" --device cuda --role prefill --kv-cache-dtype fp8
refused "drafts belong to decoding" --device cpu --role prefill --speculative-method ngram --num-speculative-tokens 2
serve prefill --role prefill
prefill_port=$(port_of "$work/prefill.log" "serving tiny on http:\/\/127.0.0.1")
serve decode --role decode
decode_port=$(port_of "$work/decode.log" "serving tiny on http:\/\/127.0.0.1")
serve plain
plain_port=$(port_of "$work/plain.log" "serving tiny on http:\/\/127.0.0.1")
"$TACHYON" router --prefill "http://127.0.0.1:$prefill_port" --decode "http://127.0.0.1:$decode_port" --port 0 \
  > "$work/router.log" 2>&1 &
pids+=($!)
router_port=$(port_of "$work/router.log" "router on http:\/\/127.0.0.1")
export DEVICE PREFILL_PID=$prefill_pid ROUTER="http://127.0.0.1:$router_port" PLAIN="http://127.0.0.1:$plain_port" DECODE="http://127.0.0.1:$decode_port"
python3 - "$work" <<'PY'
import json, os, random, sys, time, urllib.request, urllib.error, subprocess

def post(base, path, body, stream):
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            raw = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        return e.code, None
    except (urllib.error.URLError, ConnectionError) as e:
        return -1, None
    if not stream:
        answer = json.loads(raw)
        c = answer["choices"][0]
        return status, c.get("text", c.get("message", {}).get("content"))
    text = ""
    for line in raw.split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if "error" in event:
            return 500, None  # a clean error frame
        c = event["choices"][0]
        text += c.get("text") or (c.get("delta") or {}).get("content") or ""
    return status, text

def wait_healthy(base):
    for _ in range(100):
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.1)
    sys.exit("router never became healthy")

rng = random.Random(7)
words = "the quick brown fox jumps over a lazy dog while seven tiny robots count prime numbers".split()
def request(i):
    prompt = " ".join(rng.choice(words) for _ in range(1 + rng.randrange(60)))
    body = {"model": "tiny", "max_tokens": 1 + rng.randrange(24), "temperature": 0, "stream": i % 2 == 1}
    if i % 3 == 0:
        return "/v1/chat/completions", dict(body, messages=[{"role": "user", "content": prompt}])
    return "/v1/completions", dict(body, prompt=prompt)

router, plain = os.environ["ROUTER"], os.environ["PLAIN"]
wait_healthy(router)
mismatches = 0
for i in range(50):
    path, body = request(i)
    got = post(router, path, body, body["stream"])
    want = post(plain, path, body, body["stream"])
    if got != want:
        mismatches += 1
        print(f"request {i}: router {got!r} != plain {want!r}")
print(f"50 requests through the router: {50 - mismatches} identical to the plain server")
if mismatches:
    sys.exit(1)

def metric(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
        for line in r.read().decode().split("\n"):
            if line.startswith(name + " "):
                return float(line.split()[-1])
    return None

imports = metric(os.environ["DECODE"], "tachyon:kv_transfer_imports_total")
by_reference = metric(os.environ["DECODE"], "tachyon:kv_reference_imports_total")
print(f"the decode server imported {imports:.0f} prompts, {by_reference:.0f} by reference")
if imports != 50 or by_reference != (50 if os.environ["DEVICE"] == "cuda" else 0):
    sys.exit("every prompt imported; by reference exactly when both servers share the GPU")

# The prefill server dies: answers stay right or fail cleanly.
subprocess.run(["kill", "-KILL", os.environ["PREFILL_PID"]], check=True)
time.sleep(0.2)
wrong = ok = errors = 0
for i in range(50, 70):
    path, body = request(i)
    status, text = post(router, path, body, body["stream"])
    _, want = post(plain, path, body, body["stream"])
    if status == 200 and text == want:
        ok += 1
    elif status == 200:
        wrong += 1
        print(f"request {i}: 200 with wrong text {text!r} (want {want!r})")
    else:
        errors += 1
print(f"after the prefill server died: {ok} correct, {errors} clean errors, {wrong} wrong")
if wrong or ok == 0:
    sys.exit(1)

# The decode server holds no KV once idle.
time.sleep(0.5)
with urllib.request.urlopen(os.environ["DECODE"] + "/metrics", timeout=5) as r:
    metrics = r.read().decode()
usage = None
for line in metrics.split("\n"):
    if line.startswith("tachyon:kv_cache_usage_perc"):
        usage = float(line.split()[-1])
print(f"decode server KV cache usage once idle: {usage}")
if usage != 0.0:
    sys.exit(1)
PY
