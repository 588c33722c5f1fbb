"""execute's progress notifications, seen by the official MCP Python SDK (issue 11).

Usage: python3 sdk_progress.py /path/to/mountfs [mount args...]  (the server needs --allow-exec)
PROGRESS_CWD, when set, is the calls' cwd (a shell mount's directory, issue 27).
A call with a progress callback (the SDK then sends a progress token) gets notifications/progress
with a growing line count and the last line; a call without one gets none.
"""

import asyncio
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

COMMAND = "for i in 1 2 3 4 5 6; do echo line $i; sleep 0.3; done"
ARGS = {"command": COMMAND}
if os.environ.get("PROGRESS_CWD"):
    ARGS["cwd"] = os.environ["PROGRESS_CWD"]


async def main() -> None:
    seen = []

    async def on_message(message) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/progress":
            seen.append(root)

    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:], env={"RUST_LOG": "warn"})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()

            updates = []

            async def on_progress(progress, total, message) -> None:
                updates.append((progress, message))

            r = await session.call_tool("execute", ARGS, progress_callback=on_progress)
            assert not r.is_error, r
            assert len(updates) >= 2, updates
            counts = [p for p, _ in updates]
            assert counts == sorted(counts) and len(set(counts)) == len(counts), counts
            assert all(m.startswith(f"{int(p)} lines of output; last: line ") for p, m in updates), updates
            assert len(updates) <= 6 * 1.8 / 0.25 + 2, updates
            print(f"with a token: {len(updates)} progress notifications, last {updates[-1][1]!r}")

            seen.clear()
            r = await session.call_tool("execute", ARGS)
            assert not r.is_error, r
            await asyncio.sleep(0.3)
            assert seen == [], seen
            print("without a token: none")
    print("progress ok")


asyncio.run(main())
