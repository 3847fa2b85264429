"""server.pd_router_busy: the router's /metrics and /health never wait behind requests that wait
on upstream servers, and the requests it has in flight are bounded. A stand-in upstream (this
script's own HTTP server, as both the prefill and the decode server) answers GET /health at once
and holds every POST until released, so each of 70 requests through the router waits on it (more
than the 64 workers its handlers once waited on: they now run as exchanges on threads of their
own, server.pd_router_lockout), and 70 is the router's --max-in-flight. Two more requests get
503 with Retry-After at once, never reaching the stand-in. While the stand-in still holds all 70
(checked before and after), the router's /metrics (70 requests in flight) and /health answer;
then the held requests are released, all 70 end 200, the router has none in flight, and a fresh
request gets 200 again. With /metrics on the worker pool again, it may wait behind busy workers;
with the requests on a pool of 64 workers again, the stand-in never holds 70 at once; without
the bound the two more requests are held too: each way the test fails (the 20 s bound on each
answer only turns a hang into a failure).
    pd_router_busy.py TACHYON TOKENIZERS_DIR"""
import http.server
import json
import sys
import threading

from pd_cluster import Cluster, get, metric, post, wait_until

REQUESTS = 70  # more than the 64 workers the router's handlers once waited on; --max-in-flight
PAST_THE_BOUND = 2


class Upstream(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the released requests come back at once, as decode posts

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.held = 0
        self.release = threading.Event()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.answer({"status": "ok"})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with self.server.lock:
            self.server.held += 1
        self.server.release.wait()
        with self.server.lock:
            self.server.held -= 1
        # As a prefill server: no lease (the router then asks the decode server, this one too).
        self.answer({"kv_transfer": None, "reason": "stand-in", "choices": [{"text": "ok", "index": 0}]})


class Url:
    def __init__(self, port):
        self.url = f"http://127.0.0.1:{port}"


upstream = Upstream()
threading.Thread(target=upstream.serve_forever, daemon=True).start()
cluster = Cluster(sys.argv[1], sys.argv[2], canary=True)  # serves no model: no make-model
try:
    stand_in = Url(upstream.server_address[1])
    router = cluster.router([stand_in], [stand_in], "--max-in-flight", str(REQUESTS))
    body = {"model": "tiny", "prompt": "hello", "max_tokens": 4, "temperature": 0}
    results = []
    clients = [threading.Thread(target=lambda: results.append(post(router.url, "/v1/completions", body)[0]))
               for _ in range(REQUESTS)]
    for c in clients:
        c.start()
    wait_until(lambda: upstream.held == REQUESTS, 30, f"the router never held {REQUESTS} requests at once")
    refused = []
    extra = [threading.Thread(target=lambda: refused.append(post(router.url, "/v1/completions", body, timeout=20)))
             for _ in range(PAST_THE_BOUND)]
    for c in extra:
        c.start()
    for c in extra:
        c.join()
    print("past --max-in-flight:", [(status, headers.get("Retry-After")) for status, _, headers in refused])
    if [(status, headers.get("Retry-After")) for status, _, headers in refused] != [(503, "1")] * PAST_THE_BOUND:
        sys.exit(f"the requests past --max-in-flight {REQUESTS} should get 503 with Retry-After at once")
    metrics = get(router.url + "/metrics", timeout=20)
    health = get(router.url + "/health", timeout=20)
    still_held = upstream.held
    in_flight = metric(router.url, "tachyon:router_requests_in_flight")
    print(f"with {still_held} requests held upstream: /metrics {metrics[0]}, /health {health[0]}, "
          f"{in_flight:.0f} in flight")
    if metrics[0] != 200 or "tachyon:router_requests_total" not in metrics[1]:
        sys.exit("the router's /metrics did not answer while its workers were busy")
    if health[0] != 200:
        sys.exit("the router's /health did not answer while its workers were busy")
    if still_held != REQUESTS or in_flight != REQUESTS:
        sys.exit(f"the requests should still be held while /metrics and /health answer ({still_held}, "
                 f"{in_flight} in flight)")
    upstream.release.set()
    for c in clients:
        c.join(120)
    print("statuses after the release:", sorted(set(results)), len(results))
    if len(results) != REQUESTS or set(results) != {200}:
        sys.exit("every held request should end with 200 once released")
    wait_until(lambda: metric(router.url, "tachyon:router_requests_in_flight") == 0, 20,
               "the router still counts requests in flight after every answer ended")
    fresh = post(router.url, "/v1/completions", body, timeout=20)[0]
    print("a fresh request after them:", fresh)
    if fresh != 200:
        sys.exit("a request within the bound again should get 200")
    print("server.pd_router_busy: ok")
finally:
    upstream.release.set()
    cluster.close()
    upstream.shutdown()
