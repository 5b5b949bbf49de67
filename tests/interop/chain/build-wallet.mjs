// Compiles Erc1271Wallet.sol with the npm `solc` (pinned in package.json) and
// writes its creation bytecode to Erc1271Wallet.bin (committed; the tests
// deploy it). Run: node tests/interop/chain/build-wallet.mjs
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import solc from "solc";

const here = dirname(fileURLToPath(import.meta.url));
const input = {
  language: "Solidity",
  sources: { "Erc1271Wallet.sol": { content: readFileSync(join(here, "Erc1271Wallet.sol"), "utf8") } },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    outputSelection: { "*": { Erc1271Wallet: ["evm.bytecode.object"] } },
  },
};
const output = JSON.parse(solc.compile(JSON.stringify(input)));
const errors = (output.errors ?? []).filter((e) => e.severity === "error");
if (errors.length) {
  console.error(errors.map((e) => e.formattedMessage).join("\n"));
  process.exit(1);
}
const bytecode = output.contracts["Erc1271Wallet.sol"].Erc1271Wallet.evm.bytecode.object;
writeFileSync(join(here, "Erc1271Wallet.bin"), `0x${bytecode}\n`);
console.log(`Erc1271Wallet.bin: ${bytecode.length / 2} bytes (solc ${solc.version()})`);
