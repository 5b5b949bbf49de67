// mppx 0.11's own `evm` `charge` SERVER, settling on a local chain (the CI
// anvil with Circle's USDC at Base Sepolia's address, chain 84532): what
// walletgate's paying client is tested against.
//
// It settles an EIP-3009 authorization itself (`settle`: USDC's
// `transferWithAuthorization`, sent from the key in MPP_SETTLER_KEY, a test
// account with gas on anvil; by default the PUBLIC development account #0 of
// the test mnemonic), waits for a status-1 receipt and answers with mppx's
// `Payment-Receipt`. The key is never printed.
//
// usage: [MPP_SETTLER_KEY=0x…] node serve.mjs <rpc url> <recipient> <amount in USD> [again]
// Listens on a free loopback port and prints one JSON line {url}. With
// `again`, every request is answered 402 with a fresh challenge, credential
// or not (a server that asks again after being paid: nothing is settled).
// Stops when stdin closes.
import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { assets, charge } from "mppx/evm/server";
import { Mppx, NodeListener } from "mppx/server";
import { createPublicClient, createWalletClient, defineChain, http, parseSignature } from "viem";
import { mnemonicToAccount, privateKeyToAccount } from "viem/accounts";

// PUBLIC development mnemonic of Hardhat/Anvil: test use only.
const PUBLIC_DEV_MNEMONIC = "test test test test test test test test test test test junk";

const [rpc, recipient, amount, mode] = process.argv.slice(2);
if (!rpc || !recipient || !amount) {
  console.error("usage: [MPP_SETTLER_KEY=0x…] node serve.mjs <rpc url> <recipient> <amount in USD> [again]");
  process.exit(2);
}
const chain = defineChain({
  id: 84532,
  name: "anvil",
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [rpc] } },
});
const account = process.env.MPP_SETTLER_KEY
  ? privateKeyToAccount(process.env.MPP_SETTLER_KEY)
  : mnemonicToAccount(PUBLIC_DEV_MNEMONIC, { addressIndex: 0 });
const wallet = createWalletClient({ account, chain, transport: http(rpc) });
const reader = createPublicClient({ chain, transport: http(rpc) });
const usdc = assets.baseSepolia.USDC;

const TRANSFER_WITH_AUTHORIZATION = [
  {
    type: "function",
    name: "transferWithAuthorization",
    stateMutability: "nonpayable",
    inputs: [
      { name: "from", type: "address" },
      { name: "to", type: "address" },
      { name: "value", type: "uint256" },
      { name: "validAfter", type: "uint256" },
      { name: "validBefore", type: "uint256" },
      { name: "nonce", type: "bytes32" },
      { name: "v", type: "uint8" },
      { name: "r", type: "bytes32" },
      { name: "s", type: "bytes32" },
    ],
    outputs: [],
  },
];

const mppx = Mppx.create({
  methods: [
    charge({
      currency: usdc,
      recipient,
      async settle(parameters) {
        try {
          return await settle(parameters);
        } catch (error) {
          // Why, for the test's output (never a key: the message is viem's).
          console.error(`serve.mjs: settle failed: ${error?.shortMessage ?? error?.message ?? error}`);
          throw error;
        }
      },
    }),
  ],
  secretKey: randomBytes(32).toString("base64"),
  realm: "127.0.0.1",
});

// USDC's transferWithAuthorization of the authorization; the transaction hash
// once mined with status 1.
async function settle({ payload, request }) {
  const { v, r, s, yParity } = parseSignature(payload.signature);
  const hash = await wallet.writeContract({
    address: request.currency,
    abi: TRANSFER_WITH_AUTHORIZATION,
    functionName: "transferWithAuthorization",
    args: [
      payload.from,
      payload.to,
      BigInt(payload.value),
      BigInt(payload.validAfter),
      BigInt(payload.validBefore),
      payload.nonce,
      Number(v ?? 27n + BigInt(yParity)),
      r,
      s,
    ],
  });
  const receipt = await reader.waitForTransactionReceipt({ hash, timeout: 30_000 });
  if (receipt.status !== "success") throw new Error(`transfer reverted: ${hash}`);
  return { reference: hash };
}

const server = createServer(async (req, res) => {
  try {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
      if (mode === "again" && name === "authorization") continue;
      headers.set(name, Array.isArray(value) ? value.join(", ") : value);
    }
    const body = chunks.length && req.method !== "GET" ? Buffer.concat(chunks) : undefined;
    const request = new Request(`http://127.0.0.1${req.url}`, { method: req.method, headers, body });
    const result = await mppx.charge({ amount })(request);
    if (result.status === 402) return await NodeListener.sendResponse(res, result.challenge);
    await NodeListener.sendResponse(
      res,
      result.withReceipt(Response.json({ ok: true, paid: amount })),
    );
  } catch (error) {
    res.statusCode = 500;
    res.end(String(error?.message ?? error));
  }
});
server.listen(0, "127.0.0.1", () => {
  const { port } = server.address();
  console.log(JSON.stringify({ url: `http://127.0.0.1:${port}/paid` }));
});
process.stdin.on("end", () => server.close(() => process.exit(0)));
process.stdin.resume();
