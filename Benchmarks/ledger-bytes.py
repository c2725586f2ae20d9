"""Ledger bytes per notification, for any storekeeper binary (also those without `bench ingest`'s figure): N purchases
(coins.100 and pro.monthly alternately, the ingest benchmark's kind) sold by a simulator and delivered to `serve`
of the binary under test; bytes of the SQLite pages in use afterwards, less an empty ledger's.

Usage: python3 Benchmarks/ledger-bytes.py SERVER_BINARY SIMULATOR_BINARY COUNT
"""
import json, subprocess, sys, time, uuid, urllib.request, tempfile, socket, hashlib, sqlite3, os

server_binary, simulator_binary, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
work = tempfile.mkdtemp(prefix="bytes-")
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def used(path):
    db = sqlite3.connect(path); db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    pages = db.execute("PRAGMA page_count").fetchone()[0] - db.execute("PRAGMA freelist_count").fetchone()[0]
    size = pages * db.execute("PRAGMA page_size").fetchone()[0]; db.close(); return size
sim_port, srv_port = free_port(), free_port()
subprocess.run([simulator_binary, "simulator", "init", f"{work}/sim"], check=True, capture_output=True)
config = {"apps": [{"bundleId": "com.example.storekeeper", "appAppleId": 6450000001, "environments": ["Sandbox"], "trustedRoots": [f"{work}/sim/ca/root.pem"]}]}
json.dump(config, open(f"{work}/config.json", "w"))
def serve(db):
    p = subprocess.Popen([server_binary, "serve", "--config", f"{work}/config.json", "--port", str(srv_port), "--database", db], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    p.stdout.readline(); return p
empty = serve(f"{work}/empty.sqlite"); empty.terminate(); empty.wait()
server = serve(f"{work}/db.sqlite")
sim = subprocess.Popen([simulator_binary, "simulator", "--dir", f"{work}/sim", "--port", str(sim_port), "--notify-url", f"http://127.0.0.1:{srv_port}/appstore/notifications"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(2)
def call(method, url, body=None):
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body is not None else None, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r: return json.loads(r.read() or b"{}")
S = f"http://127.0.0.1:{sim_port}/simulator/v1"
for i in range(count):
    call("POST", f"{S}/customers", {"id": f"c{i}", "storefront": "USA"})
    call("POST", f"{S}/purchases", {"customerId": f"c{i}", "productId": "coins.100" if i % 2 == 0 else "pro.monthly"})
for _ in range(600):
    pending = [n for n in call("GET", f"{S}/notifications") if n.get("lastResult") != "SUCCESS"]
    if not pending: break
    time.sleep(0.5)
server.terminate(); sim.terminate(); server.wait(); sim.wait()
print(json.dumps({"notifications": count, "undelivered": len(pending), "bytesPerNotification": (used(f"{work}/db.sqlite") - used(f"{work}/empty.sqlite")) // count}))
