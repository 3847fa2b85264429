"""server.pd_soak: the disaggregation soak. Short requests through `tachyon router` to a CPU prefill
server and a CPU decode server of the canary (the built-in default model) at concurrency 64, with
/metrics scraped once a second on every process (router, prefill, decode). The single-server
soak's criterion (tests/server/test_server_soak.cpp) holds on each process: resident anonymous
memory when the run ends stays within 2% of what it was after the first 10% of the requests
(both read with the process idle), and the median /metrics render time of the last quarter of
the run stays within 25% (+2 ms) of the first quarter's. Every request must answer 200.
    pd_soak.py TACHYON TOKENIZERS_DIR [TOTAL (500)] [--json OUT]
The issue's soak is TOTAL 20000 (about 50 s on 2 cores; it passes 3 of 3 runs:
bench/results/2026-12-03-pd-soak-20000-one-arena.json). Not in ctest: it takes over a minute,
and its render criterion is a time, which on a shared machine moves with the other work on it.
The scraper runs in its own process; every process runs with MALLOC_ARENA_MAX=1, as the
single-server soak sets M_ARENA_MAX in its own process."""
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from pd_cluster import Cluster, get, metric, post, wait_until

args = [a for a in sys.argv[1:]]
out_json = None
if "--json" in args:
    out_json = args[args.index("--json") + 1]
    del args[args.index("--json"):args.index("--json") + 2]
total = int(args[2]) if len(args) > 2 else 500
concurrency = 64


def scrape(urls, pids, done, finished, results):
    """Its own process, so the clients' threads never delay a scrape's clock (the GIL)."""
    scrapes = {name: [] for name in urls}
    while not finished.is_set():
        for name, url in urls.items():
            start = time.monotonic()
            status, _ = get(url + "/metrics")
            scrapes[name].append((done.value, time.monotonic() - start, status, rss_anon(pids[name])))
        finished.wait(1.0)
    results.put(scrapes)


def rss_anon(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


cluster = Cluster(args[0], args[1], max_model_len=512, canary=True)
try:
    # As the single-server soak: one arena keeps RSS samples comparable. Set while the servers and
    # the router start (the processes inherit it), not only while the cluster object is made.
    os.environ["MALLOC_ARENA_MAX"] = "1"
    prefill = cluster.serve("prefill", "--role", "prefill")
    decode = cluster.serve("decode", "--role", "decode")
    router = cluster.router([prefill], [decode])
    del os.environ["MALLOC_ARENA_MAX"]
    processes = {"router": router, "prefill": prefill, "decode": decode}
    body = {"model": "tiny", "prompt": "Tell me", "max_tokens": 4, "temperature": 0.8}
    idle = lambda: all(metric(s.url, "tachyon:num_requests_running") == 0 and
                       metric(s.url, "tachyon:num_requests_waiting") == 0 for s in (prefill, decode))

    with ThreadPoolExecutor(concurrency) as pool:  # warm-up outside the measurement, as the single-server soak
        list(pool.map(lambda i: post(router.url, "/v1/completions", body), range(concurrency * 5)))

    done, failures = [0], [0]
    done_shared, finished, results = multiprocessing.Value("i", 0), multiprocessing.Event(), multiprocessing.Queue()
    lock = threading.Lock()
    baseline = {}
    baseline_taken = threading.Event()

    gate = threading.Condition()
    def one(i):
        if i == total // 10:  # the baseline: once the first 10% are done and every process is idle
            with gate:
                gate.wait_for(lambda: done[0] >= total // 10)
            wait_until(idle, 60, "the servers never went idle for the baseline")
            time.sleep(1.5)  # as before the end's reading: past the idle heap trim's once-a-second limit
            baseline.update({name: rss_anon(p.proc.pid) for name, p in processes.items()})
            baseline_taken.set()
        if i > total // 10:
            baseline_taken.wait()
        status, text, _ = post(router.url, "/v1/completions", body)
        with lock:
            done[0] += 1
            done_shared.value = done[0]
            if status != 200 or text is None:
                failures[0] += 1
        with gate:
            gate.notify_all()

    scraper = multiprocessing.Process(target=scrape, args=({n: p.url for n, p in processes.items()},
                                                           {n: p.proc.pid for n, p in processes.items()}, done_shared,
                                                           finished, results))
    scraper.start()
    start = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(total)))
    wall = time.monotonic() - start
    finished.set()
    scrapes = results.get()  # name -> [(requests done, render seconds, status)]
    scraper.join()
    failures[0] += sum(1 for rows in scrapes.values() for _, _, status, _ in rows if status != 200)
    wait_until(idle, 60, "the servers never went idle at the end")
    # The router's last relays and the servers' last frees, and the idle heap trim after them (at
    # most once a second): both readings wait as long.
    time.sleep(1.5)
    report = {"command": " ".join(["tests/server/pd_soak.py", "TACHYON", "TOKENIZERS", str(total)]),
              "requests": total, "concurrency": concurrency, "failures": failures[0], "wall_seconds": round(wall, 1),
              "processes": {}}
    ok = failures[0] == 0
    for name, p in processes.items():
        end = rss_anon(p.proc.pid)
        first = [s for at, s, _, _ in scrapes[name] if at < total / 4]
        last = [s for at, s, _, _ in scrapes[name] if at >= total * 3 / 4]
        # RSS by tenth of the run (MiB, the last sample in each): the curve behind the two points.
        tenths = {}
        for at, _, _, rss in scrapes[name]:
            tenths[min(9, at * 10 // total)] = round(rss / 1048576, 2)
        first_ms = statistics.median(first) * 1e3 if first else 0.0
        last_ms = statistics.median(last) * 1e3 if last else 0.0
        rss_ok = end <= baseline[name] * 1.02
        render_ok = not first or not last or last_ms <= first_ms * 1.25 + 2.0
        ok = ok and rss_ok and render_ok
        report["processes"][name] = {
            "rss_anon_mib_after_10pct": round(baseline[name] / 1048576, 2), "rss_anon_mib_at_end": round(end / 1048576, 2),
            "rss_change_pct": round(100.0 * (end - baseline[name]) / baseline[name], 2),
            "rss_anon_mib_by_tenth_of_run": [tenths.get(i) for i in range(10)], "scrapes": len(scrapes[name]),
            "metrics_render_ms_median_first_quarter": round(first_ms, 3),
            "metrics_render_ms_median_last_quarter": round(last_ms, 3), "rss_flat": rss_ok, "render_flat": render_ok}
        print(f"[pd soak] {name}: RSS {baseline[name] / 1048576:.2f} MiB after {total // 10} requests, "
              f"{end / 1048576:.2f} MiB at end ({100.0 * (end - baseline[name]) / baseline[name]:+.2f}%); /metrics "
              f"median render {first_ms:.3f} ms (first quarter) vs {last_ms:.3f} ms (last quarter), "
              f"{len(scrapes[name])} scrapes")
    print(f"[pd soak] {total} requests at concurrency {concurrency} in {wall:.0f} s, {failures[0]} failures")
    report["pass"] = ok
    if out_json:
        with open(out_json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    if not ok:
        sys.exit("the soak's criterion failed (see above)")
finally:
    cluster.close()
