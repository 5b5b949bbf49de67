// Compiles the test wallets (Erc1271Wallet.sol, HostileWallet.sol) with the
// npm `solc` (pinned in package.json) and writes each one's creation bytecode
// to <name>.bin (committed; the tests deploy them).
// Run: node tests/interop/chain/build-wallet.mjs
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import solc from "solc";

const here = dirname(fileURLToPath(import.meta.url));
for (const name of ["Erc1271Wallet", "HostileWallet"]) {
  const input = {
    language: "Solidity",
    sources: { [`${name}.sol`]: { content: readFileSync(join(here, `${name}.sol`), "utf8") } },
    settings: {
      optimizer: { enabled: true, runs: 200 },
      evmVersion: "cancun",
      outputSelection: { "*": { [name]: ["evm.bytecode.object"] } },
    },
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input)));
  const errors = (output.errors ?? []).filter((e) => e.severity === "error");
  if (errors.length) {
    console.error(errors.map((e) => e.formattedMessage).join("\n"));
    process.exit(1);
  }
  const bytecode = output.contracts[`${name}.sol`][name].evm.bytecode.object;
  writeFileSync(join(here, `${name}.bin`), `0x${bytecode}\n`);
  console.log(`${name}.bin: ${bytecode.length / 2} bytes (solc ${solc.version()})`);
}
