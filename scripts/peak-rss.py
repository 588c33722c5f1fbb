#!/usr/bin/env python3
"""Peak memory of mountfs servers under 16 greps in flight, and what it is made of (issue 45).

Starts each PROGRAM over stdio on DIR (the peers bench's workspace: its `small/` tree is
searched), warms it up as the peers bench does (20 reads, 20 listings), resets its peak
(`5 > /proc/PID/clear_refs`), then sends ROUNDS bursts of 16 concurrent greps (content and
files_with_matches in turn, literal `deprecated_api_call` and the regex
`legacy::\\s*deprecated_\\w+\\(`), each burst answered before the next. Programs alternate,
one fresh process per round each. Prints per program the median over rounds of: VmHWM (the
peak), and at the end of the round RssFile (code and other file pages; they are not given back
during a run, so the peak's file part is at most this), RssAnon, the binary's own resident
pages, and the thread count; and `peak - RssFile` (the anonymous part of the peak, at least).

    python3 scripts/peak-rss.py DIR PROGRAM [PROGRAM ...] [--rounds N] [--limit-mib X] [--settle S]

With --settle S, each server waits S seconds after the warm-up before its peak is reset: a
server that has been up a while (mountfs gives its start-up code back 2 s after start).

With --limit-mib, exits 1 if any program's median peak is over X MiB.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def status(pid):
    fields = {}
    for line in open(f"/proc/{pid}/status"):
        key, value = line.split(":", 1)
        fields[key] = value.strip()
    kib = lambda k: int(fields[k].split()[0])
    return {"VmHWM": kib("VmHWM"), "RssFile": kib("RssFile"), "RssAnon": kib("RssAnon"),
            "Threads": int(fields["Threads"])}


def sections(program):
    """(name, file offset, size) of the executable's loaded sections (`readelf -SW`)."""
    out = subprocess.run(["readelf", "-SW", program], stdout=subprocess.PIPE, text=True).stdout
    found = []
    for line in out.splitlines():
        line = line.replace("[ ", "[")
        parts = line.split()
        if len(parts) > 7 and parts[0].startswith("[") and parts[0] != "[Nr]":
            name, offset, size, flags = parts[1], int(parts[4], 16), int(parts[5], 16), parts[7]
            if "A" in flags and size:
                found.append((name, offset, size))
    return found


