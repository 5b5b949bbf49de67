// Pays the walletgate reference gateway's chat endpoint with the official
// x402 v2 client (@x402/fetch + @x402/evm), unchanged.
//
// usage: node pay_gateway.mjs <base url> <account index | env> <model> <prompt>
// `env`: the payer's key comes from PAYER_PRIVATE_KEY (a throwaway test key,
// never on the command line).
// Prints one JSON line: {status, payer, quotedAmount, settlement, answer}.
// `quotedAmount` is read from the unpaid 402 the client first receives;
// `settlement` is PAYMENT-RESPONSE decoded by the client's own helper.
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { mnemonicToAccount, privateKeyToAccount } from "viem/accounts";

// PUBLIC development mnemonic of Hardhat/Anvil: its keys are known to everyone
// and worthless on any real chain. Test use only.
const PUBLIC_DEV_MNEMONIC = "test test test test test test test test test test test junk";

const [base, index, model, prompt] = process.argv.slice(2);
if (!base || !index || !model || !prompt) {
  console.error("usage: node pay_gateway.mjs <base url> <account index | env> <model> <prompt>");
  process.exit(2);
}

const account =
  index === "env"
    ? privateKeyToAccount(process.env.PAYER_PRIVATE_KEY)
    : mnemonicToAccount(PUBLIC_DEV_MNEMONIC, { addressIndex: Number(index) });
const client = new x402Client();
registerExactEvmScheme(client, { signer: account });

// Watch the exchange without changing it: note the quoted amount of the 402.
let quotedAmount = null;
const watchingFetch = async (input, init) => {
  const response = await fetch(input, init);
  const quote = response.status === 402 ? response.headers.get("PAYMENT-REQUIRED") : null;
  if (quote) {
    quotedAmount = JSON.parse(Buffer.from(quote, "base64").toString("utf8")).accepts[0].amount;
  }
  return response;
};
const fetchWithPayment = wrapFetchWithPayment(watchingFetch, client);

const response = await fetchWithPayment(`${base}/v1/chat/completions`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ model, max_tokens: 64, messages: [{ role: "user", content: prompt }] }),
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
console.log(JSON.stringify({ status: response.status, payer: account.address, quotedAmount, settlement, answer }));
