"""server.pd_router_lockout: slow upstream servers and clients that read nothing cannot lock the
router out. Two stand-ins (this script's own HTTP servers) play the prefill server (it answers at
once, with no lease) and the decode server (it holds every request whose prompt is "slow" until
released, and answers any other at once). SLOW streamed requests, more than the router ever had
request workers (64 before its exchanges ran on threads of their own), are posted on sockets
that are never read. While the decode stand-in holds all of them at once, a fresh request must
get its answer (or a prompt 503 with Retry-After: never a hang). Then the slow ones are released
and their answers (512 KiB each) are relayed to clients that still read nothing; a fresh request
must again get its answer. Last, the slow clients hang up and the router lets go of every relay.
With the router's handlers waiting on a pool of 64 workers again, only 64 of the slow requests
ever reach the decode stand-in and the fresh request waits behind them: the test fails (the
bounds on each wait only turn that hang into a failure).
    pd_router_lockout.py TACHYON TOKENIZERS_DIR"""
import json
import sys
import threading

from pd_cluster import Cluster, hang_up, metric, post, raw_request, wait_until
from pd_stand_in import StandIn, StandInHandler

SLOW = 70         # more than the 64 workers the router's handlers once waited on
BODY = 512 << 10  # bytes of each slow answer: more than a socket's buffers hold unread


class Handler(StandInHandler):
    def decode(self, body):
        server = self.server
        if body["prompt"] != "slow":
            return self.answer(json.dumps({"choices": [{"text": "fresh", "index": 0}]}).encode())
        with server.lock:
            server.held += 1
        server.release.wait()
        event = b'data: {"choices": [{"text": "' + b"x" * 1000 + b'", "index": 0}]}\n\n'
        try:
            self.answer(event * (BODY // len(event)), "text/event-stream")
        except OSError:
            return
        with server.lock:
            server.sent += 1


def fresh(router, moment):
    """A fresh request through the router: its answer, or a prompt 503 with Retry-After."""
    status, text, headers = post(router.url, "/v1/completions",
                                 {"model": "tiny", "prompt": "fresh", "max_tokens": 4}, timeout=20)
    print(f"{moment}: a fresh request got {status} {text!r}")
    if status == 503 and headers.get("Retry-After"):
        return
    if (status, text) != (200, "fresh"):
        sys.exit(f"{moment}: the fresh request got no answer ({status}): the router is locked out")


prefill, decode = StandIn("prefill", Handler), StandIn("decode", Handler)
decode.held = 0  # slow requests waiting for the release
decode.sent = 0  # slow answers written whole
decode.release = threading.Event()
cluster = Cluster(sys.argv[1], sys.argv[2], canary=True)  # serves no model: no make-model
slow = []
try:
    router = cluster.router([prefill], [decode])
    for _ in range(SLOW):
        slow.append(raw_request(router.port, "/v1/completions",
                                {"model": "tiny", "prompt": "slow", "max_tokens": 4, "stream": True}))
    wait_until(lambda: decode.held == SLOW, 30,
               f"the decode server never held all {SLOW} slow requests at once: the router's handlers wait on a "
               "bounded pool")
    fresh(router, f"{SLOW} requests held by a slow decode server")
    decode.release.set()
    wait_until(lambda: decode.sent == SLOW, 60, f"the router never took all {SLOW} slow answers")
    fresh(router, f"{SLOW} answers relayed to clients that read nothing")
    for s in slow:
        hang_up(s)
    open_on_decode = lambda: metric(router.url, "tachyon:router_upstream_in_flight", 'role="decode"')
    wait_until(lambda: open_on_decode() == 0, 30, "the router still relays answers to clients that hung up")
    print("server.pd_router_lockout: ok")
finally:
    decode.release.set()
    for s in slow:
        s.close()
    cluster.close()
    prefill.shutdown()
    decode.shutdown()
