// The official x402 v2 client (@x402/fetch + @x402/evm) pays once, then the
// official `wrapFetchWithSIWx` (@x402/extensions) signs in for the same
// request against the walletgate reference gateway, and every proof that
// must not get the answer is tried too.
//
// usage: node siwx.mjs <base url> <account index> <other account index> <model>
// Prints one JSON line: {paid, signedIn, otherRequest, otherWallet, replayed,
// foreignDomain, expired}, each {status, body}.
import { wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { createSIWxMessage, encodeSIWxHeader, wrapFetchWithSIWx } from "@x402/extensions/sign-in-with-x";
import { decodePaymentRequiredHeader } from "@x402/core/http";
import { mnemonicToAccount } from "viem/accounts";

// PUBLIC development mnemonic of Hardhat/Anvil: its keys are known to everyone
// and worthless on any real chain. Test use only.
const PUBLIC_DEV_MNEMONIC = "test test test test test test test test test test test junk";

const [base, index, otherIndex, model] = process.argv.slice(2);
if (!base || !index || !otherIndex || !model) {
  console.error("usage: node siwx.mjs <base url> <account index> <other account index> <model>");
  process.exit(2);
}
const account = mnemonicToAccount(PUBLIC_DEV_MNEMONIC, { addressIndex: Number(index) });
const other = mnemonicToAccount(PUBLIC_DEV_MNEMONIC, { addressIndex: Number(otherIndex) });

// Notes the last SIGN-IN-WITH-X sent.
let lastProof = null;
const watchingFetch = async (input, init) => {
  const request = new Request(input, init);
  lastProof = request.headers.get("SIGN-IN-WITH-X") ?? lastProof;
  return fetch(request);
};

const url = `${base}/v1/chat/completions`;
const chat = (prompt, extra = {}) => ({
  method: "POST",
  headers: { "content-type": "application/json", ...extra },
  body: JSON.stringify({ model, max_tokens: 64, messages: [{ role: "user", content: prompt }] }),
});
const seen = async (response) => ({ status: response.status, body: await response.text() });

const client = new x402Client();
registerExactEvmScheme(client, { signer: account });
const paid = await seen(await wrapFetchWithPayment(fetch, client)(url, chat("pay me once")));

// Signs in with the official wrapper: the paid answer again.
const signedIn = await seen(await wrapFetchWithSIWx(watchingFetch, account)(url, chat("pay me once")));
const proof = lastProof;
// A request the wallet did not pay for; another wallet.
const otherRequest = await seen(await wrapFetchWithSIWx(fetch, account)(url, chat("another question")));
const otherWallet = await seen(await wrapFetchWithSIWx(fetch, other)(url, chat("pay me once")));
// The same proof again: its nonce is spent.
const replayed = await seen(await fetch(url, chat("pay me once", { "SIGN-IN-WITH-X": proof })));

// Proofs built from a fresh challenge, changed, signed as changed.
async function tampered(edit) {
  const quote = await fetch(url, chat("pay me once"));
  const required = decodePaymentRequiredHeader(quote.headers.get("PAYMENT-REQUIRED"));
  const extension = required.extensions["sign-in-with-x"];
  const info = { ...extension.info, chainId: extension.supportedChains[0].chainId, type: "eip191" };
  edit(info);
  const message = createSIWxMessage(info, account.address);
  const signature = await account.signMessage({ message });
  const header = encodeSIWxHeader({ ...info, address: account.address, signature });
  return seen(await fetch(url, chat("pay me once", { "SIGN-IN-WITH-X": header })));
}
const foreignDomain = await tampered((info) => {
  info.domain = "evil.example";
});
const expired = await tampered((info) => {
  const now = Date.now();
  info.issuedAt = new Date(now - 10 * 60 * 1000).toISOString();
  info.expirationTime = new Date(now - 5 * 60 * 1000).toISOString();
});

console.log(JSON.stringify({ paid, signedIn, otherRequest, otherWallet, replayed, foreignDomain, expired }));
