"""Drives `walletgate mcp-bridge` over stdio with the official MCP Python client (mcp 2.3).

Run by examples/data_api/tests/cli.rs, which starts the data API on loopback,
signs in with `walletgate login` and passes, in the environment (never printed):
  BRIDGE_BIN    the walletgate binary
  BRIDGE_HOME   the HOME whose .walletgate/auth.json holds the sign-in
  BRIDGE_WALLET the signed-in wallet (checksummed)
  MCP_MODE      "auto" or "legacy"
  WALLETGATE_API_KEY, WALLETGATE_BASE_URL  passed on to the bridge
After the first checks it prints `expire-now`; the harness moves the server's
clock past the JWT's expiry and writes a line on stdin. The next call must
succeed through the bridge's refresh and reconnect.
Exit status 0 and `all checks passed` on the last line mean success.
"""

import asyncio
import os
import sys

from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

WALLET = os.environ["BRIDGE_WALLET"]
MODE = os.environ.get("MCP_MODE", "legacy")


def check(condition, what):
    if not condition:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


async def main():
    params = StdioServerParameters(
        command=os.environ["BRIDGE_BIN"],
        args=["mcp-bridge"],
        env={
            "HOME": os.environ["BRIDGE_HOME"],
            "WALLETGATE_API_KEY": os.environ["WALLETGATE_API_KEY"],
            "WALLETGATE_BASE_URL": os.environ["WALLETGATE_BASE_URL"],
        },
    )
    async with Client(stdio_client(params), mode=MODE) as session:
        tools = {tool.name for tool in (await session.list_tools()).tools}
        check({"whoami", "get_favorites", "list_collections"} <= tools, f"tools/list through the bridge ({MODE})")

        whoami = await session.call_tool("whoami", {})
        check(whoami.structured_content["wallet"] == WALLET, "whoami: the wallet of the saved sign-in")

        page = await session.call_tool("get_favorites", {"limit": 2})
        check(not page.is_error and len(page.structured_content["nfts"]) == 2, "wallet tool get_favorites")

        print("expire-now", flush=True)
        sys.stdin.readline()

        again = await session.call_tool("get_favorites", {"limit": 1})
        check(not again.is_error and len(again.structured_content["nfts"]) == 1,
              "after the JWT expired: get_favorites works (refresh and reconnect)")

    print("all checks passed", flush=True)


asyncio.run(main())
