"""server.pd_router_allocator: `tachyon router` runs with glibc's per-thread malloc caches off
(cli/router_allocator.h: over the soak they grew its heap without settling). The router
re-executes itself once at start with GLIBC_TUNABLES naming glibc.malloc.tcache_count=0, keeping
its pid and its arguments; a GLIBC_TUNABLES of the caller's that already names tcache_count is
kept as given. Each router must then serve (/health through a stand-in decode server). Other
tunables of the caller's are kept beside the bound, but glibc's loader rewrites a list of several
in the process's own environment, so that case was checked by hand (heap in use flat). The
soak (tests/server/pd_soak.py) measures the effect: the heap in use stays flat.
    pd_router_allocator.py TACHYON TOKENIZERS_DIR"""
import http.server
import os
import sys
import threading

from pd_cluster import Cluster


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):  # a healthy server, as far as the router's health checks go
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


class Url:
    def __init__(self, port):
        self.url = f"http://127.0.0.1:{port}"


def environ_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return {k.decode(): v.decode() for k, v in pairs}


def cmdline_of(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0")[:-1]]


upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=upstream.serve_forever, daemon=True).start()
stand_in = Url(upstream.server_address[1])
cluster = Cluster(sys.argv[1], sys.argv[2], canary=True)  # serves no model
cases = [  # (GLIBC_TUNABLES given, GLIBC_TUNABLES the router must run with)
    (None, "glibc.malloc.tcache_count=0"),
    ("glibc.malloc.tcache_count=3", "glibc.malloc.tcache_count=3"),
]
try:
    for given, want in cases:
        os.environ.pop("GLIBC_TUNABLES", None)
        if given is not None:
            os.environ["GLIBC_TUNABLES"] = given
        router = cluster.router([stand_in], [stand_in])  # waits for its /health to answer 200
        os.environ.pop("GLIBC_TUNABLES", None)
        got = environ_of(router.proc.pid).get("GLIBC_TUNABLES")
        print(f"GLIBC_TUNABLES given {given!r}: the router (pid {router.proc.pid}) runs with {got!r}")
        if got != want:
            sys.exit(f"the router should run with GLIBC_TUNABLES={want!r}")
        if cmdline_of(router.proc.pid) != router.args:
            sys.exit(f"the restarted router lost its arguments: {cmdline_of(router.proc.pid)} != {router.args}")
        router.kill()
        cluster.processes.remove(router)
    print("server.pd_router_allocator: ok")
finally:
    cluster.close()
    upstream.shutdown()
