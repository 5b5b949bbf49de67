// Signs in to the data API reference server the way the OpenSea SDK does
// (SIWE nonce -> signed EIP-4361 message -> session cookies -> personal access
// token -> wallet JWT) and writes the JWT to a file (mode 0600). It never
// prints the JWT, the PAT, the cookies or the signature.
//
// Environment:
//   DATA_API_URL     the server's origin (default http://127.0.0.1:8080)
//   DATA_API_KEY     the API key (required; the server prints it at start)
//   DEV_PRIVATE_KEY  the signing key (default: Hardhat/Anvil account #0, a
//                    PUBLIC development key that must never hold real funds)
//   SCOPES           space-separated (default "read:favorites read:wallets write:wallets")
//   DEV_JWT_FILE     where to write the JWT (default target/dev-jwt)

import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { privateKeyToAccount } from "viem/accounts";
import { createSiweMessage } from "viem/siwe";

// Public Hardhat/Anvil development account #0: known to everyone, never funded.
const PUBLIC_DEV_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

const origin = (process.env.DATA_API_URL || "http://127.0.0.1:8080").replace(/\/+$/, "");
const apiKey = process.env.DATA_API_KEY;
const scopes = (process.env.SCOPES || "read:favorites read:wallets write:wallets").split(/\s+/).filter(Boolean);
const outFile = process.env.DEV_JWT_FILE || "target/dev-jwt";
if (!apiKey) {
  console.error("DATA_API_KEY is required: the server prints its development key at start (or start it with DATA_API_KEY set).");
  process.exit(2);
}
const account = privateKeyToAccount(process.env.DEV_PRIVATE_KEY || PUBLIC_DEV_KEY);

async function call(method, path, { body, cookie } = {}) {
  const headers = { "x-api-key": apiKey };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (cookie) headers.cookie = cookie;
  const response = await fetch(`${origin}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  const json = text ? JSON.parse(text) : null;
  if (!response.ok) {
    // Error bodies carry a message, never a credential.
    const message = json?.error?.message ?? text;
    throw new Error(`${method} ${path}: ${response.status} ${message}`);
  }
  return { json, response };
}

const { json: nonce } = await call("POST", "/api/v2/auth/siwe/nonce");

const url = new URL(origin);
const fields = {
  domain: url.host,
  address: account.address,
  statement: "Sign in to the walletgate data API.",
  uri: origin,
  version: "1",
  chainId: Number(process.env.DATA_API_SIWE_CHAIN_ID || 1),
  nonce: nonce.nonce,
  issuedAt: new Date(),
};
const signature = await account.signMessage({ message: createSiweMessage(fields) });
// The SDK sends the fields, not the text; the server rebuilds the text.
const message = { ...fields, issuedAt: fields.issuedAt.toISOString(), accountType: "Ethereum" };
const { response: verified } = await call("POST", "/api/v2/auth/siwe/verify", {
  body: { message, signature, chainArch: "EVM" },
});
const cookie = verified.headers
  .getSetCookie()
  .map((line) => line.split(";")[0])
  .join("; ");

const { json: pat } = await call("POST", "/api/v2/auth/tokens", {
  cookie,
  body: { label: `dev-jwt-${Date.now()}`, scopes, expiresInDays: 1 },
});
const { json: jwt } = await call("POST", "/api/v2/auth/tokens/exchange", {
  body: { subjectToken: pat.token, subjectTokenType: "ACCESS_TOKEN" },
});

mkdirSync(dirname(outFile), { recursive: true });
writeFileSync(outFile, jwt.accessToken, { mode: 0o600 });
chmodSync(outFile, 0o600);
console.log(
  `wallet JWT for ${account.address} (scopes: ${jwt.scope}; expires in ${jwt.expiresIn} s) written to ${outFile}`,
);
