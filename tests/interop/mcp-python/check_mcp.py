"""Drives the data API's /mcp with the official MCP Python client (mcp 2.3).

Run by examples/data_api/tests/mcp.rs, which starts the server on loopback and
passes, in the environment (never printed):
  MCP_URL       the endpoint, http://127.0.0.1:<port>/mcp
  MCP_API_KEY   the development API key
  MCP_JWT       a wallet JWT granting read:favorites and read:wallets only
  MCP_WALLET    that JWT's wallet (checksummed)
  MCP_MODE      "auto" (probe server/discover, 2026-07-28) or "legacy" (initialize + session)
After the first checks it prints `expire-now`, the harness moves its clock past
the JWT's expiry and writes a fresh JWT on stdin.
Exit status 0 and `all checks passed` on the last line mean success.
"""

import asyncio
import os
import sys

import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

URL = os.environ["MCP_URL"]
API_KEY = os.environ["MCP_API_KEY"]
WALLET = os.environ["MCP_WALLET"]
MODE = os.environ.get("MCP_MODE", "auto")
COUNTERPARTY = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"  # public Hardhat dev account #2


def check(condition, what):
    if not condition:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def client(headers):
    # mcp 2.x takes headers on the httpx2 client, not on the transport.
    http = httpx2.AsyncClient(headers=headers, timeout=10)
    return http, Client(streamable_http_client(URL, http_client=http), mode=MODE)


def text_of(result):
    return " ".join(block.text for block in result.content if getattr(block, "text", None))


def mcp_error_in(error):
    """The MCPError itself, or the first one inside anyio's exception groups."""
    if isinstance(error, MCPError):
        return error
    for inner in getattr(error, "exceptions", ()):
        if (found := mcp_error_in(inner)) is not None:
            return found
    return None


async def expect_refused(headers, code, words, what):
    http, mcp = client(headers)
    try:
        async with http, mcp as session:
            await session.list_tools()
    except Exception as raised:  # noqa: BLE001 - the handshake fails inside a task group
        error = mcp_error_in(raised)
        check(error is not None, f"{what}: expected MCPError, got {type(raised).__name__}: {raised}")
        message = error.error.message
        check(error.error.code == code and words in message, f"{what}: {error.error.code} {message}")
        return
    check(False, f"{what}: the server accepted it")


async def main():
    jwt = os.environ["MCP_JWT"]
    headers = {"X-API-KEY": API_KEY, "Authorization": f"Bearer {jwt}"}

    await expect_refused({}, -32001, "X-API-KEY", "no API key: JSON-RPC error")
    await expect_refused({"X-API-KEY": "not-a-valid-key-0000"}, -32001, "API key", "bad API key: JSON-RPC error")

    http, mcp = client(headers)
    async with http, mcp as session:
        tools = {tool.name for tool in (await session.list_tools()).tools}
        expected = {
            "get_agent_relationships", "list_collections", "whoami", "get_favorites",
            "get_own_agent_relationships", "declare_agent", "undeclare_agent",
            "propose_agent_relationship", "confirm_agent_relationship", "remove_agent_relationship",
        }
        check(expected <= tools, f"tools/list names the tools ({MODE})")
        check(session.server_info.name == "walletgate-data-api",
              f"connected: protocol {session.protocol_version}, server {session.server_info.name}")

        collections = await session.call_tool("list_collections", {})
        names = [c["collection"] for c in collections.structured_content["collections"]]
        check(not collections.is_error and len(names) == 3, f"public tool list_collections: {names}")

        public = await session.call_tool("get_agent_relationships", {"address": WALLET})
        check(not public.is_error and public.structured_content == {"relationships": []},
              "public tool get_agent_relationships")

        whoami = await session.call_tool("whoami", {})
        check(whoami.structured_content["wallet"] == WALLET, "whoami: the wallet is the JWT's")

        page = await session.call_tool("get_favorites", {"limit": 2, "wallet": COUNTERPARTY})
        nfts = page.structured_content["nfts"]
        check(not page.is_error and len(nfts) == 2 and "next" in page.structured_content,
              "wallet tool get_favorites (a wallet argument is ignored)")
        after = await session.call_tool("get_favorites", {"limit": 2, "after": page.structured_content["next"]})
        check(after.structured_content["nfts"][0]["identifier"] != nfts[0]["identifier"], "favorites cursor")

        bad_limit = await session.call_tool("get_favorites", {"limit": 500})
        check(bad_limit.is_error and "limit" in text_of(bad_limit), "limit out of range: tool error")

        own = await session.call_tool("get_own_agent_relationships", {})
        check(not own.is_error, "wallet tool get_own_agent_relationships")

        declare = await session.call_tool("declare_agent", {})
        check(declare.is_error and "write:wallets" in text_of(declare),
              f"missing scope: tool error naming it ({text_of(declare)})")

        print("expire-now", flush=True)
        fresh = sys.stdin.readline().strip()
        check(fresh != "", "harness sent a fresh JWT")

        try:
            await session.call_tool("get_favorites", {"limit": 1})
            check(False, "a call with the expired JWT was refused")
        except MCPError as error:
            check(error.error.code == -32001 and "expired" in error.error.message.lower(),
                  f"expired JWT: JSON-RPC error ({error.error.message})")

    headers["Authorization"] = f"Bearer {fresh}"
    http, mcp = client(headers)
    async with http, mcp as session:
        page = await session.call_tool("get_favorites", {"limit": 1})
        check(not page.is_error and len(page.structured_content["nfts"]) == 1,
              "reconnected with a fresh JWT: get_favorites works")

    no_jwt_headers = {"X-API-KEY": API_KEY}
    http, mcp = client(no_jwt_headers)
    async with http, mcp as session:
        result = await session.call_tool("get_favorites", {})
        check(result.is_error and "JWT" in text_of(result), "no JWT on a wallet tool: tool error")
        result = await session.call_tool("list_collections", {})
        check(not result.is_error, "no JWT on a public tool: works")

    print("all checks passed", flush=True)


asyncio.run(main())
