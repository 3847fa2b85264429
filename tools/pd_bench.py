#!/usr/bin/env python3
"""Prefill/decode disaggregation against one server, on one machine (docs/disaggregation.md):

  1. KV transfer: for prompts of each length, the decode server's copy of the prompt's KV (by
     reference through CUDA IPC when both servers share a GPU: tachyon:kv_reference_bytes_total
     and _copy_seconds_total, per request) against its floor, a device-to-device copy of as many
     bytes (torch, measured once the servers stopped; on the CPU no floor is measured);
  2. TTFT: a streamed request of each length to one plain server, and through the router to a
     prefill and a decode server (the time to the first token's chunk; medians of --repeats after
     a warm-up); the difference is what disaggregation adds;
  3. ITL while long prompts arrive: --streams decode streams run while a --interference-len
     prompt arrives every --interference-every seconds; the streams' gaps between chunks (p50, p99)
     on the plain server and through the router.
Prompts are random token ids (no prefix is shared, so nothing is served from a prefix cache).
The plain server runs alone first, then the two role servers and the router; each server's KV cache
takes --kv-cache-memory-bytes of the GPU.
    pd_bench.py --tachyon BIN --model DIR --out RESULT.json [--device cuda] [--lengths 1024,4096,16384]
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def start(name, cmd, work, pattern):
    log = os.path.join(work, name + ".log")
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 900
    while time.time() < deadline:
        match = re.search(pattern + r":(\d+)", open(log).read())
        if match:
            return proc, f"http://127.0.0.1:{match.group(1)}"
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    sys.exit(f"{name} did not start:\n" + open(log).read()[-3000:])


def metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.split("\n"):
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = out.get(name, 0.0) + float(value)
    return out


def stream(url, prompt, max_tokens, stamps=None):
    """Posts a streamed completion; returns (TTFT seconds, chunk arrival times)."""
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    start = time.perf_counter()
    times = []
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise RuntimeError(f"error event: {event}")
            if event.get("choices") and event["choices"][0].get("text") is not None:
                times.append(time.perf_counter())
    if not times:
        raise RuntimeError("no token arrived")
    return times[0] - start, times


def random_prompt(rng, length, vocab):
    return [rng.randrange(100, vocab) for _ in range(length)]


def ttft(url, lengths, repeats, rng, vocab, decode_url=None):
    """Per length: median TTFT over `repeats` (after one warm-up), and with decode_url the decode
    server's by-reference copy per request (bytes, seconds)."""
    out = {}
    for length in lengths:
        stream(url, random_prompt(rng, length, vocab), 2)  # warm-up
        times, copies = [], []
        for _ in range(repeats):
            before = metrics(decode_url) if decode_url else None
            times.append(stream(url, random_prompt(rng, length, vocab), 2)[0])
            if decode_url:
                after = metrics(decode_url)
                delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in
                         ("tachyon:kv_reference_bytes_total", "tachyon:kv_reference_copy_seconds_total",
                          "tachyon:kv_reference_imports_total", "tachyon:kv_transfer_imports_total")}
                copies.append(delta)
        entry = {"ttft_s_median": statistics.median(times), "ttft_s": times}
        if copies:
            by_reference = [c for c in copies if c["tachyon:kv_reference_imports_total"] == 1]
            entry["imports"] = sum(c["tachyon:kv_transfer_imports_total"] for c in copies)
            entry["imports_by_reference"] = len(by_reference)
            if by_reference:
                entry["copy_bytes"] = by_reference[0]["tachyon:kv_reference_bytes_total"]
                entry["copy_s_median"] = statistics.median(c["tachyon:kv_reference_copy_seconds_total"]
                                                           for c in by_reference)
                entry["copy_bytes_per_s"] = entry["copy_bytes"] / entry["copy_s_median"]
        out[str(length)] = entry
    return out


