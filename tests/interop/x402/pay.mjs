// Pays one walletgate X402Layer route with the official x402 v2 client.
//
// usage: node pay.mjs <url> [account index]
// Prints one JSON line: {status, payer, settlement, body}. `settlement` is the
// PAYMENT-RESPONSE header decoded by the client's own helper (null if absent).
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { mnemonicToAccount } from "viem/accounts";

// PUBLIC development mnemonic of Hardhat/Anvil: its keys are known to everyone
// and worthless on any real chain. Test use only.
const PUBLIC_DEV_MNEMONIC = "test test test test test test test test test test test junk";

const [url, index = "0"] = process.argv.slice(2);
if (!url) {
  console.error("usage: node pay.mjs <url> [account index]");
  process.exit(2);
}

const account = mnemonicToAccount(PUBLIC_DEV_MNEMONIC, { addressIndex: Number(index) });
const client = new x402Client();
registerExactEvmScheme(client, { signer: account });
const fetchWithPayment = wrapFetchWithPayment(fetch, client);

const response = await fetchWithPayment(url, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ model: "openai/gpt-4o", messages: [{ role: "user", content: "hi" }] }),
});
const header = response.headers.get("PAYMENT-RESPONSE");
const settlement = header ? decodePaymentResponseHeader(header) : null;
const body = await response.text();
console.log(JSON.stringify({ status: response.status, payer: account.address, settlement, body }));
