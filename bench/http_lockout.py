#!/usr/bin/env python3
"""The lock-out case at full size, with the server and the herds in separate processes.

tests/server/test_server_abuse_connections.cpp holds both ends in one process, so a machine's
per-process open-file limit halves what it can hold. Here `tachyon serve` (the built-in model)
runs alone, one child process holds N slow-head connections (a partial head, one more byte per
second, never finished), another holds N idle ones, and this process times normal requests
(POST /v1/completions, max_tokens 1, on one kept-alive connection) before and while they are
held. Prints one JSON object; exits 1 when loaded p99 > 2 x unloaded p99.

  bench/http_lockout.py build/bin/tachyon 9800 [--out FILE]
"""
import argparse
import http.client
import json
import multiprocessing
import os
import resource
import socket
import statistics
import subprocess
import sys
import time


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def hold(kind, port, n, ready, stop):
    raise_fd_limit()
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        if kind == "slow":
            s.send(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        socks.append(s)
    ready.set()
    while not stop.is_set():
        if kind == "slow":
            for s in socks:
                try:
                    s.send(b"a")
                except BlockingIOError:
                    pass
        stop.wait(1.0)
    alive = 0
    for s in socks:  # nothing may have come back: a held connection is neither answered nor closed
        try:
            alive += s.recv(1) == b""
        except BlockingIOError:
            alive += 0
    print(json.dumps({"kind": kind, "closed_or_answered": alive}), file=sys.stderr)


def time_requests(port, count):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps({"prompt": "Zoe has 3 apples.", "max_tokens": 1})
    times = []
    for _ in range(count):
        start = time.perf_counter()
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status
        times.append((time.perf_counter() - start) * 1000)
    conn.close()
    times.sort()
    return {"p50_ms": round(statistics.median(times), 3), "p99_ms": round(times[int(0.99 * (len(times) - 1))], 3)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("tachyon")
    parser.add_argument("n", type=int)
    parser.add_argument("--port", type=int, default=8431)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--out")
    args = parser.parse_args()
    # One thread for the CPU forward (the default for a model this small, runner/cpu_threads.h):
    # with two spinning threads on a two-core machine that also runs the herds and this client, a
    # step stalls for 100+ ms whenever another thread takes a core, hiding what the server does.
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    server = subprocess.Popen([args.tachyon, "serve", "--port", str(args.port), "--header-timeout", "600",
                               "--idle-timeout", "600"], stderr=subprocess.DEVNULL, env=env)
    try:
        for _ in range(600):  # listening first, then 200 once the model is loaded
            try:
                conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=5)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        time_requests(args.port, 20)  # warm-up
        unloaded = time_requests(args.port, args.requests)
        stop = multiprocessing.Event()
        herds = []
        for kind in ("slow", "idle"):
            ready = multiprocessing.Event()
            p = multiprocessing.Process(target=hold, args=(kind, args.port, args.n, ready, stop))
            p.start()
            herds.append((p, ready))
        for p, ready in herds:
            ready.wait()
        time.sleep(2)  # every slow connection has dripped at least once
        loaded = time_requests(args.port, args.requests)
        stop.set()
        for p, _ in herds:
            p.join()
    finally:
        server.terminate()
        server.wait()
    result = {"slow_connections": args.n, "idle_connections": args.n, "requests": args.requests,
              "unloaded": unloaded, "loaded": loaded,
              "ratio_p99": round(loaded["p99_ms"] / unloaded["p99_ms"], 3),
              "omp_num_threads": env["OMP_NUM_THREADS"], "machine": "2-core CPU dev machine, no GPU",
              "command": " ".join(sys.argv)}
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if loaded["p99_ms"] <= 2 * unloaded["p99_ms"] else 1


if __name__ == "__main__":
    sys.exit(main())
