"""Live change notifications seen by the official MCP Python SDK (issue 13).

Usage: python3 sdk_subscriptions.py URL TOKEN_A TOKEN_B DISK_DIR MOUNTFS PG_MOUNT
The HTTP server at URL mounts DISK_DIR at /shared/ (holding notes.txt) and PG_MOUNT at /pg/.
Agent A subscribes to /shared/notes.txt (a file) and /pg (a directory), then receives
notifications/resources/updated for: its own edit, an edit by another session (agent B), a write
by another program on disk, and a write by another server instance (a stdio mountfs on the same
PostgreSQL namespace).
"""

import asyncio
import sys
from contextlib import asynccontextmanager

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

URL, TOKEN_A, TOKEN_B, DISK_DIR, MOUNTFS, PG_MOUNT = sys.argv[1:7]
NOTES = "mountfs:///shared/notes.txt"


@asynccontextmanager
async def agent(token, handler=None):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with streamable_http_client(URL, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1], message_handler=handler) as session:
                await session.initialize()
                yield session


async def ok(session, tool, args):
    result = await session.call_tool(tool, args)
    assert not result.is_error, (tool, args, result.content[0].text)
    return result


async def main() -> None:
    updates = []
    arrived = asyncio.Event()

    async def on_message(message) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            updates.append(str(root.params.uri))
            arrived.set()

    async def expect(uri, what):
        deadline = asyncio.get_running_loop().time() + 10
        while uri not in updates:
            left = deadline - asyncio.get_running_loop().time()
            assert left > 0, f"no update for {uri} after {what}; got {updates}"
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), left)
            except asyncio.TimeoutError:
                pass
        updates.clear()
        print(f"updated after {what}")
        # One resource is announced at most every 250 ms: let the window pass.
        await asyncio.sleep(0.3)

    async with agent(TOKEN_A, on_message) as a, agent(TOKEN_B) as b:
        await a.subscribe_resource(NOTES)
        await a.subscribe_resource("mountfs:///pg")
        await asyncio.sleep(0.5)

        await ok(a, "read_file", {"file_path": "/shared/notes.txt"})
        await ok(a, "edit_file", {"file_path": "/shared/notes.txt", "old_string": "one", "new_string": "1"})
        await expect(NOTES, "this session's edit")

        await ok(b, "read_file", {"file_path": "/shared/notes.txt"})
        await ok(b, "edit_file", {"file_path": "/shared/notes.txt", "old_string": "two", "new_string": "2"})
        await expect(NOTES, "another session's edit")

        with open(f"{DISK_DIR}/notes.txt", "a") as f:
            f.write("four\n")
        await expect(NOTES, "another program's write on disk")

        params = StdioServerParameters(
            command=MOUNTFS, args=["--mount", "/=memory", "--mount", f"/pg/={PG_MOUNT}"],
            env={"RUST_LOG": "warn"})
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as other:
                await other.initialize()
                await ok(other, "write_file", {"file_path": "/pg/plan.md", "content": "from B\n"})
        await expect("mountfs:///pg/plan.md", "another instance's write on PostgreSQL")

        await a.unsubscribe_resource(NOTES)
    print("subscriptions ok")


asyncio.run(main())
