#!/usr/bin/env python3
"""Purchases through a running simulator's control API, for any build of `storekeeper` (old or new).

Starts `BINARY simulator init` in a temporary directory, serves it on a loopback port with a loopback receiver
(answers 200 and notes when each notification arrives), buys PURCHASES consumables with CONCURRENCY keep-alive
clients, and prints JSON: purchases/s, p50/p99, notifications/s per 1,000 arrivals, and the size of the state.

    python3 Benchmarks/simulator-purchases.py .build/release/storekeeper --purchases 2000 --concurrency 16
"""
import argparse, http.client, http.server, json, os, shutil, socket, subprocess, sys, tempfile, threading, time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    arrivals = []
    lock = threading.Lock()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with Receiver.lock:
            Receiver.arrivals.append(time.monotonic())
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def request(connection, method, path, body):
    connection.request(method, path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    return response.status


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--purchases", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--customers", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=600, help="stop buying after this many seconds")
    parser.add_argument("--slice", type=int, default=1000, help="notifications per slice of the delivery rate")
    args = parser.parse_args()

    directory = tempfile.mkdtemp(prefix="simulator-purchases-")
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    port = free_port()
    simulator = None
    try:
        subprocess.run([args.binary, "simulator", "init", directory + "/sim"], check=True, stdout=subprocess.DEVNULL)
        simulator = subprocess.Popen(
            [args.binary, "simulator", "--dir", directory + "/sim", "--port", str(port),
             "--notify-url", f"http://127.0.0.1:{receiver.server_address[1]}/notifications"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                setup = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                setup.request("GET", "/health")
                setup.getresponse().read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        customers = [f"customer-{i}" for i in range(args.customers)]
        for customer in customers:
            assert request(setup, "POST", "/simulator/v1/customers", {"id": customer}) == 201
        latencies, failures = [], [0]
        stop_at = time.monotonic() + args.timeout

        def worker(index):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            for n in range(index, args.purchases, args.concurrency):
                if time.monotonic() > stop_at:
                    break
                began = time.monotonic()
                try:
                    status = request(connection, "POST", "/simulator/v1/purchases",
                                     {"customerId": customers[n % len(customers)], "productId": "coins.100"})
                except OSError:
                    status = 0
                    connection.close()
                    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                latencies.append(time.monotonic() - began)
                if status != 200:
                    failures[0] += 1

        began = time.monotonic()
        Receiver.arrivals.clear()
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.concurrency)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        answered = time.monotonic()
        while len(Receiver.arrivals) < len(latencies) and time.monotonic() < answered + 120:
            time.sleep(0.05)
        arrivals = sorted(Receiver.arrivals)
        slices, start = [], began
        for end in range(args.slice - 1, len(arrivals), args.slice):
            slices.append(round(args.slice / (arrivals[end] - start), 1))
            start = arrivals[end]
        latencies.sort()
        seconds = answered - began
        files = [os.path.join(root, name) for root, _, names in os.walk(directory + "/sim") for name in names
                 if name.startswith("state.json") or name.startswith("simulator.sqlite")]
        print(json.dumps({
            "purchases": len(latencies), "failures": failures[0], "concurrency": args.concurrency,
            "seconds": round(seconds, 2), "purchasesPerSecond": round(len(latencies) / seconds, 1),
            "p50Milliseconds": round(latencies[len(latencies) // 2] * 1000, 1),
            "p99Milliseconds": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, 1),
            "notificationsDelivered": len(arrivals),
            "notificationsPerSecondBySlice": slices, "slice": args.slice,
            "stateBytes": sum(os.path.getsize(f) for f in files),
        }, indent=2))
    finally:
        if simulator:
            simulator.kill()
            simulator.wait()
        receiver.shutdown()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
