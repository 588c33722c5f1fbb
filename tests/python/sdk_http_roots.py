"""MCP roots over Streamable HTTP with the official MCP Python SDK (issue 12): each MCP session
mounts its own client's roots.

Usage: python3 sdk_http_roots.py URL TOKEN ALPHA_DIR BETA_DIR GAMMA_DIR
The server runs `--http` with no --mount (the default table). Agent one offers ALPHA and BETA
(mounted at /alpha/ and /beta/), agent two offers GAMMA alone (mounted at /). Then agent one's
roots change to BETA alone (notifications/roots/list_changed): its / is BETA, agent two's is
still GAMMA.
"""

import asyncio
import pathlib
import sys
import warnings
from contextlib import asynccontextmanager

import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

warnings.simplefilter("ignore")  # the SDK marks roots deprecated (2026-07-28); clients still send them

URL, TOKEN = sys.argv[1], sys.argv[2]
ALPHA, BETA, GAMMA = (pathlib.Path(p) for p in sys.argv[3:6])


def text(result):
    return result.content[0].text


@asynccontextmanager
async def agent(offered):
    async def list_roots(context) -> types.ListRootsResult:
        return types.ListRootsResult(roots=list(offered))

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    async with http:
        async with streamable_http_client(URL, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1], list_roots_callback=list_roots) as session:
                await session.initialize()
                yield session


async def main() -> None:
    one_roots = [types.Root(uri=ALPHA.as_uri(), name="alpha"), types.Root(uri=BETA.as_uri(), name="beta")]
    two_roots = [types.Root(uri=GAMMA.as_uri(), name="gamma")]
    async with agent(one_roots) as one, agent(two_roots) as two:
        r = await one.call_tool("ls", {"path": "/"})
        lines = text(r).splitlines()
        assert "/alpha/" in lines and "/beta/" in lines, lines
        r = await one.call_tool("read_file", {"file_path": "/alpha/a.txt"})
        assert not r.is_error and "from alpha" in text(r), r
        r = await two.call_tool("read_file", {"file_path": "/g.txt"})
        assert not r.is_error and "from gamma" in text(r), r
        r = await two.call_tool("ls", {"path": "/"})
        assert "/alpha/" not in text(r), r
        print("two sessions, their own roots")

        one_roots[:] = [types.Root(uri=BETA.as_uri(), name="beta")]
        await one.send_roots_list_changed()
        for _ in range(100):
            r = await one.call_tool("ls", {"path": "/"})
            if "/b.txt (10 bytes)" in text(r).splitlines():
                break
            await asyncio.sleep(0.05)
        assert "/b.txt (10 bytes)" in text(r).splitlines(), r
        r = await two.call_tool("read_file", {"file_path": "/g.txt"})
        assert not r.is_error and "from gamma" in text(r), r
        print("list_changed: one session remounted")
    print("http roots ok")


asyncio.run(main())
