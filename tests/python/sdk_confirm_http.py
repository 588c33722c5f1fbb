"""`--confirm` (issue 46) over Streamable HTTP through the official MCP Python SDK: two
principals (two tokens) delete at the same moment and each person is asked only their own
question; then the same over stateless MCP 2026-07-28 requests, where the question comes back
as an input-required result that the client answers on its retry.

Usage: python3 sdk_confirm_http.py URL TOKEN_A TOKEN_B DIR
The server must mount DIR (a disk directory holding a.txt to f.txt) at /shared/
and run with --confirm delete. Prints one line per check and exits non-zero on the first
failure.
"""

import asyncio
import os
import sys
from contextlib import asynccontextmanager

import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

URL, TOKEN_A, TOKEN_B, DIR = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]


def text(result):
    return result.content[0].text


class Person:
    """Answers yes or no, keeping every question; waits for the other person's question to be
    asked too, so both questions are open at the same moment."""

    def __init__(self, yes, both_asked):
        self.yes = yes
        self.asked = []
        self.both_asked = both_asked

    async def __call__(self, context, params):
        self.asked.append(params.message)
        await self.both_asked()
        if self.yes:
            return types.ElicitResult(action="accept", content={"confirm": True})
        return types.ElicitResult(action="decline")


def barrier(count):
    arrived = []
    done = asyncio.Event()

    async def wait():
        arrived.append(1)
        if len(arrived) >= count:
            done.set()
        await asyncio.wait_for(done.wait(), 10)

    return wait


@asynccontextmanager
async def agent(token, person, stateless=False):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with streamable_http_client(URL, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1], elicitation_callback=person) as session:
                if stateless:
                    discovered = await session.discover()
                    assert "2026-07-28" in discovered.supported_versions, discovered
                else:
                    await session.initialize()
                yield session


def exists(name):
    return os.path.exists(os.path.join(DIR, name))


async def delete_answering(session, person, path):
    """A stateless call: the input-required result's question goes to `person`, and the call
    is retried with the answer and the request state."""
    r = await session.call_tool("delete", {"file_path": path}, allow_input_required=True)
    assert isinstance(r, types.InputRequiredResult), r
    request = r.input_requests["confirm"]
    assert request.method == "elicitation/create", request
    answer = await person(None, request.params)
    return await session.call_tool(
        "delete",
        {"file_path": path},
        input_responses={"confirm": answer},
        request_state=r.request_state,
        allow_input_required=True,
    ), r.request_state


async def main() -> None:
    both = barrier(2)
    alice, bob = Person(True, both), Person(False, both)
    async with agent(TOKEN_A, alice) as a, agent(TOKEN_B, bob) as b:
        ra, rb = await asyncio.gather(
            a.call_tool("delete", {"file_path": "/shared/a.txt"}),
            b.call_tool("delete", {"file_path": "/shared/b.txt"}),
        )
        assert not ra.is_error, text(ra)
        assert rb.is_error and rb.structured_content["error"]["kind"] == "declined", text(rb)
        assert alice.asked == ["Delete the file /shared/a.txt (2 bytes)?"], alice.asked
        assert bob.asked == ["Delete the file /shared/b.txt (2 bytes)?"], bob.asked
        assert not exists("a.txt") and exists("b.txt")
        print("sessions ok: each principal was asked only its own question")

    no_wait = barrier(1)
    alice, bob = Person(True, no_wait), Person(False, no_wait)
    async with agent(TOKEN_A, alice, stateless=True) as a, agent(TOKEN_B, bob, stateless=True) as b:
        rb, _ = await delete_answering(b, bob, "/shared/d.txt")
        assert isinstance(rb, types.CallToolResult) and rb.is_error, rb
        assert rb.structured_content["error"]["kind"] == "declined", text(rb)
        assert exists("d.txt")
        assert bob.asked == ["Delete the file /shared/d.txt (2 bytes)?"], bob.asked

        # An answer without the state the server issued for this question is no answer: asked again.
        forged = types.ElicitResult(action="accept", content={"confirm": True})
        r = await a.call_tool(
            "delete",
            {"file_path": "/shared/c.txt"},
            input_responses={"confirm": forged},
            request_state="0.forged",
            allow_input_required=True,
        )
        assert isinstance(r, types.InputRequiredResult), r
        assert exists("c.txt")
        # Bob's state does not answer Alice's question either.
        _, bob_state = await delete_answering(b, bob, "/shared/c.txt")
        r = await a.call_tool(
            "delete",
            {"file_path": "/shared/c.txt"},
            input_responses={"confirm": forged},
            request_state=bob_state,
            allow_input_required=True,
        )
        assert isinstance(r, types.InputRequiredResult), r
        assert exists("c.txt")

        ra, _ = await delete_answering(a, alice, "/shared/c.txt")
        assert isinstance(ra, types.CallToolResult) and not ra.is_error, ra
        assert alice.asked == ["Delete the file /shared/c.txt (2 bytes)?"], alice.asked
        assert not exists("c.txt")
        print("stateless ok: input-required, answered on the retry, bound to its principal and question")

        # One acceptance confirms exactly one call (attack review of issue 41). The answered
        # retry, replayed once the file is back (the very same question), is asked anew.
        ra, state = await delete_answering(a, alice, "/shared/e.txt")
        assert isinstance(ra, types.CallToolResult) and not ra.is_error, ra
        assert not exists("e.txt")
        with open(os.path.join(DIR, "e.txt"), "w") as f:
            f.write("x\n")
        yes = types.ElicitResult(action="accept", content={"confirm": True})
        r = await a.call_tool(
            "delete",
            {"file_path": "/shared/e.txt"},
            input_responses={"confirm": yes},
            request_state=state,
            allow_input_required=True,
        )
        assert isinstance(r, types.InputRequiredResult), r
        assert exists("e.txt")
        # A state issued for one call answers no call with other arguments, even when they ask
        # the very same question (`recursive` changes nothing for a file).
        r = await a.call_tool("delete", {"file_path": "/shared/f.txt"}, allow_input_required=True)
        assert isinstance(r, types.InputRequiredResult), r
        r = await a.call_tool(
            "delete",
            {"file_path": "/shared/f.txt", "recursive": True},
            input_responses={"confirm": yes},
            request_state=r.request_state,
            allow_input_required=True,
        )
        assert isinstance(r, types.InputRequiredResult), r
        assert r.input_requests["confirm"].params.message == "Delete the file /shared/f.txt (2 bytes)?", r
        assert exists("f.txt")
        print("stateless replay ok: one answer confirms one call with its own arguments")


asyncio.run(main())
