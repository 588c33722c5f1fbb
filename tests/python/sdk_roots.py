"""MCP roots with the official MCP Python SDK as the client (issue 12).

Usage: python3 sdk_roots.py /path/to/mountfs ALPHA_DIR BETA_DIR
The server runs with no --mount (the default table; the caller sets XDG_DATA_HOME, HOME and the
working directory). The SDK offers both directories as roots through list_roots_callback: both
are mounted, at /alpha/ and /beta/, and watched: a subscriber to /alpha/a.txt hears of another
program's write to ALPHA_DIR/a.txt. Then the roots change to BETA_DIR alone and the SDK sends
notifications/roots/list_changed: BETA_DIR is mounted at /.
"""

import asyncio
import os
import pathlib
import sys
import warnings

import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

warnings.simplefilter("ignore")  # the SDK marks roots deprecated (2026-07-28); clients still send them


def text(result):
    return result.content[0].text


async def main() -> None:
    server, alpha, beta = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    offered = [
        types.Root(uri=alpha.as_uri(), name="alpha"),
        types.Root(uri=beta.as_uri(), name="beta"),
    ]
    asked = []
    updates = []
    arrived = asyncio.Event()

    async def on_message(message) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            updates.append(str(root.params.uri))
            arrived.set()

    async def list_roots(context) -> types.ListRootsResult:
        asked.append(len(offered))
        return types.ListRootsResult(roots=list(offered))

    # The caller's environment (temporary XDG_DATA_HOME and HOME) and working directory.
    env = dict(os.environ, RUST_LOG="warn")
    params = StdioServerParameters(command=server, args=[], env=env, cwd=os.getcwd())
    async with stdio_client(params) as (read, write):
        async with ClientSession(
            read, write, list_roots_callback=list_roots, message_handler=on_message
        ) as session:
            await session.initialize()

            r = await session.call_tool("ls", {"path": "/"})
            assert not r.is_error, r
            lines = text(r).splitlines()
            assert "/alpha/" in lines and "/beta/" in lines, lines
            r = await session.call_tool("read_file", {"file_path": "/alpha/a.txt"})
            assert not r.is_error and "from alpha" in text(r), r
            r = await session.call_tool("ls", {"path": "/beta"})
            assert text(r) == "/beta/b.txt (10 bytes)", r
            print("two roots mounted:", ", ".join(l for l in lines if l in ("/alpha/", "/beta/")))

            # Answered once the roots' directories are watched.
            await session.subscribe_resource("mountfs:///alpha/a.txt")
            (alpha / "a.txt").write_text("changed by another program\n")
            while "mountfs:///alpha/a.txt" not in updates:
                arrived.clear()
                await asyncio.wait_for(arrived.wait(), timeout=10)
            print("another program's write under a root: resources/updated")

            offered[:] = [types.Root(uri=beta.as_uri(), name="beta")]
            await session.send_roots_list_changed()
            # The remount runs when the server has the new list; give it the time to ask.
            for _ in range(50):
                if asked[-1] == 1:
                    break
                await asyncio.sleep(0.05)
            r = await session.call_tool("read_file", {"file_path": "/b.txt"})
            assert not r.is_error and "from beta" in text(r), r
            r = await session.call_tool("ls", {"path": "/"})
            assert "/alpha/" not in text(r), r
            print("list_changed: one root at /")
    assert asked == [2, 1], asked
    print("roots ok")


asyncio.run(main())
