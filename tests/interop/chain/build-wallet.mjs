// Compiles the test contracts with the npm `solc` (pinned in package.json):
// the test wallets (Erc1271Wallet.sol, HostileWallet.sol), whose creation
// bytecode goes to <name>.bin (the tests deploy them), and the upto proxy
// stand-in (UptoPermit2Proxy.sol), whose runtime bytecode goes to
// UptoPermit2Proxy.runtime.bin (deploy.mjs sets it at the canonical address).
// Both files are committed.
// Run: node tests/interop/chain/build-wallet.mjs
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import solc from "solc";

const here = dirname(fileURLToPath(import.meta.url));
const targets = [
  { name: "Erc1271Wallet", output: "evm.bytecode.object", file: "Erc1271Wallet.bin" },
  { name: "HostileWallet", output: "evm.bytecode.object", file: "HostileWallet.bin" },
  // No CBOR metadata: the runtime code set on the chain is the contract alone.
  {
    name: "UptoPermit2Proxy",
    output: "evm.deployedBytecode.object",
    file: "UptoPermit2Proxy.runtime.bin",
    metadata: { appendCBOR: false, bytecodeHash: "none" },
  },
];
for (const { name, output: selection, file, metadata } of targets) {
  const input = {
    language: "Solidity",
    sources: { [`${name}.sol`]: { content: readFileSync(join(here, `${name}.sol`), "utf8") } },
    settings: {
      optimizer: { enabled: true, runs: 200 },
      evmVersion: "cancun",
      ...(metadata ? { metadata } : {}),
      outputSelection: { "*": { [name]: [selection] } },
    },
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input)));
  const errors = (output.errors ?? []).filter((e) => e.severity === "error");
  if (errors.length) {
    console.error(errors.map((e) => e.formattedMessage).join("\n"));
    process.exit(1);
  }
  const evm = output.contracts[`${name}.sol`][name].evm;
  const bytecode = selection === "evm.bytecode.object" ? evm.bytecode.object : evm.deployedBytecode.object;
  writeFileSync(join(here, file), `0x${bytecode}\n`);
  console.log(`${file}: ${bytecode.length / 2} bytes (solc ${solc.version()})`);
}