def itl_under_interference(url, streams, interference_len, every, duration, rng, vocab):
    """Decode streams' inter-chunk gaps while long prompts arrive; p50 and p99 in seconds."""
    gaps, errors = [], []
    stop = time.time() + duration

    def decoder(seed):
        local = random.Random(seed)
        while time.time() < stop:
            try:
                _, times = stream(url, random_prompt(local, 128, vocab), 256)
                gaps.extend(b - a for a, b in zip(times, times[1:]))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(str(e))

    def injector():
        local = random.Random(rng.random())
        def one(prompt):
            try:
                stream(url, prompt, 1)
            except Exception:  # noqa: BLE001 - a long prompt cut off at the end of the run
                pass

        while time.time() < stop:
            threading.Thread(target=one, args=(random_prompt(local, interference_len, vocab),), daemon=True).start()
            time.sleep(every)

    threads = [threading.Thread(target=decoder, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    time.sleep(2)  # the streams run before the first long prompt
    inj = threading.Thread(target=injector, daemon=True)
    inj.start()
    for t in threads:
        t.join()
    gaps.sort()
    if not gaps:
        return {"errors": errors[:3]}
    return {"itl_s_p50": gaps[len(gaps) // 2], "itl_s_p99": gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))],
            "gaps": len(gaps), "errors": len(errors)}


def copy_floor(byte_counts):
    """Seconds of a device-to-device copy of each byte count (torch, median of 10 after warm-up)."""
    import torch  # only on the GPU machine

    out = {}
    for count in byte_counts:
        src = torch.empty(int(count), dtype=torch.uint8, device="cuda").fill_(0x3C)
        dst = torch.empty_like(src)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ms = []
        for i in range(12):
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            if i >= 2:
                ms.append(start.elapsed_time(end))
        out[str(int(count))] = statistics.median(ms) / 1e3
        del src, dst
        torch.cuda.empty_cache()
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tachyon", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--lengths", default="1024,4096,16384")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--kv-cache-memory-bytes", default=str(24 << 30))
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--interference-len", type=int, default=4096)
    p.add_argument("--interference-every", type=float, default=1.0)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--vocab", type=int, default=128000)
    a = p.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    max_len = str(max(lengths + [a.interference_len]) + 600)
    work = tempfile.mkdtemp(prefix="tachyon-pd-bench-")
    serve = [a.tachyon, "serve", a.model, "--device", a.device, "--port", "0", "--served-model-name", "m",
             "--max-model-len", max_len]
    if a.device == "cuda":
        serve += ["--kv-cache-memory-bytes", a.kv_cache_memory_bytes]
    pattern = r"serving m on http://127\.0\.0\.1"
    result = {"command": " ".join(sys.argv), "model": a.model, "device": a.device, "lengths": lengths}
    rng = random.Random(1)
    procs = []
    try:
        proc, plain = start("plain", serve, work, pattern)
        procs.append(proc)
        result["plain"] = {"ttft": ttft(plain, lengths, a.repeats, rng, a.vocab),
                           "itl_under_long_prompts": itl_under_interference(
                               plain, a.streams, a.interference_len, a.interference_every, a.duration, rng, a.vocab)}
        proc.terminate()
        proc.wait()
        procs.clear()
        proc, prefill = start("prefill", serve + ["--role", "prefill"], work, pattern)
        procs.append(proc)
        proc, decode = start("decode", serve + ["--role", "decode"], work, pattern)
        procs.append(proc)
        proc, router = start("router", [a.tachyon, "router", "--port", "0", "--prefill", prefill, "--decode", decode],
                             work, r"router on http://127\.0\.0\.1")
        procs.append(proc)
        time.sleep(1)
        result["disaggregated"] = {"ttft": ttft(router, lengths, a.repeats, rng, a.vocab, decode_url=decode),
                                   "itl_under_long_prompts": itl_under_interference(
                                       router, a.streams, a.interference_len, a.interference_every, a.duration, rng,
                                       a.vocab)}
        decode_metrics = metrics(decode)
        result["decode_server"] = {k: v for k, v in decode_metrics.items() if "kv_reference" in k or "kv_transfer" in k}
    finally:
        for proc in procs:
            proc.kill()
    table = {}
    for length in lengths:
        key = str(length)
        plain_ttft = result["plain"]["ttft"][key]["ttft_s_median"]
        pd = result["disaggregated"]["ttft"][key]
        row = {"ttft_plain_ms": round(plain_ttft * 1e3, 2), "ttft_disaggregated_ms": round(pd["ttft_s_median"] * 1e3, 2),
               "ttft_added_ms": round((pd["ttft_s_median"] - plain_ttft) * 1e3, 2),
               "imports_by_reference": pd.get("imports_by_reference")}
        if "copy_bytes" in pd:
            row.update({"kv_bytes": pd["copy_bytes"], "copy_ms": round(pd["copy_s_median"] * 1e3, 3),
                        "copy_gb_per_s": round(pd["copy_bytes_per_s"] / 1e9, 1)})
        table[key] = row
    if a.device == "cuda":
        floors = copy_floor([row["kv_bytes"] for row in table.values() if "kv_bytes" in row])
        for row in table.values():
            if "kv_bytes" in row:
                floor = floors[str(int(row["kv_bytes"]))]
                row["copy_floor_ms"] = round(floor * 1e3, 3)
                row["copy_ratio_to_floor"] = round(row["copy_ms"] / (floor * 1e3), 2)
    result["table"] = table
    for name in ("plain", "disaggregated"):
        result[name + "_itl"] = result[name]["itl_under_long_prompts"]
    json.dump(result, open(a.out, "w"), indent=1)
    print(json.dumps({"table": table, "itl": {n: result[n + "_itl"] for n in ("plain", "disaggregated")}}, indent=1))


if __name__ == "__main__":
    main()
