// The official x402 TS facilitator (@x402/core's x402Facilitator with
// @x402/evm's exact and upto schemes) settling on a real chain: the packages
// ship no HTTP server, so this serves the standard facilitator API on loopback.
//
//   GET  /supported   the kinds it settles (exact and upto on the chain's eip155 id;
//                     upto's extra.facilitatorAddress is this account)
//   POST /verify      {x402Version, paymentPayload, paymentRequirements}
//   POST /settle      the same body; broadcasts transferWithAuthorization (exact)
//                     or the upto proxy's settle for requirements.amount (upto;
//                     needs Permit2 and the proxy: deploy.mjs puts them there)
//
// It signs with an account of anvil's public test mnemonic (#7 unless told;
// one past the ten funded ones is given ether first), with a nonce manager:
// without one, concurrent settles collide on transaction nonces ("nonce too
// low"). Facilitators running at once on one chain use different accounts:
// each nonce manager knows only its own process's transactions.
//
// usage: node facilitator.mjs <rpc url> [port, 0 = a free one] [account index]
// The first stdout line is the port listened on (127.0.0.1).
import express from "express";
import { x402Facilitator } from "@x402/core/facilitator";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { ExactEvmScheme } from "@x402/evm/exact/facilitator";
import { UptoEvmScheme } from "@x402/evm/upto/facilitator";
import { createWalletClient, defineChain, http, nonceManager, publicActions } from "viem";
import { mnemonicToAccount } from "viem/accounts";

const MNEMONIC = "test test test test test test test test test test test junk";
const [rpc, portArg = "0", accountArg = "7"] = process.argv.slice(2);
if (!rpc) {
  console.error("usage: node facilitator.mjs <rpc url> [port] [account index]");
  process.exit(2);
}

const probe = createWalletClient({ transport: http(rpc) }).extend(publicActions);
const chainId = await probe.getChainId();
const chain = defineChain({
  id: chainId,
  name: `anvil-${chainId}`,
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [rpc] } },
});
const account = mnemonicToAccount(MNEMONIC, { addressIndex: Number(accountArg), nonceManager });
const client = createWalletClient({ account, chain, transport: http(rpc) }).extend(publicActions);
// An account past anvil's ten funded ones starts with no ether: give it gas.
if ((await client.getBalance({ address: account.address })) === 0n) {
  await client.request({ method: "anvil_setBalance", params: [account.address, "0x56bc75e2d63100000"] });
}
const signer = toFacilitatorEvmSigner({
  address: account.address,
  readContract: (args) => client.readContract(args),
  verifyTypedData: (args) => client.verifyTypedData(args),
  writeContract: (args) => client.writeContract(args),
  sendTransaction: (args) => client.sendTransaction(args),
  waitForTransactionReceipt: (args) => client.waitForTransactionReceipt(args),
  getCode: (args) => client.getCode(args),
});
const network = `eip155:${chainId}`;
const facilitator = new x402Facilitator()
  .register(network, new ExactEvmScheme(signer))
  .register(network, new UptoEvmScheme(signer));

const app = express();
app.use(express.json({ limit: "64kb" }));
app.get("/supported", (_request, response) => response.json(facilitator.getSupported()));
for (const step of ["verify", "settle"]) {
  app.post(`/${step}`, async (request, response) => {
    const { paymentPayload, paymentRequirements } = request.body ?? {};
    if (!paymentPayload || !paymentRequirements) {
      response.status(400).json({ error: "paymentPayload and paymentRequirements are required" });
      return;
    }
    try {
      const answer = await facilitator[step](paymentPayload, paymentRequirements);
      const verdict = step === "verify" ? answer.isValid : answer.success;
      console.error(`facilitator ${step}: ${verdict ? "ok" : answer.invalidReason ?? answer.errorReason}`);
      response.json(answer);
    } catch (error) {
      console.error(`facilitator ${step} failed: ${error?.shortMessage ?? error?.message ?? error}`);
      response.status(500).json({ error: String(error?.shortMessage ?? error?.message ?? error) });
    }
  });
}
const server = app.listen(Number(portArg), "127.0.0.1", () => {
  console.log(server.address().port);
});
