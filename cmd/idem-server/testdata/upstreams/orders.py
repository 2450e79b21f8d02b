"""orders.py: a tiny orders API in Python (standard library only), with no
idempotency of its own, for idem-server's gateway to stand in front of
(docs/gateway.md). It counts its own effects:

  POST /orders {"customer":"c","amount":1}  creates an order: 201 {"id","customer","amount"}, Location
                                            (400 for a body it cannot read); with X-Hold: 1 the answer
                                            waits for POST /release (the order is made at once)
  GET  /orders?customer=c                   {"count": orders made for c}
  POST /release                             answers every held request

It listens on 127.0.0.1:PORT (argv[1], or $PORT, or 0 for any free port),
prints "listening on http://127.0.0.1:PORT" once it does, and "order ID
CUSTOMER" on each order made, both on standard output.
"""
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

lock = threading.Lock()
counts = {}
state = {"next": 0, "release": threading.Event()}


class Orders(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def send(self, status, body, headers=None):
        text = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(text)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(text)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path != "/orders":
            self.send(404, {"error": "not found"})
            return
        customer = parse_qs(url.query).get("customer", [""])[0]
        with lock:
            n = counts.get(customer, 0)
        self.send(200, {"count": n})

    def do_POST(self):
        url = urlparse(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if url.path == "/release":
            with lock:
                release, state["release"] = state["release"], threading.Event()
            release.set()
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if url.path != "/orders":
            self.send(404, {"error": "not found"})
            return
        try:
            order = json.loads(body)
        except ValueError:
            order = None
        if (not isinstance(order, dict) or not isinstance(order.get("customer"), str) or not order["customer"]
                or not isinstance(order.get("amount"), int) or isinstance(order.get("amount"), bool)):
            self.send(400, {"error": 'want {"customer": string, "amount": integer}'})
            return
        with lock:
            state["next"] += 1
            oid = "ord_%d" % state["next"]
            counts[order["customer"]] = counts.get(order["customer"], 0) + 1
            release = state["release"]
        print("order", oid, order["customer"], flush=True)
        if self.headers.get("X-Hold") == "1":
            release.wait()
        self.send(201, {"id": oid, "customer": order["customer"], "amount": order["amount"]},
                  {"Location": "/orders/" + oid})

    def log_message(self, *args):
        pass  # standard output carries the orders only


def main():
    port = int(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PORT", "0"))
    server = ThreadingHTTPServer(("127.0.0.1", port), Orders)
    server.daemon_threads = True
    print("listening on http://127.0.0.1:%d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
