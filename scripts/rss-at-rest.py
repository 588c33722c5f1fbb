#!/usr/bin/env python3
"""Memory of a mountfs server at start, under load and at rest (issue 15's RSS targets).

Starts MOUNTFS (a release binary) over stdio on DIR, sends three bursts of 16 concurrent
whole-tree greps (content and files_with_matches in turn), then waits until the blocking
threads have gone idle, and prints VmRSS/VmHWM/Threads from /proc and the file-backed and
anonymous parts from smaps_rollup at each step.

    python3 scripts/rss-at-rest.py target/release/mountfs DIR [PATTERN]

The tree used in BENCHMARKS.md: 40 directories of 100 Rust-like files of 600 lines (126 MB).
"""
import json
import subprocess
import sys
import time


def status(pid):
    fields = {}
    for line in open(f"/proc/{pid}/status"):
        key, value = line.split(":", 1)
        fields[key] = value.strip()
    rollup = {}
    for line in open(f"/proc/{pid}/smaps_rollup"):
        parts = line.split()
        if parts[0] in ("Pss_Anon:", "Pss_File:"):
            rollup[parts[0].rstrip(":")] = parts[1] + " kB"
    return (f"VmRSS {fields['VmRSS']}, VmHWM {fields['VmHWM']}, threads {fields['Threads']}, "
            f"anonymous {rollup.get('Pss_Anon')}, file-backed {rollup.get('Pss_File')}")


def main():
    program, tree = sys.argv[1], sys.argv[2]
    pattern = sys.argv[3] if len(sys.argv) > 3 else "async await vec"
    server = subprocess.Popen([program, "--mount", f"/=disk:{tree}"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def send(message):
        server.stdin.write(json.dumps(message) + "\n")
        server.stdin.flush()

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
          "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                     "clientInfo": {"name": "rss-at-rest", "version": "1"}}})
    server.stdout.readline()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    time.sleep(0.5)
    print("after initialize:", status(server.pid))
    for burst in range(3):
        for i in range(16):
            mode = "files_with_matches" if i % 2 else "content"
            send({"jsonrpc": "2.0", "id": 100 + burst * 16 + i, "method": "tools/call",
                  "params": {"name": "grep", "arguments": {
                      "pattern": pattern, "output_mode": mode, "head_limit": 20}}})
        for _ in range(16):
            server.stdout.readline()
    print("after 3 x 16 greps:", status(server.pid))
    # Tokio's idle blocking threads exit after 10 s.
    time.sleep(14)
    print("at rest, 14 s later:", status(server.pid))
    server.stdin.close()
    server.wait()


if __name__ == "__main__":
    main()
