#!/usr/bin/env python3
"""grep through the official MCP Python SDK against `rg`, in one run (issue 45).

The peers bench (`benches/peers`) times every server through its own lean Rust client. A
program that uses mountfs most likely goes through an SDK instead, which parses every answer
into typed objects and checks `structuredContent` against the tool's output schema: that cost
is the client's, but it is paid per answer, so it is what "grep through the SDK against rg"
means. This script runs, alternating within each round, for every search:

  - sdk:  `ClientSession.call_tool` of the official `mcp` package over stdio (validation on),
  - lean: the same server binary, one JSON-RPC line written and one read and `json.loads`ed,
  - rg:   one `rg` process with the peers bench's arguments (our ignore semantics), stdout read,

and, per answer, how long checking its `structuredContent` against the served output schema
takes (`jsonschema`, the validator compiled once, as the SDK does), and prints the medians (wall time, request written -> answer parsed; process start -> exit for
`rg`), their ratios to `rg`, and the answer's sizes. Both servers stay up for the whole run.

    python3 scripts/sdk-grep.py MOUNTFS RG WORKSPACE [--rounds N] [--calls N]

WORKSPACE is the peers bench's generated tree (`cargo bench --bench peers -- --generate-only`,
or `target/<profile>/deps/peers-* --bench --generate-only --workspace DIR`).
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

NEEDLE = "deprecated_api_call"
NEEDLE_REGEX = r"legacy::\s*deprecated_\w+\("
TREES = [("small", "2,000 files"), ("crates", "crate-shaped"), ("", "whole tree")]


def cases():
    for tree, label in TREES:
        yield (f"grep files, literal, {label}", tree,
               {"pattern": NEEDLE, "literal": True},
               ["-l", "-F", NEEDLE])
        yield (f"grep content, literal, {label}", tree,
               {"pattern": NEEDLE, "literal": True, "output_mode": "content"},
               ["-n", "-F", NEEDLE])
        yield (f"grep content, regex, {label}", tree,
               {"pattern": NEEDLE_REGEX, "output_mode": "content"},
               ["-n", NEEDLE_REGEX])


class Lean:
    """A client that does what every client must: write the request, read and parse the answer."""

    def __init__(self, program, workspace):
        self.proc = subprocess.Popen([program, "--mount", f"/=disk:{workspace}"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env={**os.environ, "RUST_LOG": "warn"})
        self.next_id = 1
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "sdk-grep-lean", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method, params):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            answer = json.loads(self.proc.stdout.readline())
            if answer.get("id") == self.next_id:
                return answer

    def call(self, args):
        result = self.request("tools/call", {"name": "grep", "arguments": args})["result"]
        assert not result.get("isError"), result
        return result


def rg_run(rg, flags, directory):
    args = [rg, "--hidden", "--no-require-git", "--no-ignore-parent", *flags, directory]
    start = time.perf_counter()
    out = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout
    elapsed = time.perf_counter() - start
    return elapsed, out


def load():
    return open("/proc/loadavg").read().split()[0]


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mountfs")
    parser.add_argument("rg")
    parser.add_argument("workspace")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=3, help="calls per case per client per round")
    options = parser.parse_args()
    workspace = os.path.abspath(options.workspace)
    all_cases = list(cases())
    times = {(name, who): [] for name, *_ in all_cases for who in ("sdk", "lean", "rg")}
    sizes = {}
    loads = [load()]

    params = StdioServerParameters(command=options.mountfs, args=["--mount", f"/=disk:{workspace}"],
                                   env={"RUST_LOG": "warn"})
    lean = Lean(options.mountfs, workspace)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            # What a program does first, and what arms the SDK's output-schema validation.
            tools = await session.list_tools()
            grep_schema = next(t for t in tools.tools if t.name == "grep").output_schema
            assert grep_schema
            from jsonschema.validators import validator_for
            validator = validator_for(grep_schema)(grep_schema)
            checks = {}

            async def sdk_call(args):
                result = await session.call_tool("grep", args)
                assert not result.is_error, result
                return result

            # Warm-up: every case once through each client, page cache and rg included.
            for name, tree, args, flags in all_cases:
                args = {**args, "path": f"/{tree}"}
                await sdk_call(args)
                answer = lean.call(args)
                _, out = rg_run(options.rg, flags, os.path.join(workspace, tree))
                text = sum(len(c["text"].encode()) for c in answer["content"] if c["type"] == "text")
                structured = len(json.dumps(answer["structuredContent"], separators=(",", ":")).encode())
                sizes[name] = (text, structured, len(out))
                spent = []
                for _ in range(9):
                    start = time.perf_counter()
                    errors = list(validator.iter_errors(answer["structuredContent"]))
                    spent.append((time.perf_counter() - start) * 1000)
                    assert not errors, errors[0]
                checks[name] = statistics.median(spent)

            for round_ in range(options.rounds):
                for name, tree, args, flags in all_cases:
                    args = {**args, "path": f"/{tree}"}
                    order = ["sdk", "lean", "rg"]
                    shift = round_ % 3
                    for who in order[shift:] + order[:shift]:
                        for _ in range(options.calls):
                            if who == "sdk":
                                start = time.perf_counter()
                                await sdk_call(args)
                                elapsed = time.perf_counter() - start
                            elif who == "lean":
                                start = time.perf_counter()
                                lean.call(args)
                                elapsed = time.perf_counter() - start
                            else:
                                elapsed, _ = rg_run(options.rg, flags, os.path.join(workspace, tree))
                            times[(name, who)].append(elapsed * 1000)
                loads.append(load())
    lean.proc.stdin.close()
    lean.proc.wait()

    rg_version = subprocess.run([options.rg, "--version"], stdout=subprocess.PIPE, text=True).stdout.split("\n")[0]
    import importlib.metadata
    print(f"mcp (Python SDK) {importlib.metadata.version('mcp')}, {rg_version}, "
          f"{options.rounds} rounds x {options.calls} calls, load average (1 min) per round: {' '.join(loads)}")
    print()
    print("| search | sdk ms | lean ms | rg ms | sdk/rg | lean/rg | schema check ms | text B | structured B | structured/text |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, *_ in all_cases:
        sdk, lean_ms, rg = (statistics.median(times[(name, who)]) for who in ("sdk", "lean", "rg"))
        text, structured, _ = sizes[name]
        print(f"| {name} | {sdk:.1f} | {lean_ms:.1f} | {rg:.1f} | {sdk / rg:.2f}× | {lean_ms / rg:.2f}× "
              f"| {checks[name]:.2f} | {text:,} | {structured:,} | {structured / max(text, 1):.2f}× |")


if __name__ == "__main__":
    asyncio.run(main())
