"""A prefill/decode cluster on the CPU for the server.pd_* tests (docs/disaggregation.md):
prefill and decode servers and `tachyon router` on a tiny make-model model, each a process on a
free port, with helpers to post requests, read /metrics and wait for a condition.
    cluster = Cluster(tachyon, tokenizers_dir)
    prefill = cluster.serve("prefill", "--role", "prefill")
    router = cluster.router([prefill], [decode], "--policy", "prefix")
    ...
    cluster.close()   # kills every process it started
TACHYON_PD_DEVICE=cuda (scripts/gpu-test.sh on the GPU machine) runs the servers on the GPU with the
tiny-gpu preset (and Llama 3's tokenizer: the GPU needs a vocabulary of a multiple of 8): the prefill and decode servers share the GPU, so the KV moves by reference
(CUDA IPC). Servers start one after another, so the later ones load the kernel choices the first
one timed (one plan, one set of kernels: text for text equal to the plain server's).
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor


DEVICE = os.environ.get("TACHYON_PD_DEVICE", "cpu")
# TACHYON_PD_KV_TRANSPORT=tcp|ucx: every prefill and decode server gets --kv-transport so
# (server.pd_*_ucx); unset: the default, auto.
KV_TRANSPORT = os.environ.get("TACHYON_PD_KV_TRANSPORT", "auto")
PRESET = "tiny-gpu" if DEVICE == "cuda" else "tiny"
# A tiny preset takes its tokenizer's vocabulary, which the GPU needs a multiple of 8: Llama 3's is.
TOKENIZER = "llama3" if DEVICE == "cuda" else "qwen3"


def gpu_cache_args(model_dir, num_blocks, block_size=16):
    """The CUDA runner sizes its cache from --gpu-memory-utilization, a share of the whole GPU that
    the first server would take; each server on the shared GPU gets the bytes of `num_blocks`
    blocks instead (--num-blocks on the CPU), so a test's caps and shares mean the same there."""
    if DEVICE != "cuda":
        return []
    c = json.load(open(os.path.join(model_dir, "config.json")))
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    per_token = c["num_hidden_layers"] * c["num_key_value_heads"] * head_dim * 2 * 2  # K and V, bf16
    return ["--kv-cache-memory-bytes", str(num_blocks * block_size * per_token)]


