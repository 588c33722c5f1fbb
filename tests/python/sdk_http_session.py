"""Agents driven by the official MCP Python SDK's Streamable HTTP client against
`mountfs --http` (a client nobody here wrote): every tool is called, the two tokens get
separate workspaces, and the SDK's stateless MCP 2026-07-28 mode (`server/discover`, no
session) keeps read-before-edit per principal.

Usage: python3 sdk_http_session.py URL TOKEN_A TOKEN_B
The server must mount `/=memory`, `/scratch/=memory` and a disk or store mount at `/shared/`.
Prints one line per check and exits non-zero on the first failure.
"""

import asyncio
import sys
from contextlib import asynccontextmanager

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

URL, TOKEN_A, TOKEN_B = sys.argv[1], sys.argv[2], sys.argv[3]

# Every tool this script exercises; a tool the server lists that is not here is reported.
EXERCISED = {
    "ls", "read_file", "write_file", "edit_file", "multi_edit", "glob", "grep", "delete",
    "move", "file_info", "undo_edit", "apply_patch",
}


def text(result):
    return result.content[0].text


@asynccontextmanager
async def agent(token):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with streamable_http_client(URL, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


@asynccontextmanager
async def stateless_agent(token):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with streamable_http_client(URL, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                discovered = await session.discover()
                assert "2026-07-28" in discovered.supported_versions, discovered
                yield session


async def ok(session, tool, args):
    result = await session.call_tool(tool, args)
    assert not result.is_error, (tool, args, text(result))
    return result


async def main() -> None:
    async with agent(TOKEN_A) as a, agent(TOKEN_B) as b:
        tools = await a.list_tools()
        names = {t.name for t in tools.tools}
        missing = EXERCISED - names
        assert not missing, f"server does not list {missing}"
        extra = names - EXERCISED
        if extra:
            print("not exercised by this script:", ", ".join(sorted(extra)))
        print("tools/list ok:", ", ".join(sorted(names)))

        r = await ok(a, "write_file", {"file_path": "/py/hello.py", "content": "print('hi')\n"})
        assert text(r) == "Created /py/hello.py (1 line, 12 bytes).", text(r)
        r = await ok(a, "read_file", {"file_path": "/py/hello.py"})
        assert text(r) == "     1\tprint('hi')", text(r)
        await ok(a, "edit_file", {"file_path": "/py/hello.py", "old_string": "hi", "new_string": "hello"})
        r = await ok(a, "multi_edit", {"file_path": "/py/hello.py", "edits": [
            {"old_string": "print", "new_string": "say"},
            {"old_string": "hello", "new_string": "hey"},
        ]})
        assert r.structured_content["diff"].startswith("--- /py/hello.py\n+++ /py/hello.py\n"), r
        r = await ok(a, "undo_edit", {"file_path": "/py/hello.py"})
        r = await ok(a, "read_file", {"file_path": "/py/hello.py"})
        assert text(r) == "     1\tprint('hello')", text(r)
        r = await ok(a, "glob", {"pattern": "**/*.py"})
        assert "/py/hello.py" in text(r), text(r)
        r = await ok(a, "grep", {"pattern": "hello", "output_mode": "count"})
        assert text(r) == "/py/hello.py: 1", text(r)
        r = await ok(a, "file_info", {"file_path": "/py/hello.py"})
        assert "/py/hello.py" in text(r), text(r)
        r = await ok(a, "ls", {"path": "/py"})
        assert "hello.py" in text(r), text(r)
        await ok(a, "move", {"source": "/py/hello.py", "destination": "/py/moved.py"})
        await ok(a, "apply_patch", {"patch": (
            "--- a/py/moved.py\n+++ b/py/moved.py\n@@ -1 +1 @@\n-print('hello')\n+print('patched')\n"
        )})
        r = await ok(a, "read_file", {"file_path": "/py/moved.py"})
        assert text(r) == "     1\tprint('patched')", text(r)
        await ok(a, "delete", {"file_path": "/py/moved.py"})
        r = await a.call_tool("read_file", {"file_path": "/py/moved.py"})
        assert r.is_error, text(r)
        r = await a.call_tool("read_file", {"file_path": "/py/hello.py", "limit": 0})
        assert r.is_error and text(r) == "Invalid arguments for read_file: /limit must be >= 1 (got 0)", text(r)
        print("session ok: every tool over Streamable HTTP")

        # Two tokens, two workspaces: scratch files and the read ledger are per agent.
        await ok(a, "write_file", {"file_path": "/scratch/a-only.txt", "content": "mine\n"})
        r = await ok(b, "ls", {"path": "/scratch"})
        assert "a-only.txt" not in text(r), text(r)
        await ok(a, "write_file", {"file_path": "/shared/both.txt", "content": "one\ntwo\n"})
        r = await b.call_tool("edit_file", {"file_path": "/shared/both.txt", "old_string": "one", "new_string": "1"})
        assert r.is_error and text(r).startswith("Error: File has not been read yet"), text(r)
        await ok(b, "read_file", {"file_path": "/shared/both.txt"})
        await ok(b, "edit_file", {"file_path": "/shared/both.txt", "old_string": "one", "new_string": "1"})
        r = await a.call_tool("write_file", {"file_path": "/shared/both.txt", "content": "overwrite\n"})
        assert r.is_error and text(r).startswith("Error: File has been modified since it was read"), text(r)
        print("workspaces ok: separate /scratch/ and read ledgers, shared files stale-safe")

    # Stateless (2026-07-28): every call is its own request, the workspace is the principal's.
    async with stateless_agent(TOKEN_A) as a, stateless_agent(TOKEN_B) as b:
        await ok(a, "write_file", {"file_path": "/scratch/stateless.txt", "content": "one\n"})
        r = await ok(a, "edit_file", {"file_path": "/scratch/stateless.txt", "old_string": "one", "new_string": "two"})
        r = await ok(a, "read_file", {"file_path": "/scratch/stateless.txt"})
        assert text(r) == "     1\ttwo", text(r)
        r = await b.call_tool("read_file", {"file_path": "/scratch/stateless.txt"})
        assert r.is_error, text(r)
        await ok(a, "write_file", {"file_path": "/shared/stateless.txt", "content": "x\n"})
        r = await b.call_tool("edit_file", {"file_path": "/shared/stateless.txt", "old_string": "x", "new_string": "y"})
        assert r.is_error and text(r).startswith("Error: File has not been read yet"), text(r)
        print("stateless ok: read-before-edit and /scratch/ per principal without a session")


asyncio.run(main())