def resident_by_section(pid, program):
    """Resident KiB of the executable's mapped pages per section (via /proc/PID/pagemap)."""
    real = os.path.realpath(program)
    secs = sections(program)
    counts = {}
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in open(f"/proc/{pid}/maps"):
            parts = line.split()
            if len(parts) < 6 or parts[5] != real:
                continue
            start, end = (int(x, 16) for x in parts[0].split("-"))
            offset = int(parts[2], 16)
            pagemap.seek(start // 4096 * 8)
            entries = pagemap.read((end - start) // 4096 * 8)
            for i in range(0, len(entries), 8):
                if not int.from_bytes(entries[i:i + 8], "little") >> 63:
                    continue
                page = offset + i // 8 * 4096
                name = next((n for n, o, z in secs if o < page + 4096 and page < o + z), "(other)")
                counts[name] = counts.get(name, 0) + 4
    return counts


def binary_rss(pid, program):
    """Resident KiB of the mappings of the executable itself (its code and data pages)."""
    real = os.path.realpath(program)
    total, current = 0, None
    for line in open(f"/proc/{pid}/smaps"):
        parts = line.split()
        if len(parts) >= 5 and "-" in parts[0] and ":" in parts[3]:
            current = parts[5] if len(parts) > 5 else ""
        elif parts and parts[0] == "Rss:" and current == real:
            total += int(parts[1])
    return total


class Server:
    def __init__(self, program, tree):
        self.proc = subprocess.Popen([program, "--mount", f"/=disk:{tree}"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env={**os.environ, "RUST_LOG": "warn"})
        self.id = 0
        self.call_wait("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                      "clientInfo": {"name": "peak-rss", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def start(self, method, params):
        self.id += 1
        self.send({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})

    def answers(self, count):
        for _ in range(count):
            answer = json.loads(self.proc.stdout.readline())
            assert "result" in answer and not answer["result"].get("isError"), answer

    def call_wait(self, method, params):
        self.start(method, params)
        self.answers(1)

    def tool(self, name, arguments):
        self.start("tools/call", {"name": name, "arguments": arguments})

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


GREPS = [
    {"pattern": "deprecated_api_call", "literal": True, "output_mode": "content"},
    {"pattern": "deprecated_api_call", "literal": True},
    {"pattern": r"legacy::\s*deprecated_\w+\(", "output_mode": "content"},
    {"pattern": "deprecated_api_call", "literal": True, "output_mode": "count"},
]


def one_round(program, workspace, bursts, settle):
    server = Server(program, workspace)
    for _ in range(20):
        server.tool("read_file", {"file_path": "/small/README.md"})
        server.answers(1)
        server.tool("ls", {"path": "/small/crates/c00/src"})
        server.answers(1)
    # A server that has been up a while (mountfs drops its start-up code 2 s after start).
    time.sleep(settle)
    with open(f"/proc/{server.proc.pid}/clear_refs", "w") as f:
        f.write("5")
    for _ in range(bursts):
        for i in range(16):
            server.tool("grep", {**GREPS[i % len(GREPS)], "path": "/small"})
        server.answers(16)
    figures = status(server.proc.pid)
    figures["binary"] = binary_rss(server.proc.pid, program)
    figures["sections"] = resident_by_section(server.proc.pid, program)
    server.close()
    return figures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("workspace")
    parser.add_argument("programs", nargs="+")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--limit-mib", type=float)
    parser.add_argument("--settle", type=float, default=0.0,
                        help="seconds to wait after the warm-up, before the peak is reset")
    options = parser.parse_args()
    results = {p: [] for p in options.programs}
    loads = [open("/proc/loadavg").read().split()[0]]
    for r in range(options.rounds):
        shift = r % len(options.programs)
        for program in options.programs[shift:] + options.programs[:shift]:
            results[program].append(one_round(program, options.workspace, options.bursts, options.settle))
        loads.append(open("/proc/loadavg").read().split()[0])
    print(f"{options.rounds} rounds x {options.bursts} bursts of 16 greps in flight on "
          f"{options.workspace}/small; load average per round: {' '.join(loads)}")
    print("| program | peak (VmHWM) MiB | RssFile MiB | of it the binary | RssAnon at end MiB | peak - RssFile MiB | threads |")
    print("|---|---|---|---|---|---|---|")
    over = False
    for program, rounds in results.items():
        med = lambda k: statistics.median(r[k] for r in rounds) / 1024
        peaks = sorted(r["VmHWM"] / 1024 for r in rounds)
        anon_peak = statistics.median((r["VmHWM"] - r["RssFile"]) / 1024 for r in rounds)
        print(f"| {program} | {med('VmHWM'):.1f} ({peaks[0]:.1f}–{peaks[-1]:.1f}) | {med('RssFile'):.1f} "
              f"| {med('binary'):.1f} | {med('RssAnon'):.1f} | {anon_peak:.1f} "
              f"| {statistics.median(r['Threads'] for r in rounds):.0f} |")
        names = sorted({n for r in rounds for n in r["sections"]},
                       key=lambda n: -statistics.median(r["sections"].get(n, 0) for r in rounds))
        print("  resident pages of the binary by section (KiB, median): " + ", ".join(
            f"{n} {statistics.median(r['sections'].get(n, 0) for r in rounds):.0f}" for n in names))
        if options.limit_mib is not None and med("VmHWM") > options.limit_mib:
            over = True
            print(f"  over the {options.limit_mib} MiB bound", file=sys.stderr)
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
