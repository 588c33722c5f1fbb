#!/usr/bin/env python3
"""The cost of `ls` to the server and its client: two builds side by side in one run.

Each build serves the same 36-entry directory over stdio; the client sends `ls` calls one at a
time (sequential) and then with 16 in flight, and reads every answer whole (as JSON). Reported
per build and round: calls per second, the server's CPU per call (utime + stime from
/proc/PID/stat, deltas over the measurement) and the answer's size in bytes. Builds alternate
measurement by measurement (A B, then B A next round); the summary gives medians and A/B.

Usage: scripts/ls-cost.py A_BINARY B_BINARY [--rounds N] [--calls N]
(e.g. this build against stop 20's, 615853c, both `cargo build --release`).
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Server:
    def __init__(self, binary, root):
        self.process = subprocess.Popen(
            [binary, "--mount", f"/=disk:{root}"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next_id = 1
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "ls-cost", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.process.stdin.write((json.dumps(message) + "\n").encode())
        self.process.stdin.flush()

    def send_call(self):
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                   "params": {"name": "ls", "arguments": {"path": "/dir"}}})
        self.next_id += 1

    def receive(self):
        line = self.process.stdout.readline()
        json.loads(line)
        return len(line)

    def request(self, method, params):
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        self.next_id += 1
        return self.receive()

    def close(self):
        self.process.kill()
        self.process.wait()


def measure(server, calls, in_flight):
    pid = server.process.pid
    cpu_before, started = cpu_seconds(pid), time.perf_counter()
    sent = received = size = 0
    while sent < min(in_flight, calls):
        server.send_call()
        sent += 1
    while received < calls:
        size = server.receive()
        received += 1
        if sent < calls:
            server.send_call()
            sent += 1
    wall = time.perf_counter() - started
    return calls / wall, (cpu_seconds(pid) - cpu_before) / calls * 1e6, size


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=4000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        os.mkdir(f"{root}/dir")
        for i in range(30):
            with open(f"{root}/dir/file-{i:02}.rs", "w") as f:
                f.write("fn main() {}\n" * (i + 1))
        for i in range(6):
            os.mkdir(f"{root}/dir/sub-{i}")
        servers = {"A": Server(args.a, root), "B": Server(args.b, root)}
        for server in servers.values():  # warm up
            measure(server, 200, 1)
        results = {(name, flight): [] for name in servers for flight in (1, 16)}
        for round_ in range(args.rounds):
            order = ["A", "B"] if round_ % 2 == 0 else ["B", "A"]
            for flight in (1, 16):
                for name in order:
                    results[(name, flight)].append(measure(servers[name], args.calls, flight))
        for server in servers.values():
            server.close()
    for flight in (1, 16):
        row = {}
        for name in ("A", "B"):
            rates, cpus, sizes = zip(*results[(name, flight)])
            row[name] = (statistics.median(rates), statistics.median(cpus), sizes[-1])
            print(f"{name} in flight {flight:2}: {row[name][0]:8.0f} calls/s, "
                  f"{row[name][1]:6.1f} us CPU/call, answer {row[name][2]} bytes "
                  f"(rates {', '.join(f'{r:.0f}' for r in rates)})")
        print(f"A/B in flight {flight:2}: rate {row['A'][0] / row['B'][0]:.2f}x, "
              f"CPU per call {row['A'][1] / row['B'][1]:.2f}x")


if __name__ == "__main__":
    main()
