#!/usr/bin/env python3
"""What the change journal (issues 32, 33) costs: a 2,000-file `apply_patch` on a disk mount and
a 3,000-file overlay `commit`, timed over stdio against one or more `mountfs` binaries (say, a
build of this branch and one of the commit before it), in alternating rounds so that the drift
of a shared machine hits each alike.

Run: python3 benches/journal.py [--rounds N] [--dir DIR] NAME=BINARY [NAME=BINARY ...]
(release builds: cargo build --release). DIR (default: a temporary directory) decides the file
system, and so the cost of each fsync.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time


class Server:
    def __init__(self, binary, args):
        self.proc = subprocess.Popen(
            [binary, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": "error"},
        )
        self.next = 1
        self.request("initialize", {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "journal-bench", "version": "1"},
        })
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method, params):
        ident = self.next
        self.next += 1
        self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        while True:
            message = json.loads(self.proc.stdout.readline())
            if message.get("id") == ident:
                return message

    def call(self, tool, arguments):
        result = self.request("tools/call", {"name": tool, "arguments": arguments})["result"]
        if result.get("isError"):
            raise RuntimeError(f"{tool}: {result['content'][0]['text'][:300]}")
        return result

    def read_all(self, paths):
        # In batches: all at once, the server's answers would fill the pipe while this
        # process still writes requests, and both would wait for ever.
        for start in range(0, len(paths), 32):
            pending = set()
            for path in paths[start:start + 32]:
                ident = self.next
                self.next += 1
                pending.add(ident)
                self.send({"jsonrpc": "2.0", "id": ident, "method": "tools/call",
                           "params": {"name": "read_file", "arguments": {"file_path": path}}})
            while pending:
                message = json.loads(self.proc.stdout.readline())
                pending.discard(message.get("id"))

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def fresh(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


def patch_round(binary, work):
    """2,000 files: 900 deleted, 900 created, 200 modified."""
    root = os.path.join(work, "patch")
    fresh(root)
    for i in range(900):
        os.makedirs(os.path.join(root, f"a{i % 10}"), exist_ok=True)
        with open(os.path.join(root, f"a{i % 10}/f{i}.txt"), "w") as f:
            f.write(f"a {i}\n")
    os.makedirs(os.path.join(root, "m"))
    for i in range(200):
        with open(os.path.join(root, f"m/f{i}.txt"), "w") as f:
            f.write(f"m {i} a\n")
    patch = []
    read = []
    for i in range(900):
        read.append(f"/a{i % 10}/f{i}.txt")
        patch.append(f"--- a/a{i % 10}/f{i}.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-a {i}\n")
        patch.append(f"--- /dev/null\n+++ b/b{i % 10}/f{i}.txt\n@@ -0,0 +1 @@\n+b {i}\n")
    for i in range(200):
        read.append(f"/m/f{i}.txt")
        patch.append(f"--- a/m/f{i}.txt\n+++ b/m/f{i}.txt\n@@ -1 +1 @@\n-m {i} a\n+m {i} b\n")
    server = Server(binary, ["--mount", f"/=disk:{root}"])
    server.read_all(read)
    started = time.perf_counter()
    server.call("apply_patch", {"patch": "".join(patch)})
    elapsed = time.perf_counter() - started
    server.close()
    return elapsed


def commit_round(binary, work):
    """3,000 files: 2,700 created, 200 modified, 100 deleted, through a memory layer."""
    base = os.path.join(work, "base")
    fresh(base)
    os.makedirs(os.path.join(base, "m"))
    os.makedirs(os.path.join(base, "d"))
    for i in range(200):
        with open(os.path.join(base, f"m/f{i}.txt"), "w") as f:
            f.write(f"m {i} old\n")
    for i in range(100):
        with open(os.path.join(base, f"d/f{i}.txt"), "w") as f:
            f.write(f"d {i}\n")
    patch = []
    read = []
    for i in range(200):
        read.append(f"/m/f{i}.txt")
        patch.append(f"--- a/m/f{i}.txt\n+++ b/m/f{i}.txt\n@@ -1 +1 @@\n-m {i} old\n+m {i} new\n")
    for i in range(100):
        read.append(f"/d/f{i}.txt")
        patch.append(f"--- a/d/f{i}.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-d {i}\n")
    for i in range(2700):
        patch.append(f"--- /dev/null\n+++ b/n{i % 10}/f{i}.txt\n@@ -0,0 +1 @@\n+n {i}\n")
    server = Server(binary, ["--mount", f"/=disk:{base},overlay"])
    server.read_all(read)
    server.call("apply_patch", {"patch": "".join(patch)})
    started = time.perf_counter()
    server.call("commit", {"path": "/"})
    elapsed = time.perf_counter() - started
    server.close()
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None)
    parser.add_argument("binaries", nargs="+")
    args = parser.parse_args()
    binaries = [b.split("=", 1) for b in args.binaries]
    work = tempfile.mkdtemp(dir=args.dir)
    times = {(name, kind): [] for name, _ in binaries for kind in ("patch", "commit")}
    try:
        for _ in range(args.rounds):
            for name, binary in binaries:
                times[(name, "patch")].append(patch_round(binary, work))
                times[(name, "commit")].append(commit_round(binary, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for kind in ("patch", "commit"):
        for name, _ in binaries:
            t = times[(name, kind)]
            print(f"{kind:6} {name:10} mean {statistics.mean(t):.3f} s  median {statistics.median(t):.3f} s  "
                  f"min {min(t):.3f} s  ({len(t)} rounds)")


if __name__ == "__main__":
    main()
