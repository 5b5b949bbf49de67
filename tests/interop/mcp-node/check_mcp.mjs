// Drives the data API's /mcp with the official MCP TypeScript client
// (@modelcontextprotocol/sdk 1.32). Run by examples/data_api/tests/mcp.rs,
// which starts the server on loopback and passes, in the environment (never
// printed): MCP_URL, MCP_API_KEY, MCP_JWT (read:favorites and read:wallets
// only) and MCP_WALLET. After the first checks it prints `expire-now`; the
// harness moves its clock past the JWT's expiry and writes a fresh JWT on
// stdin. Exit status 0 and `all checks passed` on the last line mean success.

import { createInterface } from "node:readline";
import { once } from "node:events";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const URL_ = new URL(process.env.MCP_URL);
const API_KEY = process.env.MCP_API_KEY;
const WALLET = process.env.MCP_WALLET;
const COUNTERPARTY = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"; // public Hardhat dev account #2

const stdinLines = createInterface({ input: process.stdin });

function check(condition, what) {
  if (!condition) {
    console.log(`FAILED: ${what}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

async function connect(headers) {
  // requestInit.headers are merged last, so our Authorization wins.
  const transport = new StreamableHTTPClientTransport(URL_, { requestInit: { headers } });
  const client = new Client({ name: "walletgate-interop", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

const textOf = (result) => result.content.map((block) => block.text ?? "").join(" ");

async function expectRefused(headers, words, what) {
  try {
    const client = await connect(headers);
    await client.close();
  } catch (error) {
    const body = String(error.message);
    check(error.code === 401 && body.includes("-32001") && body.includes(words), `${what}: ${error.code}`);
    return;
  }
  check(false, `${what}: the server accepted it`);
}

await expectRefused({}, "X-API-KEY", "no API key: 401 with a JSON-RPC error body");
await expectRefused({ "X-API-KEY": "not-a-valid-key-0000" }, "API key", "bad API key: 401 with a JSON-RPC error body");

const headers = { "X-API-KEY": API_KEY, Authorization: `Bearer ${process.env.MCP_JWT}` };
let client = await connect(headers);
check(client.getServerVersion()?.name === "walletgate-data-api", "initialize: server info");

const { tools } = await client.listTools();
const names = new Set(tools.map((tool) => tool.name));
for (const name of ["get_agent_relationships", "list_collections", "get_favorites", "declare_agent",
  "propose_agent_relationship", "confirm_agent_relationship", "remove_agent_relationship"]) {
  check(names.has(name), `tools/list has ${name}`);
}

const collections = await client.callTool({ name: "list_collections", arguments: {} });
check(!collections.isError && collections.structuredContent.collections.length === 3, "public tool list_collections");

const publicRelations = await client.callTool({ name: "get_agent_relationships", arguments: { address: WALLET } });
check(!publicRelations.isError && Array.isArray(publicRelations.structuredContent.relationships),
  "public tool get_agent_relationships");

const whoami = await client.callTool({ name: "whoami", arguments: {} });
check(whoami.structuredContent.wallet === WALLET, "whoami: the wallet is the JWT's");

const page = await client.callTool({ name: "get_favorites", arguments: { limit: 3, wallet: COUNTERPARTY } });
check(!page.isError && page.structuredContent.nfts.length === 3, "wallet tool get_favorites (a wallet argument is ignored)");

const declare = await client.callTool({ name: "declare_agent", arguments: {} });
check(declare.isError && textOf(declare).includes("write:wallets"), `missing scope: tool error naming it (${textOf(declare)})`);

const badAddress = await client.callTool({ name: "get_agent_relationships", arguments: { address: "0x12" } });
check(badAddress.isError && textOf(badAddress).includes("address"), "bad address: tool error");

console.log("expire-now");
const [fresh] = await once(stdinLines, "line");
check(fresh.trim() !== "", "harness sent a fresh JWT");

try {
  await client.callTool({ name: "get_favorites", arguments: { limit: 1 } });
  check(false, "a call with the expired JWT was refused");
} catch (error) {
  const body = String(error.message);
  check(error.code === 401 && body.includes("-32001") && body.toLowerCase().includes("expired"),
    `expired JWT: 401 with a JSON-RPC error body`);
}
await client.close();

client = await connect({ ...headers, Authorization: `Bearer ${fresh.trim()}` });
const again = await client.callTool({ name: "get_favorites", arguments: { limit: 1 } });
check(!again.isError && again.structuredContent.nfts.length === 1, "reconnected with a fresh JWT: get_favorites works");
await client.close();

client = await connect({ "X-API-KEY": API_KEY });
const noJwt = await client.callTool({ name: "get_own_agent_relationships", arguments: {} });
check(noJwt.isError && textOf(noJwt).includes("JWT"), "no JWT on a wallet tool: tool error");
await client.close();

stdinLines.close();
console.log("all checks passed");