class Process:
    def __init__(self, name, args, log, pattern):
        self.name, self.args, self.log_path, self.pattern = name, args, log, pattern
        self.start()

    def start(self):
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None
        for _ in range(1200):
            text = open(self.log_path).read()
            match = re.search(self.pattern + r":(\d+)", text)
            if match:
                self.port = int(match.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.port is None:
            sys.exit(f"{self.name} did not start:\n" + open(self.log_path).read())
        self.url = f"http://127.0.0.1:{self.port}"

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait()


class Cluster:
    def __init__(self, tachyon, tokenizers, max_model_len=4096, canary=False, model=None):
        """canary: serve the built-in default model (the canary linked into the binary) instead of
        a tiny make-model one; model: serve that model directory instead."""
        self.tachyon = tachyon
        self.work = tempfile.mkdtemp(prefix="tachyon-pd-")
        self.model = model or (None if canary else os.path.join(self.work, "model"))
        self.max_model_len = max_model_len
        self.processes = []
        if not canary and model is None:
            subprocess.run([tachyon, "make-model", "--arch", "qwen3", "--preset", PRESET, "--seed", "3", "--tokenizer",
                            os.path.join(tokenizers, TOKENIZER), "--out", self.model], check=True,
                           stdout=subprocess.DEVNULL)

    def serve(self, name, *args, port=0):
        cmd = [self.tachyon, "serve"] + ([self.model] if self.model else []) + ["--device", DEVICE, "--port", str(port),
               "--served-model-name", "tiny", "--max-model-len", str(self.max_model_len), "--num-blocks", "512",
               *(gpu_cache_args(self.model, 512) if self.model else []), *args]
        if "--role" in args and KV_TRANSPORT != "auto" and "--kv-transport" not in args:
            cmd += ["--kv-transport", KV_TRANSPORT]
        p = Process(name, cmd, os.path.join(self.work, name + ".log"), r"serving tiny on http://127\.0\.0\.1")
        self.processes.append(p)
        return p

    def router(self, prefill, decode, *args, health_interval_ms=100, name="router"):
        cmd = [self.tachyon, "router", "--port", "0", "--health-interval-ms", str(health_interval_ms)]
        for p in prefill:
            cmd += ["--prefill", p.url]
        for d in decode:
            cmd += ["--decode", d.url]
        p = Process(name, cmd + list(args), os.path.join(self.work, name + ".log"),
                    r"router on http://127\.0\.0\.1")
        self.processes.append(p)
        wait_until(lambda: get(p.url + "/health")[0] == 200, 20, "the router never became healthy")
        return p

    def close(self):
        for p in self.processes:
            p.kill()
        shutil.rmtree(self.work, ignore_errors=True)


def get(url, timeout=10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, socket.timeout):
        return -1, ""


def post(base, path, body, timeout=120):
    """(status, text or None, headers); a streamed answer's error event gives status 500."""
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status, headers = r.read().decode(), r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, None, dict(e.headers)
    except (urllib.error.URLError, ConnectionError, socket.timeout):
        return -1, None, {}
    if not body.get("stream"):
        answer = json.loads(raw)
        if "error" in answer:
            return 500, None, headers
        if "choices" not in answer:  # a prefill server's lease
            return status, answer, headers
        c = answer["choices"][0]
        return status, c.get("text", c.get("message", {}).get("content")), headers
    text = ""
    for line in raw.split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if "error" in event:
            return 500, None, headers
        c = event["choices"][0]
        text += c.get("text") or (c.get("delta") or {}).get("content") or ""
    return status, text, headers


def metric(url, name, labels=""):
    """The sum of the samples of `name` whose labels contain `labels`; None when unreachable."""
    status, text = get(url + "/metrics")
    if status != 200:
        return None
    total = 0.0
    for line in text.split("\n"):
        if line.startswith(name + "{") or line.startswith(name + " "):
            head = line.rsplit(" ", 1)[0]
            if labels in head and head.split("{")[0] == name:
                total += float(line.rsplit(" ", 1)[1])
    return total


def greedy_request(i, prompt, max_tokens):
    """Request i of a mixed greedy load: every third a chat completion, every second streamed."""
    body = {"model": "tiny", "max_tokens": max_tokens, "temperature": 0, "stream": i % 2 == 1}
    if i % 3 == 0:
        return "/v1/chat/completions", dict(body, messages=[{"role": "user", "content": prompt}])
    return "/v1/completions", dict(body, prompt=prompt)


def answers(url, requests, at_once=16):
    """Each request's (status, text) from the server at url, at_once of them in flight."""
    with ThreadPoolExecutor(at_once) as pool:
        return list(pool.map(lambda r: post(url, *r)[:2], requests))


def expect_refused(tachyon, model, args):
    """Exits unless `tachyon serve MODEL args` refuses to start with one line naming --role."""
    run = subprocess.run([tachyon, "serve", model, "--port", "0", *args], capture_output=True, text=True, timeout=60)
    lines = (run.stdout + run.stderr).strip().splitlines()
    if run.returncode == 0 or len(lines) != 1 or not lines[0].startswith("error: --role"):
        sys.exit(f"serve {' '.join(args)}: expected a one-line refusal, got {run.returncode}: {lines}")
    print(f"refused: {lines[0]}")


def expect_same_answers(name, got, want, near_ties=0, agree_share=0.5):
    """Exits (printing the first differences) unless got equals want answer for answer. With
    near_ties > 0, up to that many answers may differ, each only after the first agree_share of the
    plain answer's text (a late near-tie decided the other way: the runs' sums were ordered
    differently; a wrong KV row differs from the first tokens on)."""
    mismatches = [i for i in range(len(want)) if got[i] != want[i]]
    for i in mismatches[:5]:
        print(f"{name} request {i}: {got[i]!r} != plain {want[i]!r}")
    print(f"{name}: {len(want) - len(mismatches)} of {len(want)} identical to the plain server")
    def same_start(i):
        start = int(len(want[i][1]) * agree_share)
        return got[i][0] == want[i][0] and got[i][1][:start] == want[i][1][:start]

    early = [i for i in mismatches if not same_start(i)]
    if len(mismatches) > near_ties or early:
        sys.exit(1)


def kv_usage(server):
    return metric(server.url, "tachyon:kv_cache_usage_perc")


def wait_until(condition, seconds, message):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.02)
    sys.exit(message)


def kill_prefill_during(router, prefill, plain, body, ready, waiting_for):
    """Posts `body` through the router on a thread, waits (30 s) until `ready()`, kills the prefill
    server (SIGKILL) and compares the client's answer with the plain server's: exits unless it is
    the same text or a clean error (500, 503), never a 200 with other text. Returns the client's
    (status, text). `waiting_for` names the condition for the message when it never holds."""
    got = {}
    client = threading.Thread(target=lambda: got.update(answer=post(router.url, "/v1/completions", body)))
    client.start()
    wait_until(ready, 30, f"never saw {waiting_for}")
    prefill.kill()
    client.join()
    want = post(plain.url, "/v1/completions", body)
    status, text = got["answer"][:2]
    print(f"streamed {body.get('stream', False)}: prefill server killed after {waiting_for}; "
          f"the client got {status} {text!r}")
    if status == 200 and text != want[1]:
        sys.exit(f"a 200 with other text than one server's {want[1]!r}")
    if status not in (200, 500, 503):
        sys.exit("neither the right answer nor a clean error")
    return status, text


def raw_request(port, path, body, source="127.0.0.1", headers=()):
    """Sends a POST on a fresh socket from `source` (any 127/8 address) with extra `headers`
    (name, value) and returns the socket unread (the caller hangs up)."""
    data = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), source_address=(source, 0))
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def status_of(s):
    """The status code of the answer on a raw_request socket (its head only is read)."""
    s.settimeout(60)
    head = b""
    while b"\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    return int(head.split()[1]) if head.startswith(b"HTTP/") else 0


def hang_up(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # reset, at once
    s.close()
