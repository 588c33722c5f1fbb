"""A full agent session driven by the official MCP Python SDK (a client nobody here wrote).

Usage: python3 sdk_session.py /path/to/mountfs [mount args...]
Prints one line per check and exits non-zero on the first failure.
"""

import asyncio
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(result):
    return result.content[0].text


async def main() -> None:
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:], env={"RUST_LOG": "warn"})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.server_info.name == "mountfs", init

            tools = await session.list_tools()
            names = sorted(t.name for t in tools.tools)
            for expected in ["edit_file", "glob", "grep", "ls", "multi_edit", "read_file", "write_file"]:
                assert expected in names, names
            read_file = next(t for t in tools.tools if t.name == "read_file")
            assert read_file.annotations.read_only_hint is True, read_file.annotations
            # Every tool declares an output schema; call_tool then validates each successful
            # answer's structuredContent against it on the client side (and raises if absent).
            for tool in tools.tools:
                assert tool.output_schema and tool.output_schema["type"] == "object", tool
            print("tools/list ok:", ", ".join(names))

            r = await session.call_tool("write_file", {"file_path": "/py/hello.py", "content": "print('hi')\n"})
            assert not r.is_error and text(r) == "Created /py/hello.py (1 line, 12 bytes).", r

            r = await session.call_tool("edit_file", {"file_path": "/py/hello.py", "old_string": "hi", "new_string": "hello"})
            assert not r.is_error, r

            r = await session.call_tool("read_file", {"file_path": "/py/hello.py"})
            assert text(r) == "     1\tprint('hello')", r
            assert r.structured_content["kind"] == "text" and r.structured_content["text"] == "print('hello')", r

            r = await session.call_tool("ls", {"path": "/py"})
            assert [e[:3] for e in r.structured_content["entries"]] == [["hello.py", "file", 15]], r

            r = await session.call_tool("grep", {"pattern": "hello", "output_mode": "count"})
            assert text(r) == "/py/hello.py: 1", r
            assert r.structured_content["counts"] == {"/py/hello.py": 1}, r

            r = await session.call_tool("grep", {"pattern": "hello", "output_mode": "content"})
            assert text(r) == "/py/hello.py:\n  1: print('hello')", r
            assert r.structured_content["lines"] == {"/py/hello.py": [[1, "print('hello')", True]]}, r

            r = await session.call_tool("read_file", {"file_path": "/py/hello.py", "limit": 0})
            assert r.is_error and text(r) == "Invalid arguments for read_file: /limit must be >= 1 (got 0)", r

            r = await session.call_tool("edit_file", {"file_path": "/py/hello.py", "old_string": "absent", "new_string": "x"})
            assert r.is_error and text(r).startswith("Error: String not found in file: 'absent'."), r
            assert r.structured_content == {"error": {"kind": "edit_refused", "message": text(r)}}, r

            r = await session.call_tool("edit_file", {"file_path": "/py/hello.py", "old_string": "hello", "new_string": "bye"})
            assert not r.is_error and r.structured_content["diff"].startswith("--- /py/hello.py\n+++ /py/hello.py\n"), r
            print("session ok: write, edit, read, grep, errors, structured answers within their output schemas")


asyncio.run(main())
