"""A webhook receiver for Storekeeper's delivery tests: verifies every request with the `standardwebhooks` package
from PyPI (an independent implementation of the specification), misbehaves as told for the first requests, then
accepts. Prints its port, then appends one JSON line per request to the log file.

usage: RECEIVER_SECRET=whsec_… receiver.py LOGFILE PLAN
PLAN: comma-separated behaviours for the first requests, in order: 500 (answer 500), slow (answer after 5 s, past
the sender's timeout), slower (answer after 15 s), stall (answer 200 at once but send the body 5 s later), staller
(the same, 15 s later), close (drop the connection without
answering), big (answer 200 with a 2 MiB body), ok. Every request after the plan is ok.
"""
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

secret, log_path, plan = os.environ["RECEIVER_SECRET"], sys.argv[1], [p for p in sys.argv[2].split(",") if p]
webhook = Webhook(secret)
lock = threading.Lock()
count = [0]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        if len(body) < length:
            # The sender went away mid-body (an instance stopped): nothing to verify, nothing to answer.
            with lock:
                with open(log_path, "a") as log:
                    log.write(json.dumps({"id": self.headers.get("webhook-id"), "behaviour": "truncated", "verified": False}) + "\n")
            self.close_connection = True
            return
        with lock:
            index = count[0]
            count[0] += 1
        behaviour = plan[index] if index < len(plan) else "ok"
        try:
            payload = webhook.verify(body, dict(self.headers))
            verified = True
        except Exception as error:
            payload, verified = {"error": str(error)}, False
        record = {
            "id": self.headers.get("webhook-id"), "behaviour": behaviour, "verified": verified,
            "type": payload.get("type"), "customer": payload.get("data", {}).get("customerId"),
            "sequence": payload.get("data", {}).get("sequence"),
        }
        with lock:
            with open(log_path, "a") as log:
                log.write(json.dumps(record) + "\n")
        if behaviour == "close":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if behaviour in ("stall", "staller"):
            self.send_response(200)
            self.send_header("content-length", "100")
            self.end_headers()
            self.wfile.flush()
            time.sleep(5 if behaviour == "stall" else 15)
            self.wfile.write(b"x" * 100)
            return
        if behaviour == "big":
            self.send_response(200)
            self.send_header("content-length", str(2 << 20))
            self.end_headers()
            try:
                self.wfile.write(b"y" * (2 << 20))
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        if behaviour == "slow":
            time.sleep(5)
        if behaviour == "slower":
            time.sleep(15)
        status = 500 if behaviour == "500" else (204 if verified else 400)
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
