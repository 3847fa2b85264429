"""server.pd_router_relay_bound: a client that reads nothing cannot make the router buffer its
answer. Two stand-ins (this script's own HTTP servers) play the prefill server (it answers at once,
with no lease) and the decode server (it streams a 32 MiB answer to every request, far more than
the sockets' buffers hold, counting what it wrote and whether its connection was closed under it).
CLIENTS streamed requests are posted through the router on sockets with small receive buffers
that are never read. Each relay must pause its read of the decode answer once it holds its bound
(tachyon:router_relays_paused reaches CLIENTS), with the router's buffered bytes within CLIENTS
bounds (plus one read each), its resident memory grown by far less than the answers, and no answer
written whole by the decode stand-in; a fresh request still gets its answer. Then the clients hang
up: the router closes every decode connection (the stand-in's writes fail: a real decode server
aborts the request there and frees its KV, server.pd_abort) and its gauges return to 0. With the
relay reading the decode answer whatever its client takes, no relay ever pauses, the router holds
the answers (up to 128 MiB) and the test fails (the bound on each wait only turns that into a
failure).
    pd_router_relay_bound.py TACHYON TOKENIZERS_DIR"""
import json
import socket
import sys

from pd_cluster import Cluster, hang_up, metric, post, wait_until
from pd_stand_in import StandIn, StandInHandler

CLIENTS = 4
ANSWER = 32 << 20         # bytes each decode answer would be
RELAY_BOUND = 256 << 10   # the router's per-relay bound (server/http/pd_upstream.h)
READ_SLACK = 64 << 10     # one upstream read past the bound
RSS_SLACK = 48 << 20      # threads, sockets, allocator: far below CLIENTS x ANSWER


class Handler(StandInHandler):
    def decode(self, body):
        server = self.server
        if body["prompt"] != "big":
            return self.answer(json.dumps({"choices": [{"text": "fresh", "index": 0}]}).encode())
        event = b'data: {"choices": [{"text": "' + b"x" * 65000 + b'", "index": 0}]}\n\n'
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(event) * (ANSWER // len(event))))
        self.end_headers()
        try:
            for _ in range(ANSWER // len(event)):
                self.wfile.write(event)
            self.wfile.flush()
        except OSError:
            with server.lock:
                server.closed += 1
            return
        with server.lock:
            server.whole += 1


def rss_bytes(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def silent_client(port):
    """A streamed request on a socket with a small receive buffer, never read."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    data = json.dumps({"model": "tiny", "prompt": "big", "max_tokens": 4, "stream": True}).encode()
    s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


prefill, decode = StandIn("prefill", Handler), StandIn("decode", Handler)
decode.whole = 0   # big answers written whole
decode.closed = 0  # big answers whose connection was closed under them
cluster = Cluster(sys.argv[1], sys.argv[2], canary=True)  # serves no model: no make-model
clients = []
try:
    router = cluster.router([prefill], [decode])
    gauge = lambda name: metric(router.url, name)
    rss_before = rss_bytes(router.proc.pid)
    clients = [silent_client(router.port) for _ in range(CLIENTS)]
    wait_until(lambda: gauge("tachyon:router_relays_paused") == CLIENTS, 30,
               f"the router never paused all {CLIENTS} relays whose clients read nothing: it reads on regardless")
    buffered = gauge("tachyon:router_relay_buffered_bytes")
    grown = rss_bytes(router.proc.pid) - rss_before
    print(f"{CLIENTS} relays paused: {buffered / 1024:.0f} KiB buffered, router RSS +{grown / 2**20:.1f} MiB, "
          f"{decode.whole} answers written whole")
    if buffered > CLIENTS * (RELAY_BOUND + READ_SLACK):
        sys.exit(f"the router buffers {buffered} bytes for {CLIENTS} clients that read nothing")
    if grown > RSS_SLACK:
        sys.exit(f"the router's resident memory grew by {grown} bytes for {CLIENTS} clients that read nothing")
    if decode.whole != 0:
        sys.exit("a decode answer went out whole although its client read nothing")
    status, text, _ = post(router.url, "/v1/completions", {"model": "tiny", "prompt": "fresh", "max_tokens": 4},
                           timeout=20)
    print(f"a fresh request meanwhile: {status} {text!r}")
    if (status, text) != (200, "fresh"):
        sys.exit("a fresh request got no answer while the relays were paused")
    for s in clients:
        hang_up(s)
    wait_until(lambda: decode.closed == CLIENTS, 30, "the router kept a decode connection open after its client left")
    wait_until(lambda: (gauge("tachyon:router_relay_buffered_bytes"), gauge("tachyon:router_relays_paused"),
                        gauge("tachyon:router_requests_in_flight")) == (0, 0, 0), 30,
               "the router still holds relays after their clients left")
    print("server.pd_router_relay_bound: ok")
finally:
    for s in clients:
        s.close()
    cluster.close()
    prefill.shutdown()
    decode.shutdown()
