// Pays the walletgate reference gateway's metered `upto` offer with the
// official x402 v2 client (@x402/fetch + @x402/evm's UptoEvmScheme),
// selecting the upto entry as the reference describes (the default selector
// takes the first entry whose scheme the client registered).
//
// usage: node pay_upto.mjs <base url> <account index | env> <model> <prompt> [stream]
// `env` signs with PAYER_PRIVATE_KEY instead of a development account.
// With `stream` the chat is streamed and read chunk by chunk: the settlement
// is the last `payment-response` event's, and firstChunkMs / lastChunkMs say
// when the first and last chunks arrived (ms after the paid request was sent).
// Prints one JSON line: {status, payer, ceiling, settlement, answer, usage, firstChunkMs, lastChunkMs, chunks}.
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from "@x402/fetch";
import { UptoEvmScheme } from "@x402/evm/upto/client";
import { mnemonicToAccount, privateKeyToAccount } from "viem/accounts";

// PUBLIC development mnemonic of Hardhat/Anvil: test use only.
const PUBLIC_DEV_MNEMONIC = "test test test test test test test test test test test junk";

const [base, index, model, prompt, mode] = process.argv.slice(2);
if (!base || !index || !model || !prompt) {
  console.error("usage: node pay_upto.mjs <base url> <account index | env> <model> <prompt> [stream]");
  process.exit(2);
}
const stream = mode === "stream";

const account =
  index === "env"
    ? privateKeyToAccount(process.env.PAYER_PRIVATE_KEY)
    : mnemonicToAccount(PUBLIC_DEV_MNEMONIC, { addressIndex: Number(index) });
const client = new x402Client((_version, requirements) =>
  requirements.find((requirement) => requirement.scheme === "upto"),
).register("eip155:*", new UptoEvmScheme(account));

let ceiling = null;
let paidAt = null;
const watchingFetch = async (input, init) => {
  const request = new Request(input, init);
  if (request.headers.has("PAYMENT-SIGNATURE")) paidAt = performance.now();
  const response = await fetch(request);
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
  body: JSON.stringify({ model, max_tokens: 4000, stream, messages: [{ role: "user", content: prompt }] }),
});
const header = response.headers.get("PAYMENT-RESPONSE");
let settlement = header ? decodePaymentResponseHeader(header) : null;
let text = "";
let firstChunkMs = null;
let lastChunkMs = null;
let chunks = 0;
const decoder = new TextDecoder();
const reader = response.body.getReader();
for (;;) {
  const { done, value } = await reader.read();
  if (done) break;
  const at = Math.round(performance.now() - paidAt);
  firstChunkMs ??= at;
  lastChunkMs = at;
  chunks += 1;
  text += decoder.decode(value, { stream: true });
}
let answer = null;
let usage = null;
if (stream) {
  // The answer's text, its usage chunk, and the receipt: the data line after
  // the last `event: payment-response`.
  const lines = text.split("\n");
  const parsed = lines.filter((line) => line.startsWith("data: {")).map((line) => JSON.parse(line.slice(6)));
  answer = parsed.map((chunk) => chunk.choices?.[0]?.delta?.content ?? "").join("");
  usage = parsed.find((chunk) => chunk.usage)?.usage ?? null;
  const at = lines.lastIndexOf("event: payment-response");
  if (at >= 0) settlement = decodePaymentResponseHeader(lines[at + 1].slice("data: ".length));
} else {
  try {
    answer = JSON.parse(text).choices[0].message.content;
  } catch {
    answer = text;
  }
}
console.log(
  JSON.stringify({ status: response.status, payer: account.address, ceiling, settlement, answer, usage, firstChunkMs, lastChunkMs, chunks }),
);
