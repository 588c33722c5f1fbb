#!/usr/bin/env python3
"""CPU a mountfs server uses in the first seconds after it starts, idle (issue 31).

Starts each PROGRAM over stdio with `--mount /=disk:TREE`, sends `initialize` and
`notifications/initialized`, and stops it (stdin closed) SECONDS after it was spawned; the
server's whole CPU time (every thread, exited ones too) is `perf stat -e task-clock`'s, and
the part after the `initialize` answer is told apart through /proc/PID/stat (utime+stime, in
clock ticks). Programs alternate, ROUNDS times; medians are printed.

    python3 scripts/idle-cpu.py [--rounds N] [--seconds S] TREE PROGRAM [PROGRAM ...]

A tree of many empty files, for the "grows with the tree" question:
    python3 scripts/idle-cpu.py --make-empty-tree DIR 200000
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def one_run(program, tree, seconds):
    out = tempfile.NamedTemporaryFile(suffix=".perf", delete=False)
    out.close()
    spawned = time.monotonic()
    server = subprocess.Popen(
        ["perf", "stat", "-x", ",", "-e", "task-clock", "-o", out.name, "--",
         program, "--mount", f"/=disk:{tree}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    # perf forks the server: find its pid (the only child of perf).
    pid = None
    while pid is None and time.monotonic() - spawned < 5:
        try:
            with open(f"/proc/{server.pid}/task/{server.pid}/children") as f:
                children = f.read().split()
            pid = int(children[0]) if children else None
        except OSError:
            pass
    server.stdin.write(json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "idle-cpu", "version": "1"}}}) + "\n")
    server.stdin.flush()
    server.stdout.readline()
    initialized = time.monotonic() - spawned
    at_init = cpu_ticks(pid)
    server.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    server.stdin.flush()
    time.sleep(max(0.0, seconds - (time.monotonic() - spawned)))
    after = cpu_ticks(pid) - at_init
    server.stdin.close()
    server.wait()
    task_clock = None
    with open(out.name) as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) > 2 and parts[2] == "task-clock":
                task_clock = float(parts[0])
    os.unlink(out.name)
    return task_clock, after * TICK_MS, initialized * 1000


def make_empty_tree(root, files):
    per_dir = 100
    for d in range(files // per_dir):
        sub = os.path.join(root, f"d{d // 100:03}", f"e{d % 100:02}")
        os.makedirs(sub, exist_ok=True)
        for i in range(per_dir):
            open(os.path.join(sub, f"f{i:03}.txt"), "w").close()


def main():
    args = sys.argv[1:]
    if args and args[0] == "--make-empty-tree":
        make_empty_tree(args[1], int(args[2]))
        return
    rounds, seconds = 5, 3.0
    while args and args[0].startswith("--"):
        flag, value = args[0], args[1]
        args = args[2:]
        if flag == "--rounds":
            rounds = int(value)
        elif flag == "--seconds":
            seconds = float(value)
    tree, programs = args[0], args[1:]
    results = {p: [] for p in programs}
    for r in range(rounds):
        order = programs[r % len(programs):] + programs[:r % len(programs)]
        for program in order:
            results[program].append(one_run(program, tree, seconds))
    print(f"tree {tree}, {rounds} rounds, stopped {seconds} s after spawn; medians:")
    for program, runs in results.items():
        total = statistics.median(r[0] for r in runs)
        idle = statistics.median(r[1] for r in runs)
        init = statistics.median(r[2] for r in runs)
        print(f"  {program}: CPU spawn→stop {total:.1f} ms (task-clock, all threads), "
              f"after the initialize answer {idle:.0f} ms (/proc ticks of {TICK_MS:.0f} ms), "
              f"spawn→initialized {init:.1f} ms  [runs: "
              + ", ".join(f"{r[0]:.1f}" for r in runs) + "]")


if __name__ == "__main__":
    main()
