"""`--confirm` (issue 46) through the official MCP Python SDK's elicitation callback, over stdio.

Usage: python3 sdk_confirm.py /path/to/mountfs DIR AUDIT
DIR is an empty scratch directory (served as a disk mount; the script looks at it directly);
AUDIT a SQLite file outside it, the audit log of the execute server (the caller reads it).
Starts the server three times: asking about destructive calls and edit_file (the person
declines, cancels, accepts, leaves a question unanswered), asking about execute, and with a
client that declared no elicitation capability. Prints one line per check and exits non-zero
on the first failure.
"""

import asyncio
import os
import sys

import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

BINARY, DIR, AUDIT = sys.argv[1], sys.argv[2], sys.argv[3]


def text(result):
    return result.content[0].text


class Person:
    """Answers each question as `mode` says and keeps every question asked."""

    def __init__(self):
        self.mode = "decline"
        self.asked = []

    async def __call__(self, context, params):
        self.asked.append(params.message)
        schema = params.requested_schema
        assert schema["properties"]["confirm"]["type"] == "boolean", schema
        assert schema["required"] == ["confirm"], schema
        if self.mode == "accept":
            return types.ElicitResult(action="accept", content={"confirm": True})
        if self.mode == "accept-no":
            return types.ElicitResult(action="accept", content={"confirm": False})
        if self.mode == "cancel":
            return types.ElicitResult(action="cancel")
        if self.mode == "silent":
            await asyncio.sleep(30)
        return types.ElicitResult(action="decline")


def server(*flags, audit="off"):
    return StdioServerParameters(
        command=BINARY,
        args=["--mount", f"/=disk:{DIR}", "--audit", audit, *flags],
        env={"RUST_LOG": "warn"},
    )


