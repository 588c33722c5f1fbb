#!/usr/bin/env python3
"""Two mountfs binaries on one call, alternating (issue 42): both servers up over stdio on
the same disk workspace, each call written as one JSON-RPC line and its answer read, NEW and
OLD taking turns (the order flips every call); prints p50, p90, max and server CPU per call.

    python3 scripts/ab-call.py NEW OLD WORKSPACE ARGUMENTS_JSON [CALLS]

ARGUMENTS_JSON are grep's arguments, e.g. '{"pattern": "x", "literal": true, "path": "/"}'.
"""
import json, os, subprocess, sys, time, statistics
ws = sys.argv[3]; args = json.loads(sys.argv[4]); n = int(sys.argv[5]) if len(sys.argv) > 5 else 30
class Lean:
    def __init__(self, program):
        self.proc = subprocess.Popen([program, "--mount", f"/=disk:{ws}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, "RUST_LOG": "warn"})
        self.i = 1
        self.req("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "ab", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    def send(self, m):
        self.proc.stdin.write(json.dumps(m).encode() + b"\n"); self.proc.stdin.flush()
    def req(self, method, params):
        self.i += 1; self.send({"jsonrpc": "2.0", "id": self.i, "method": method, "params": params})
        while True:
            a = json.loads(self.proc.stdout.readline())
            if a.get("id") == self.i: return a
    def cpu(self):
        f = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) * 10.0
servers = {"new": Lean(sys.argv[1]), "old": Lean(sys.argv[2])}
time.sleep(3)
t = {k: [] for k in servers}; c = {k: 0.0 for k in servers}
for s in servers.values(): s.req("tools/call", {"name": "grep", "arguments": args})
for r in range(n):
    for k in (["new", "old"] if r % 2 == 0 else ["old", "new"]):
        s = servers[k]; c0 = s.cpu(); st = time.perf_counter()
        a = s.req("tools/call", {"name": "grep", "arguments": args})
        t[k].append((time.perf_counter() - st) * 1000); c[k] += s.cpu() - c0
for k in t:
    v = sorted(t[k]); print(k, "p50 %.1f p90 %.1f max %.1f cpu/call %.1f ms" % (statistics.median(v), v[int(len(v) * .9)], v[-1], c[k] / n))
