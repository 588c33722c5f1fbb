#!/usr/bin/env python3
"""Server CPU per call at an agent's pace, beside the same calls sent back to back and pipelined.

An agent calls one tool, waits for the model, calls the next: between two calls the server is
idle, its threads asleep, and each call pays for waking them. This script serves one small tree
from each server named on the command line and, for `read_file` of a 2 KiB file and `ls` of a
36-entry directory, sends the same calls three ways:

  paced       one at a time, with a pause (--gap-ms, default 5) after each answer: the server
              is idle when the next call arrives, as at an agent's pace;
  sequential  one at a time, the next sent as soon as the answer is read;
  pipelined   16 in flight.

Reported: the server's CPU per call (the on-CPU time of every thread, from the scheduler's
statistics in /proc/PID/task/*/schedstat, over the measurement; utime + stime in 10 ms ticks
where those are missing), medians over --rounds rounds in
which the servers alternate (A B C, then B C A, ...). A fresh server process per measurement,
warmed with 50 calls. The summary gives paced/pipelined per server and each server's paced CPU
against the first server's.

Usage:
  scripts/pace-cost.py --mountfs BIN [--mountfs BIN2] [--reference CMD] [--rounds N] [--calls N]
CMD for the reference server: the path of `mcp-server-filesystem` (node), as scripts/bench-peers
installs it under bench-peers/node/node_modules/.bin/.

--floor adds a server that does nothing but the I/O: a C program (compiled here with `cc -O2`)
that reads each request line, opens and reads the file (or lists the directory) and writes a
JSON-RPC answer with it, one flushed write per answer: no JSON parsing, no schema, no runtime.
Its paced/pipelined ratio is what waking an idle process costs on this machine, the floor under
any server's (issue 31).
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")
IN_FLIGHT = 16


def cpu_seconds(pid):
    """CPU time of every live thread of `pid`, in nanoseconds' resolution where the kernel keeps
    scheduler statistics (/proc/PID/task/TID/schedstat), else in clock ticks."""
    try:
        total = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as schedstat:
                total += int(schedstat.read().split()[0])
        return total / 1e9
    except (FileNotFoundError, ValueError):
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK


FLOOR_SOURCE = r"""
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char line[1 << 16], body[1 << 16], escaped[1 << 17];

static void escape(const char *in, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i] == '\n') { escaped[o++] = '\\'; escaped[o++] = 'n'; }
        else if (in[i] == '"' || in[i] == '\\') { escaped[o++] = '\\'; escaped[o++] = in[i]; }
        else escaped[o++] = in[i];
    }
    escaped[o] = 0;
}

