#!/usr/bin/env python3
"""What a model reads of each server's tools (issue 29), measured the same way for every server.

For each tool of a live server's `tools/list`: the compact JSON (UTF-8 bytes) of its name,
description and inputSchema, which is what clients hand to the model; and the whole
`tools/list` result. Servers are started over stdio and asked with the same requests.

Usage: scripts/tool-bytes.py MOUNTFS [REFERENCE]
  MOUNTFS    the mountfs binary (measured with a disk mount and the audit log on, then with
             --allow-exec and an overlay mount)
  REFERENCE  the reference server's `mcp-server-filesystem` (scripts/bench-peers installs it
             under bench-peers/node/node_modules/.bin/)
"""

import json
import subprocess
import sys
import tempfile


def tools_list(argv):
    server = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)

    def send(message):
        server.stdin.write(json.dumps(message) + "\n")
        server.stdin.flush()

    def answer(wanted):
        while True:
            line = server.stdout.readline()
            if not line:
                raise SystemExit(f"{argv[0]} closed its output")
            message = json.loads(line)
            if message.get("id") == wanted:
                return message["result"]

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
          "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                     "clientInfo": {"name": "tool-bytes", "version": "1"}}})
    answer(1)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
    result = answer(2)
    server.kill()
    return result


def compact(value):
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def report(label, result, only=None):
    tools = [t for t in result["tools"] if only is None or t["name"] in only]
    sizes = [(t["name"], compact({"name": t["name"], "description": t.get("description"),
                                  "inputSchema": t["inputSchema"]})) for t in tools]
    total = sum(size for _, size in sizes)
    largest = max(sizes, key=lambda s: s[1])
    print(f"{label}: {len(tools)} tools, model-visible {total:,} bytes "
          f"({total // max(len(tools), 1):,} per tool, largest {largest[0]} {largest[1]:,}); "
          f"whole tools/list {compact(result):,} bytes")
    for name, size in sizes:
        print(f"    {name:14} {size:6,}")


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    with tempfile.TemporaryDirectory() as root:
        mountfs = sys.argv[1]
        default = tools_list([mountfs, "--mount", f"/=disk:{root}", "--mount", "/scratch/=memory",
                              "--audit", f"sqlite:{root}/audit.db"])
        report("mountfs (disk mount, /scratch/, audit log)", default)
        added = tools_list([mountfs, "--mount", f"/=disk:{root},overlay", "--allow-exec"])
        report("mountfs, tools added by --allow-exec and an overlay mount", added,
               only={"execute", "changes", "commit", "discard"})
        if len(sys.argv) > 2:
            report("reference filesystem server", tools_list([sys.argv[2], root]))


if __name__ == "__main__":
    main()
