#!/usr/bin/env python3
"""How long one client's short request waits while another client's legal heavy request runs.

Starts `tachyon serve` (the built-in canary unless --model) once per scheduling policy, sends the
heavy request from user "heavy" (a completions body of token ids, so no tokenizer cost), waits
until the server has begun it, then times short probes (max_tokens 1) from user "probe" one after
another. Scenarios: `prompts` (six 4,000-token prompts in one request, 1 token each) and `n16`
(one 1,000-token prompt with n = 16 and 2,000 tokens each: three times what the KV cache holds;
the probes start once the cache is full). Prints one
JSON object with each policy's probe latencies and the heavy request's own time.

  bench/heavy_client_probe.py build/bin/tachyon --port 9810 [--policies fcfs fair] [--out FILE]
"""
import argparse
import http.client
import json
import statistics
import subprocess
import sys
import threading
import time

SCENARIOS = {
    "prompts": {"prompt": [[10 + (i * 7 + p) % 480 for i in range(4000)] for p in range(6)], "max_tokens": 1},
    "n16": {"prompt": [[10 + (i * 11) % 480 for i in range(1000)]], "n": 16, "max_tokens": 2000,
            "ignore_eos": True},
}
# When the probes start: once the heavy request runs, and for n16 once it has filled the KV cache.
READY = {"prompts": ("tachyon:num_requests_running", 1), "n16": ("tachyon:kv_cache_usage_perc", 0.95)}


def post(port, body, timeout):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    res = conn.getresponse()
    res.read()
    conn.close()
    return res.status


def metric(port, name):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def run(tachyon, port, policy, scenario, model, probes, probe_timeout):
    args = [tachyon, "serve"] + ([model] if model else []) + [
        "--port", str(port), "--scheduling-policy", policy, "--max-model-len", "4300"]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        post(port, {"prompt": "warm up", "max_tokens": 1}, 60)
        heavy = dict(SCENARIOS[scenario], user="heavy")
        heavy_result = {}

        def hog():
            start = time.monotonic()
            try:
                heavy_result["status"] = post(port, heavy, 900)
            except OSError as e:
                heavy_result["status"] = repr(e)
            heavy_result["seconds"] = time.monotonic() - start

        thread = threading.Thread(target=hog, daemon=True)
        thread.start()
        ready_metric, ready_value = READY[scenario]
        while metric(port, ready_metric) < ready_value and thread.is_alive():
            time.sleep(0.05)
        latencies = []
        for p in range(probes):
            start = time.monotonic()
            try:
                status = post(port, {"prompt": [[20 + p, 30, 40]], "max_tokens": 1, "user": "probe"}, probe_timeout)
                latencies.append(time.monotonic() - start if status == 200 else None)
            except OSError:
                latencies.append(None)  # no answer within probe_timeout
        thread.join(timeout=900)
        return {"preemptions": metric(port, "tachyon:num_preemptions_total"),"probe_seconds": latencies,
                "probe_median_seconds": statistics.median([x if x is not None else probe_timeout for x in latencies]),
                "probes_unanswered": sum(x is None for x in latencies),
                "heavy_seconds": heavy_result.get("seconds"), "heavy_status": heavy_result.get("status")}
    finally:
        server.terminate()
        server.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tachyon")
    parser.add_argument("--port", type=int, default=9810)
    parser.add_argument("--model", default="")
    parser.add_argument("--policies", nargs="+", default=["fcfs", "fair"])
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    parser.add_argument("--probes", type=int, default=3)
    parser.add_argument("--probe-timeout", type=float, default=120)
    parser.add_argument("--out")
    args = parser.parse_args()
    result = {"command": " ".join(sys.argv), "scenarios": {}}
    for scenario in args.scenarios:
        result["scenarios"][scenario] = {
            policy: run(args.tachyon, args.port, policy, scenario, args.model, args.probes, args.probe_timeout)
            for policy in args.policies}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
