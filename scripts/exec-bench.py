#!/usr/bin/env python3
"""Time per `execute` call of `true` through a real mountfs binary over stdio (issue 25: the
cost of the namespaces sandbox).

Starts MOUNTFS with --allow-exec[=MODE] on a fresh directory, makes 20 warm-up calls, then N
calls one after another (default 200), each `{"command": "true"}`, and prints the mean, median,
p90 and max of the wall time from request to answer, in milliseconds.

    python3 scripts/exec-bench.py target/release/mountfs [N] [MODE]

MODE: sandboxed (default) or unsandboxed. BENCHMARKS.md compares two release builds (before and
after) made with the same profile.
"""
import json
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    binary = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    mode = sys.argv[3] if len(sys.argv) > 3 else "sandboxed"
    with tempfile.TemporaryDirectory() as work:
        server = subprocess.Popen(
            [binary, f"--allow-exec={mode}", "--mount", f"/=disk:{work}", "--audit", "off"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        next_id = [0]

        def request(method, params):
            next_id[0] += 1
            wanted = next_id[0]
            server.stdin.write(json.dumps(
                {"jsonrpc": "2.0", "id": wanted, "method": method, "params": params}) + "\n")
            server.stdin.flush()
            while True:
                line = server.stdout.readline()
                if not line:
                    raise SystemExit("the server ended")
                message = json.loads(line)
                if message.get("id") == wanted:
                    return message

        request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "exec-bench", "version": "1"}})
        server.stdin.write(json.dumps(
            {"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        server.stdin.flush()

        def call():
            answer = request("tools/call", {"name": "execute",
                                            "arguments": {"command": "true"}})
            result = answer.get("result", {})
            if result.get("isError") or result.get("structuredContent", {}).get("exit_code") != 0:
                raise SystemExit(f"execute true failed: {answer}")

        for _ in range(20):
            call()
        times = []
        for _ in range(count):
            started = time.perf_counter()
            call()
            times.append((time.perf_counter() - started) * 1000)
        server.stdin.close()
        server.wait(timeout=10)
    times.sort()
    p90 = times[int(len(times) * 0.9) - 1]
    print(f"{mode}: {count} calls of execute true: mean {statistics.mean(times):.2f} ms, "
          f"median {statistics.median(times):.2f} ms, p90 {p90:.2f} ms, max {times[-1]:.2f} ms")


if __name__ == "__main__":
    main()
