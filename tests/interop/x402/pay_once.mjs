// The official x402 v2 client (@x402/fetch + @x402/evm) with the official
// payment-identifier helper (@x402/extensions), against the walletgate
// reference gateway: pay once under an id, then resend and re-sign under it.
//
// usage: node pay_once.mjs <base url> <account index> <model>
// Prints one JSON line: {id, first, identical, fresh, other}, each
// {status, body, receipt} (`receipt` = the PAYMENT-RESPONSE header as sent).
import { wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { appendPaymentIdentifierToExtensions, generatePaymentId } from "@x402/extensions/payment-identifier";
import { mnemonicToAccount } from "viem/accounts";

// PUBLIC development mnemonic of Hardhat/Anvil: its keys are known to everyone
// and worthless on any real chain. Test use only.
const PUBLIC_DEV_MNEMONIC = "test test test test test test test test test test test junk";

const [base, index, model] = process.argv.slice(2);
if (!base || !index || !model) {
  console.error("usage: node pay_once.mjs <base url> <account index> <model>");
  process.exit(2);
}
const account = mnemonicToAccount(PUBLIC_DEV_MNEMONIC, { addressIndex: Number(index) });
const id = generatePaymentId();

// A client that sends `id` whenever the server declares the extension, as the
// official example does; the paid request's PAYMENT-SIGNATURE is noted.
let lastSignature = null;
const watchingFetch = async (input, init) => {
  const request = new Request(input, init);
  lastSignature = request.headers.get("PAYMENT-SIGNATURE") ?? lastSignature;
  return fetch(request);
};
function payingFetch() {
  const client = new x402Client();
  registerExactEvmScheme(client, { signer: account });
  client.onBeforePaymentCreation(async ({ paymentRequired }) => {
    if (paymentRequired.extensions) {
      appendPaymentIdentifierToExtensions(paymentRequired.extensions, id);
    }
  });
  return wrapFetchWithPayment(watchingFetch, client);
}

const url = `${base}/v1/chat/completions`;
const chat = (prompt) => ({
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ model, max_tokens: 64, messages: [{ role: "user", content: prompt }] }),
});
const seen = async (response) => ({
  status: response.status,
  receipt: response.headers.get("PAYMENT-RESPONSE"),
  body: await response.text(),
});

const first = await seen(await payingFetch()(url, chat("pay me once")));
const signature = lastSignature;
// The identical PAYMENT-SIGNATURE resent (the answer was lost).
const identical = await seen(
  await fetch(url, { ...chat("pay me once"), headers: { ...chat("").headers, "PAYMENT-SIGNATURE": signature } }),
);
// A fresh signature for the same request under the same id (the official client re-signs on retry).
const fresh = await seen(await payingFetch()(url, chat("pay me once")));
const freshSigned = lastSignature !== signature;
// Another request under the same id.
const other = await seen(await payingFetch()(url, chat("another question")));
console.log(JSON.stringify({ id, payer: account.address, first, identical, fresh, freshSigned, other }));
