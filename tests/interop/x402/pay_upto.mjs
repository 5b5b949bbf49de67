// Pays the walletgate reference gateway's metered `upto` offer with the
// official x402 v2 client (@x402/fetch + @x402/evm's UptoEvmScheme),
// selecting the upto entry as the reference describes (the default selector
// takes the first entry whose scheme the client registered).
//
// usage: node pay_upto.mjs <base url> <account index> <model> <prompt>
// Prints one JSON line: {status, payer, ceiling, settlement, answer}.
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { UptoEvmScheme } from "@x402/evm/upto/client";
import { mnemonicToAccount } from "viem/accounts";

// PUBLIC development mnemonic of Hardhat/Anvil: test use only.
const PUBLIC_DEV_MNEMONIC = "test test test test test test test test test test test junk";

const [base, index, model, prompt] = process.argv.slice(2);
if (!base || !index || !model || !prompt) {
  console.error("usage: node pay_upto.mjs <base url> <account index> <model> <prompt>");
  process.exit(2);
}

const account = mnemonicToAccount(PUBLIC_DEV_MNEMONIC, { addressIndex: Number(index) });
const client = new x402Client((_version, requirements) =>
  requirements.find((requirement) => requirement.scheme === "upto"),
).register("eip155:*", new UptoEvmScheme(account));

let ceiling = null;
const watchingFetch = async (input, init) => {
  const response = await fetch(input, init);
  const quote = response.status === 402 ? response.headers.get("PAYMENT-REQUIRED") : null;
  if (quote) {
    const accepts = JSON.parse(Buffer.from(quote, "base64").toString("utf8")).accepts;
    ceiling = accepts.find((offer) => offer.scheme === "upto")?.amount ?? null;
  }
  return response;
};
const fetchWithPayment = wrapFetchWithPayment(watchingFetch, client);

const response = await fetchWithPayment(`${base}/v1/chat/completions`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ model, max_tokens: 4000, messages: [{ role: "user", content: prompt }] }),
});
const header = response.headers.get("PAYMENT-RESPONSE");
const settlement = header ? decodePaymentResponseHeader(header) : null;
const text = await response.text();
let answer = null;
try {
  answer = JSON.parse(text).choices[0].message.content;
} catch {
  answer = text;
}
console.log(JSON.stringify({ status: response.status, payer: account.address, ceiling, settlement, answer }));