def on_disk(name):
    path = os.path.join(DIR, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read()


def refused(result, kind, *words):
    assert result.is_error, text(result)
    assert result.structured_content["error"]["kind"] == kind, result.structured_content
    for word in words:
        assert word in text(result), (word, text(result))


async def destructive_and_edit_file() -> None:
    person = Person()
    flags = ["--confirm", "destructive,edit_file", "--confirm-timeout", "2"]
    async with stdio_client(server(*flags)) as (read, write):
        async with ClientSession(read, write, elicitation_callback=person) as s:
            await s.initialize()
            # Not named (creating a file is not destructive; reads never change anything).
            r = await s.call_tool("write_file", {"file_path": "/a.txt", "content": "one"})
            assert not r.is_error, text(r)
            for tool, args in [("read_file", {"file_path": "/a.txt"}), ("ls", {}), ("glob", {"pattern": "*"})]:
                r = await s.call_tool(tool, args)
                assert not r.is_error, text(r)
            assert person.asked == [], person.asked
            print("not named: never asked")

            person.mode = "decline"
            r = await s.call_tool("delete", {"file_path": "/a.txt"})
            refused(r, "declined", "delete was not run: the person declined", "Nothing was changed", "Do not retry")
            assert person.asked == ["Delete the file /a.txt (3 bytes)?"], person.asked
            assert on_disk("a.txt") == "one"
            print("declined: intact, the answer says declined, the question names the path")

            person.mode = "cancel"
            r = await s.call_tool("delete", {"file_path": "/a.txt"})
            refused(r, "declined", "the person cancelled the question")
            assert on_disk("a.txt") == "one"
            person.mode = "accept-no"
            r = await s.call_tool("write_file", {"file_path": "/a.txt", "content": "two"})
            refused(r, "declined", "the person declined")
            assert on_disk("a.txt") == "one"
            print("cancelled, or accepted with no: intact")

            person.mode = "accept"
            r = await s.call_tool("write_file", {"file_path": "/a.txt", "content": "two"})
            assert not r.is_error, text(r)
            assert person.asked[-1] == "Overwrite the existing file /a.txt (3 bytes) with new content (3 bytes)?", person.asked
            assert on_disk("a.txt") == "two"
            r = await s.call_tool("edit_file", {"file_path": "/a.txt", "old_string": "two", "new_string": "three"})
            assert not r.is_error, text(r)
            assert person.asked[-1] == "Edit the file /a.txt?", person.asked
            assert on_disk("a.txt") == "three"
            r = await s.call_tool("move", {"source": "/a.txt", "destination": "/b.txt"})
            assert not r.is_error, text(r)
            assert person.asked[-1] == "Edit the file /a.txt?", "a move to a new name is not destructive"
            asked = len(person.asked)
            print("accepted: done")

            # The file changes between the question and the answer: stale as usual.
            r = await s.call_tool("read_file", {"file_path": "/b.txt"})

            async def change_then_accept(context, params):
                person.asked.append(params.message)
                with open(os.path.join(DIR, "b.txt"), "w") as f:
                    f.write("changed meanwhile")
                return types.ElicitResult(action="accept", content={"confirm": True})

            s._elicitation_callback = change_then_accept
            r = await s.call_tool("write_file", {"file_path": "/b.txt", "content": "mine"})
            refused(r, "stale", "modified since it was read")
            assert on_disk("b.txt") == "changed meanwhile"
            s._elicitation_callback = person
            print("accepted, but the file changed meanwhile: stale")

            r = await s.call_tool("read_file", {"file_path": "/b.txt"})
            person.mode = "silent"
            r = await s.call_tool("delete", {"file_path": "/b.txt"})
            refused(r, "declined", "did not answer within 2 s (counted as declined)")
            assert on_disk("b.txt") == "changed meanwhile"
            assert len(person.asked) == asked + 2, person.asked
            print("unanswered: timed out as declined, intact")

            person.mode = "accept"
            r = await s.call_tool("delete", {"file_path": "/b.txt"})
            assert not r.is_error, text(r)
            assert on_disk("b.txt") is None
            print("accepted delete: gone")


async def execute() -> None:
    person = Person()
    flags = ["--confirm", "execute", "--allow-exec=unsandboxed"]
    async with stdio_client(server(*flags, audit=f"sqlite:{AUDIT}")) as (read, write):
        async with ClientSession(read, write, elicitation_callback=person) as s:
            await s.initialize()
            person.mode = "decline"
            r = await s.call_tool("execute", {"command": "echo no > nope.txt"})
            refused(r, "declined", "execute was not run: the person declined")
            assert person.asked == ['Run the command "echo no > nope.txt" in /?'], person.asked
            assert on_disk("nope.txt") is None
            person.mode = "accept"
            r = await s.call_tool("execute", {"command": "echo yes > made.txt\necho done"})
            assert not r.is_error, text(r)
            assert person.asked[-1] == 'Run the command "echo yes > made.txt\\necho done" in /?', person.asked
            assert on_disk("made.txt") == "yes\n"
            print("execute: the question names the command and its directory; declined: not run")


async def no_elicitation() -> None:
    with open(os.path.join(DIR, "keep.txt"), "w") as f:
        f.write("keep")
    async with stdio_client(server("--confirm", "delete")) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            r = await s.call_tool("delete", {"file_path": "/keep.txt"})
            refused(
                r,
                "confirmation_unavailable",
                "the client did not declare the MCP elicitation capability",
                "Use a client that supports MCP elicitation, or ask the operator to start the server without delete in --confirm",
            )
            assert on_disk("keep.txt") == "keep"
            # No argument an agent can set stands in for the person.
            r = await s.call_tool("delete", {"file_path": "/keep.txt", "confirm": True})
            refused(r, "invalid_arguments", "confirm")
            assert on_disk("keep.txt") == "keep"
            print("no elicitation capability: refused, intact")


async def main() -> None:
    await destructive_and_edit_file()
    await execute()
    await no_elicitation()
    print("confirm ok")


asyncio.run(main())
