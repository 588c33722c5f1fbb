"""The official MCP Python SDK's OAuth client against `mountfs --http --oauth-issuer` (a
client nobody here wrote): it starts with no token, and from the server's 401 it finds the
protected resource metadata, the authorization server, registers itself (RFC 7591), runs the
authorization-code flow with PKCE and the RFC 8707 resource, exchanges the code for a token and
calls tools with it.

The "browser" is headless: the redirect handler GETs the authorization URL as a browser would
(the test identity provider approves at once and redirects to the callback URL), and the
callback handler hands the SDK the code and state of that redirect.

Usage: python3 sdk_http_oauth.py URL
Prints one line per step and exits non-zero on the first failure.
"""

import asyncio
import sys
from urllib.parse import parse_qs, urlparse

import httpx2
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

URL = sys.argv[1]
CALLBACK = "http://127.0.0.1:1/callback"


class Memory:
    """Token storage for one run."""

    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


redirected = {}


async def browse(authorization_url: str) -> None:
    """What the person's browser does: open the URL, land on the callback with a code."""
    print(f"authorize: {urlparse(authorization_url).path}", flush=True)
    query = parse_qs(urlparse(authorization_url).query)
    assert query.get("resource") == [URL], f"RFC 8707 resource missing or wrong: {query.get('resource')}"
    async with httpx2.AsyncClient(follow_redirects=False) as browser:
        answer = await browser.get(authorization_url)
    assert answer.status_code in (302, 303), (answer.status_code, answer.text)
    location = answer.headers["location"]
    assert location.startswith(CALLBACK), location
    redirected.update({k: v[0] for k, v in parse_qs(urlparse(location).query).items()})


async def callback() -> AuthorizationCodeResult:
    return AuthorizationCodeResult(code=redirected["code"], state=redirected.get("state"))


async def main() -> None:
    storage = Memory()
    auth = OAuthClientProvider(
        server_url=URL,
        client_metadata=OAuthClientMetadata(
            client_name="mountfs oauth test",
            redirect_uris=[CALLBACK],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browse,
        callback_handler=callback,
    )
    http = create_mcp_http_client(auth=auth)
    async with http:
        async with streamable_http_client(URL, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                print("initialized", flush=True)
                assert storage.client is not None, "the SDK did not register a client"
                assert storage.tokens is not None, "the SDK holds no token"
                print(f"token scope: {storage.tokens.scope}", flush=True)
                wrote = await session.call_tool(
                    "write_file", {"file_path": "/oauth.txt", "content": "through OAuth\n"}
                )
                assert not wrote.is_error, wrote.content[0].text
                read = await session.call_tool("read_file", {"file_path": "/oauth.txt"})
                assert not read.is_error, read.content[0].text
                assert "through OAuth" in read.content[0].text, read.content[0].text
                print("tools: write_file, read_file ok", flush=True)
    print("done", flush=True)


asyncio.run(main())
