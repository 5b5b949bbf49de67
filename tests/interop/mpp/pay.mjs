// Pays a walletgate route with mppx 0.11's own client: the MPP `Payment`
// scheme, `evm` `charge`, an EIP-3009 `authorization` credential signed by a
// public development account.
//
// usage: node pay.mjs <url> <account index | key> <json body> [credential file]
// (`key`: the payer's private key from MPP_PAYER_KEY, never printed; with
// MPP_PAY_AT the paid request goes to that URL: another replica)
// Prints one JSON line: {status, receipt, paymentResponse, body, credential?}.
// With a credential file, the credential mppx sent is written there (for a
// replay test); it is never printed.
import { writeFileSync } from "node:fs";
import { Mppx } from "mppx/client";
import { evm } from "mppx/evm/client";
import { mnemonicToAccount, privateKeyToAccount } from "viem/accounts";

// PUBLIC development mnemonic of Hardhat/Anvil: test use only.
const PUBLIC_DEV_MNEMONIC = "test test test test test test test test test test test junk";

const [url, index, body, credentialFile] = process.argv.slice(2);
if (!url || !index || !body) {
  console.error("usage: node pay.mjs <url> <account index> <json body> [credential file]");
  process.exit(2);
}
const account =
  index === "key"
    ? privateKeyToAccount(process.env.MPP_PAYER_KEY)
    : mnemonicToAccount(PUBLIC_DEV_MNEMONIC, { addressIndex: Number(index) });

let sent = null;
const watching = async (input, init) => {
  const headers = new Headers(init?.headers);
  const credential = headers.get("authorization");
  if (credential?.startsWith("Payment ")) {
    sent = credential;
    // Replicas: the challenge came from one, the credential goes to another.
    if (process.env.MPP_PAY_AT) return fetch(process.env.MPP_PAY_AT, init);
  }
  return fetch(input, init);
};

const mppx = Mppx.create({
  // Base Sepolia USDC, as mppx ships it (its EIP-712 name and version).
  methods: [evm({ account, maxAmount: "0.1", currencies: [evm.assets.baseSepolia.USDC] })],
  fetch: watching,
  polyfill: false,
  maxPaymentRetries: Number(process.env.MPP_RETRIES ?? 1),
});
const response = await mppx.fetch(url, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body,
});
const text = await response.text();
if (credentialFile && sent) writeFileSync(credentialFile, sent);
console.log(
  JSON.stringify({
    status: response.status,
    receipt: response.headers.get("payment-receipt"),
    paymentResponse: response.headers.get("payment-response"),
    cacheControl: response.headers.get("cache-control"),
    body: text,
  }),
);
