"""Stand-in prefill and decode servers for the router's server.pd_router_* tests: this process's
own HTTP servers, each on a free port, so a test decides exactly what the router gets back.
    class Handler(StandInHandler):
        def decode(self, body): ...             # a POST to the decode stand-in
    prefill, decode = StandIn("prefill", Handler), StandIn("decode", Handler)   # serving already
    cluster.router([prefill], [decode])
    ...
    prefill.shutdown(); decode.shutdown()
The prefill stand-in answers every prompt at once with no lease, so the decode stand-in gets it
to compute; GET (the router's health checks) answers ok."""
import http.server
import json
import threading


class StandIn(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, role, handler):
        super().__init__(("127.0.0.1", 0), handler)
        self.role = role
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()


class StandInHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, data, content_type="application/json", length=None):
        """A 200 with `data`; `length` declares another Content-Length (a body cut short)."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.answer(b'{"status": "ok"}')

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if self.server.role == "prefill":  # no lease: the decode server computes the prompt
            return self.answer(json.dumps({"kv_transfer": None, "reason": "stand-in"}).encode())
        return self.decode(body)

    def decode(self, body):
        raise NotImplementedError("a test's handler answers the decode stand-in's requests")
