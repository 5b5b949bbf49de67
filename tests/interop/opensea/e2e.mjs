// End-to-end run of the real @opensea/sdk against the walletgate data API on
// loopback. Inputs come from the environment (never printed):
//   DATA_API_URL      http://127.0.0.1:<port>
//   DATA_API_KEY      the API key (the SDK's auth calls carry it through `fetch`)
//   WALLET_KEY        a public Hardhat/Anvil development private key
//   ACCESS_LOG        the server's access log file, checked for secrets at the end
// Prints one line per step and exits non-zero on the first failure.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import assert from "node:assert/strict";

const require = createRequire(import.meta.url);
const { OpenSeaAuth } = require("@opensea/sdk");
const { Wallet } = require("ethers");

const base = process.env.DATA_API_URL;
const apiKey = process.env.DATA_API_KEY;
const signer = new Wallet(process.env.WALLET_KEY);
const secrets = [];

// The SDK's auth calls send no X-API-KEY; its `fetch` option is the seam.
const keyedFetch = (input, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set("X-API-KEY", apiKey);
  return fetch(input, { ...init, headers });
};

// Capture every Set-Cookie value and the signature the SDK produces, so the
// log check below knows all of them.
const observingFetch = async (input, init = {}) => {
  if (typeof init.body === "string" && init.body.includes("signature")) {
    secrets.push(JSON.parse(init.body).signature);
  }
  const response = await keyedFetch(input, init);
  for (const cookie of response.headers.getSetCookie()) {
    const value = cookie.split(";")[0].split("=")[1];
    if (value) secrets.push(value);
  }
  return response;
};

const step = (name) => console.log(`ok - ${name}`);

async function favorites(jwt) {
  return keyedFetch(`${base}/api/v2/account/${signer.address}/favorites?limit=1`, {
    headers: { Authorization: `Bearer ${jwt}` },
  });
}

const auth = new OpenSeaAuth({ apiBaseUrl: base, fetch: observingFetch });
const token = await auth.authenticate(signer, { scopes: ["read:favorites"] });
secrets.push(token.accessToken, token.refreshToken);
assert.deepEqual(token.scopes, ["read:favorites"]);
step("authenticate with scopes: SIWE, session cookies, PAT, JWT");

const page = await favorites(token.accessToken);
assert.equal(page.status, 200);
const body = await page.json();
assert.equal(body.nfts.length, 1);
step("wallet-scoped call with the JWT");

// The server mints short-lived JWTs, inside the SDK's 60 s refresh window,
// so getValidToken must exchange the PAT again.
const refreshed = await auth.getValidToken();
secrets.push(refreshed.accessToken);
assert.notEqual(refreshed.accessToken, token.accessToken);
assert.equal((await favorites(refreshed.accessToken)).status, 200);
step("getValidToken re-mints the JWT from the PAT");

await auth.revoke(refreshed.accessToken);
step("revoke (session refresh, then DELETE of the PAT)");

const refused = await keyedFetch(`${base}/api/v2/auth/tokens/exchange`, {
  method: "POST",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ subjectToken: token.refreshToken, subjectTokenType: "ACCESS_TOKEN" }),
});
assert.equal(refused.status, 401);
const refusal = await refused.text();
step("exchange after revoke is refused");

const log = readFileSync(process.env.ACCESS_LOG, "utf8");
const lines = log.split("\n").filter(Boolean);
assert.ok(lines.length >= 8, `only ${lines.length} access log lines`);
for (const secret of secrets) {
  assert.ok(secret && secret.length >= 16, "every captured secret is non-trivial");
  assert.ok(!log.includes(secret), "a secret appears in the access log");
  assert.ok(!refusal.includes(secret), "a secret appears in an error body");
}
step(`no PAT, JWT, cookie or signature in ${lines.length} log lines or the error body (${secrets.length} secrets checked)`);
