// The official MCP TypeScript client against the walletgate gateway's paid
// /mcp tools, paying with a payload signed by the official x402 client scheme
// (@x402/core x402Client + @x402/evm ExactEvmScheme), sent as the object in
// params._meta["x402/payment"] as the x402 MCP transport specifies.
//
// usage: node pay_mcp.mjs <mcp url> <account index> <paid model> <free model> <failing model>
// Prints one JSON line with what each step got (never a key or a signature).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { x402Client } from "@x402/core/client";
import { registerExactEvmScheme } from "@x402/evm/exact/client";
import { mnemonicToAccount, privateKeyToAccount } from "viem/accounts";

// PUBLIC development mnemonic of Hardhat/Anvil: its keys are known to everyone
// and worthless on any real chain. Test use only.
const PUBLIC_DEV_MNEMONIC = "test test test test test test test test test test test junk";

const [url, index, paidModel, freeModel, failingModel] = process.argv.slice(2);
if (!url || !index || !paidModel || !freeModel || !failingModel) {
  console.error("usage: node pay_mcp.mjs <mcp url> <account index> <paid model> <free model> <failing model>");
  process.exit(2);
}
const account = mnemonicToAccount(PUBLIC_DEV_MNEMONIC, { addressIndex: Number(index) });
// A key no ledger funds (a public test value).
const unfunded = privateKeyToAccount(`0x${"42".repeat(32)}`);

const client = new Client({ name: "walletgate-mcp-x402-interop", version: "0.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));

function payer(signer) {
  const x402 = new x402Client();
  registerExactEvmScheme(x402, { signer });
  return x402;
}
const chat = (model, text) => ({
  name: "chat",
  arguments: { model, max_tokens: 64, messages: [{ role: "user", content: text }] },
});
const withPayment = (call, payment) => ({ ...call, _meta: { "x402/payment": payment } });
// What a result says, without the payment it carried.
const seen = (result) => ({
  isError: result.isError ?? false,
  text: result.content?.[0]?.text ?? null,
  code: result.structuredContent?.code ?? null,
  error: result.structuredContent?.error ?? null,
  paymentResponse: result._meta?.["x402/payment-response"] ?? null,
});

const tools = (await client.listTools()).tools.map((tool) => ({
  name: tool.name,
  hasOutputSchema: tool.outputSchema !== undefined,
}));
const models = await client.callTool({ name: "list_models", arguments: {} });

const question = chat(paidModel, "hello over mcp");
const unpaid = await client.callTool(question);
const required = unpaid.structuredContent ?? JSON.parse(unpaid.content[0].text);
const payment = await payer(account).createPaymentPayload(required);
const paid = await client.callTool(withPayment(question, payment));
const replayed = await client.callTool(withPayment(question, payment));

const fresh = await payer(account).createPaymentPayload(required);
const tampered = await client.callTool(
  withPayment(question, { ...fresh, accepted: { ...fresh.accepted, amount: "1" } }),
);
const unfundedResult = await client.callTool(
  withPayment(question, await payer(unfunded).createPaymentPayload(required)),
);

const failing = chat(failingModel, "fail please");
const failingRequired = (await client.callTool(failing)).structuredContent;
const toolError = await client.callTool(
  withPayment(failing, await payer(account).createPaymentPayload(failingRequired)),
);

const free = [];
for (let n = 0; n < 3; n++) {
  free.push(seen(await client.callTool(chat(freeModel, `free ${n}`))));
}
await client.close();

console.log(
  JSON.stringify({
    payer: account.address,
    tools,
    modelCount: models.structuredContent?.data?.length ?? 0,
    unpaid: { ...seen(unpaid), required },
    paid: seen(paid),
    replayed: seen(replayed),
    tampered: seen(tampered),
    unfunded: seen(unfundedResult),
    toolError: seen(toolError),
    free,
  }),
);