int main(int argc, char **argv) {
    char file[4096], dir[4096];
    snprintf(file, sizeof file, "%s/small.rs", argv[1]);
    snprintf(dir, sizeof dir, "%s/dir", argv[1]);
    while (fgets(line, sizeof line, stdin)) {
        char *id = strstr(line, "\"id\":");
        if (!id) continue;
        size_t n = 0;
        if (strstr(line, "\"initialize\"")) {
            n = (size_t)sprintf(body, "ok");
        } else if (strstr(line, "\"ls\"")) {
            DIR *d = opendir(dir);
            struct dirent *e;
            while (d && (e = readdir(d)) && n < sizeof body - 512)
                n += (size_t)sprintf(body + n, "%s\n", e->d_name);
            if (d) closedir(d);
        } else {
            int fd = open(file, O_RDONLY);
            ssize_t got = fd < 0 ? 0 : read(fd, body, sizeof body);
            if (fd >= 0) close(fd);
            n = got > 0 ? (size_t)got : 0;
        }
        escape(body, n);
        printf("{\"jsonrpc\":\"2.0\",\"id\":%ld,\"result\":{\"content\":[{\"type\":\"text\","
               "\"text\":\"%s\"}]}}\n", strtol(id + 5, NULL, 10), escaped);
        fflush(stdout);
    }
    return 0;
}
"""


def build_floor(directory):
    source = os.path.join(directory, "floor.c")
    program = os.path.join(directory, "floor")
    with open(source, "w") as out:
        out.write(FLOOR_SOURCE)
    subprocess.run(["cc", "-O2", "-o", program, source], check=True)
    return program


def make_tree(root):
    line = "let value = compute(alpha, beta); // a line of a source file\n"
    with open(os.path.join(root, "small.rs"), "w") as out:
        out.write(line * (2048 // len(line)))
    os.mkdir(os.path.join(root, "dir"))
    for index in range(30):
        with open(os.path.join(root, "dir", f"file_{index:02}.rs"), "w") as out:
            out.write(line * (index + 1))
    for index in range(6):
        os.mkdir(os.path.join(root, "dir", f"sub_{index}"))


class Server:
    """One server process over stdio, speaking newline-delimited JSON-RPC."""

    def __init__(self, kind, program, root):
        self.kind = kind
        self.root = root
        if kind == "mountfs":
            argv = [program, "--mount", f"/=disk:{root}"]
        elif kind == "floor":
            argv = [program, root]
        else:
            argv = [program, root]
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL)
        self.next_id = 1
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                   "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "pace-cost", "version": "1"}}})
        self.receive()
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, tool):
        if self.kind in ("mountfs", "floor"):
            name, arguments = {"read": ("read_file", {"file_path": "/small.rs"}),
                               "ls": ("ls", {"path": "/dir"})}[tool]
        else:
            name, arguments = {"read": ("read_text_file",
                                        {"path": os.path.join(self.root, "small.rs")}),
                               "ls": ("list_directory",
                                      {"path": os.path.join(self.root, "dir")})}[tool]
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                   "params": {"name": name, "arguments": arguments}}
        self.next_id += 1
        return (json.dumps(message) + "\n").encode()

    def send(self, message):
        self.process.stdin.write((json.dumps(message) + "\n").encode())
        self.process.stdin.flush()

    def send_bytes(self, data):
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def receive(self):
        line = self.process.stdout.readline()
        answer = json.loads(line)
        if "error" in answer or answer.get("result", {}).get("isError"):
            raise RuntimeError(f"{self.kind}: a call failed: {line[:300]!r}")
        return answer

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=10)


def measure(server, tool, mode, calls, gap):
    for _ in range(50):
        server.send_bytes(server.call(tool))
        server.receive()
    time.sleep(0.2)
    pid = server.process.pid
    before = cpu_seconds(pid)
    if mode == "pipelined":
        sent = received = 0
        while received < calls:
            while sent < calls and sent - received < IN_FLIGHT:
                server.send_bytes(server.call(tool))
                sent += 1
            server.receive()
            received += 1
    else:
        for _ in range(calls):
            server.send_bytes(server.call(tool))
            server.receive()
            if mode == "paced":
                time.sleep(gap)
    return (cpu_seconds(pid) - before) / calls


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mountfs", action="append", default=[], help="a mountfs binary")
    parser.add_argument("--reference", help="the reference server's mcp-server-filesystem")
    parser.add_argument("--floor", action="store_true",
                        help="add the I/O-only C server (needs cc) as the floor")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    args = parser.parse_args()
    servers = [("mountfs", program, f"mountfs {index + 1}" if len(args.mountfs) > 1
                else "mountfs") for index, program in enumerate(args.mountfs)]
    if args.reference:
        servers.append(("reference", args.reference, "reference"))
    if not servers and not args.floor:
        parser.error("name at least one server")
    modes = ["paced", "sequential", "pipelined"]
    results = {}
    with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as build:
        if args.floor:
            servers.append(("floor", build_floor(build), "floor"))
        make_tree(root)
        for round_index in range(args.rounds):
            order = servers[round_index % len(servers):] + servers[:round_index % len(servers)]
            for tool in ["read", "ls"]:
                for mode in modes:
                    for kind, program, label in order:
                        server = Server(kind, program, root)
                        try:
                            cost = measure(server, tool, mode, args.calls, args.gap_ms / 1000)
                        finally:
                            server.close()
                        results.setdefault((label, tool, mode), []).append(cost)
                        print(f"round {round_index + 1} {label:>10} {tool:>4} {mode:>10}: "
                              f"{cost * 1e6:8.1f} µs CPU/call", flush=True)
    print()
    print(f"Medians over {args.rounds} rounds of {args.calls} calls (gap {args.gap_ms} ms when "
          "paced); server CPU per call in µs")
    first = servers[0][2]  # the floor joins last: `servers` is never empty here
    print("| server | tool | paced | sequential | pipelined | paced/pipelined | "
          f"paced vs {first} |")
    print("|---|---|---|---|---|---|---|")
    for tool in ["read", "ls"]:
        for _, _, label in servers:
            median = {mode: statistics.median(results[(label, tool, mode)]) for mode in modes}
            against = median["paced"] / statistics.median(results[(first, tool, "paced")])
            print(f"| {label} | {tool} | {median['paced'] * 1e6:.1f} | "
                  f"{median['sequential'] * 1e6:.1f} | {median['pipelined'] * 1e6:.1f} | "
                  f"{median['paced'] / median['pipelined']:.2f}× | {against:.2f}× |")


if __name__ == "__main__":
    main()
