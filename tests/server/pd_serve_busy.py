"""server.pd_serve_busy: KV pulls that a prefill server holds cannot lock a decode server out.
A decode server pulls each request's prompt KV from the prefill server's KV port, for as long as
the prompt runs there. This script stands in for that port: it accepts every pull, reads its
request and then sends only heartbeats (so the pull stays open, as a slow prefill server's does)
until released. Requests posted straight to the decode server with an X-Tachyon-Kv header naming
the stand-in: more than the decode server has HTTP workers, and 2 more than its
--kv-pull-max-waiting. Every pull up to that bound must be held at once (the pulls run on threads
of their own, not on the workers), the 2 past it must get 503 with Retry-After at once, and while
the stand-in still holds every pull (checked before and after) the decode server's /metrics,
/health and a plain request (no header: its prompt computed there) answer. Then each held pull gets
an error frame, the decode server computes those prompts itself and every held request ends 200.
With the pulls on the workers again, only as many pulls as workers are ever held and the test
fails (and a plain request would wait behind them); with /metrics and /health on the worker pool
they wait too (the 20 s bound on each answer only turns a hang into a failure).
    pd_serve_busy.py TACHYON TOKENIZERS_DIR"""
import json
import os
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.request

from pd_cluster import Cluster, get, metric, post, wait_until

# The serve side's HTTP workers (server/http/http_listener.cpp: max(4, 2 x cores)).
WORKERS = max(4, 2 * os.cpu_count())
MAX_WAITING = WORKERS + 4  # --kv-pull-max-waiting: more pulls than workers
REQUESTS = MAX_WAITING + 2

# server/pd_transport.h: "TKV1" u32 | status u32 | body_len u64 | body | xxh3_64(body) u64.
MAGIC = struct.unpack("<I", b"TKV1")[0]
XXH3_EMPTY = 0x2D06800538D394C2  # xxh3_64 of an empty body
REQUEST_BYTES = 24               # magic u32, op u32, epoch u64, request_id u64


def empty_frame(status):
    return struct.pack("<IIQQ", MAGIC, status, 0, XXH3_EMPTY)


class StandInKvPort:
    """Holds every pull: heartbeats (status 4) until released, then an error frame (status 1)."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.held = 0
        self.release = threading.Event()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.hold, args=(conn,), daemon=True).start()

    def hold(self, conn):
        with conn:
            data = b""
            while len(data) < REQUEST_BYTES:
                more = conn.recv(REQUEST_BYTES - len(data))
                if not more:
                    return
                data += more
            with self.lock:
                self.held += 1
            try:
                while not self.release.wait(0.25):
                    conn.sendall(empty_frame(4))
                conn.sendall(empty_frame(1))
            except OSError:
                pass
            with self.lock:
                self.held -= 1


def post_with_source(url, i, kv_port, results):
    body = {"model": "tiny", "prompt": f"request {i} waits on a KV pull", "max_tokens": 4, "temperature": 0}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json", "X-Tachyon-Kv": f"127.0.0.1:{kv_port}:1:{i}"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()
            results.append(r.status)
    except urllib.error.HTTPError as e:
        results.append(f"{e.code} Retry-After {e.headers.get('Retry-After')}")
    except Exception as e:  # noqa: BLE001 (any failure is a wrong status here)
        results.append(repr(e))


kv_port = StandInKvPort()
cluster = Cluster(sys.argv[1], sys.argv[2])
try:
    decode = cluster.serve("decode", "--role", "decode", "--kv-pull-max-waiting", str(MAX_WAITING))
    results = []
    clients = [threading.Thread(target=post_with_source, args=(decode.url, i, kv_port.port, results))
               for i in range(REQUESTS)]
    for c in clients:
        c.start()
    wait_until(lambda: kv_port.held == MAX_WAITING, 60,
               f"the decode server never held {MAX_WAITING} pulls at once (it has {WORKERS} HTTP workers): "
               "its pulls wait on its workers")
    wait_until(lambda: len(results) == REQUESTS - MAX_WAITING, 20, "the requests past the bound were not answered")
    refused = list(results)
    print(f"{MAX_WAITING} pulls held, past the bound: {refused}")
    if refused != ["503 Retry-After 1"] * (REQUESTS - MAX_WAITING):
        sys.exit("the requests past --kv-pull-max-waiting should get 503 with Retry-After at once")
    start = time.monotonic()
    metrics = get(decode.url + "/metrics", timeout=20)
    health = get(decode.url + "/health", timeout=20)
    plain = post(decode.url, "/v1/completions", {"model": "tiny", "prompt": "a plain request", "max_tokens": 4,
                                                 "temperature": 0}, timeout=20)
    still_held = kv_port.held
    print(f"with {still_held} pulls held ({WORKERS} workers): /metrics {metrics[0]}, /health {health[0]}, "
          f"a plain request {plain[0]} ({time.monotonic() - start:.3f} s)")
    if metrics[0] != 200 or "tachyon:kv_transfer_imports_total" not in metrics[1]:
        sys.exit("the decode server's /metrics did not answer while its pulls were held")
    if health[0] != 200:
        sys.exit("the decode server's /health did not answer while its pulls were held")
    if plain[0] != 200 or not plain[1]:
        sys.exit("a plain request to the decode server got no answer while its pulls were held: locked out")
    if still_held != MAX_WAITING:
        sys.exit(f"the pulls should still be held while the others answer ({still_held})")
    kv_port.release.set()
    for c in clients:
        c.join(120)
    held_results = results[REQUESTS - MAX_WAITING:]
    print("statuses after the release:", sorted(set(map(str, held_results))), len(held_results))
    if len(held_results) != MAX_WAITING or set(held_results) != {200}:
        sys.exit("every held request should end with 200 once released (its prompt computed here)")
    recomputes = metric(decode.url, "tachyon:kv_transfer_recomputes_total", 'reason="pull_failed"')
    if recomputes != MAX_WAITING:
        sys.exit(f"every held request should have recomputed its prompt after the refused pull ({recomputes})")
    print("server.pd_serve_busy: ok")
finally:
    kv_port.release.set()
    cluster.close()
