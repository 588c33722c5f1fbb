"""Files as resources, seen by the official MCP Python SDK (issue 13).

Usage: python3 sdk_resources.py /path/to/mountfs [mount args...]
The mount holds dir00..dir49 with file000..file099.txt each and pixel.png: the SDK pages
through all 5,001 files with cursors, reads a text file and the PNG blob, and finds the template.
"""

import asyncio
import base64
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import PaginatedRequestParams


async def main() -> None:
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:], env={"RUST_LOG": "warn"})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.capabilities.resources is not None, init.capabilities

            uris, pages, cursor = [], 0, None
            while True:
                if cursor is None:
                    page = await session.list_resources()
                else:
                    page = await session.list_resources(params=PaginatedRequestParams(cursor=cursor))
                pages += 1
                uris.extend(str(r.uri) for r in page.resources)
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert len(uris) == len(set(uris)) == 5001, len(uris)
            assert uris == sorted(uris), "path order"

            text = await session.read_resource("mountfs:///dir07/file042.txt")
            assert text.contents[0].text == "7/42\n", text

            blob = await session.read_resource("mountfs:///pixel.png")
            assert blob.contents[0].mime_type == "image/png", blob
            assert base64.b64decode(blob.contents[0].blob).startswith(b"\x89PNG"), blob

            templates = await session.list_resource_templates()
            assert templates.resource_templates[0].uri_template == "mountfs:///{+path}", templates
            print(f"resources ok: {len(uris)} files in {pages} pages")


asyncio.run(main())
