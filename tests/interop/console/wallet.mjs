// The browser side of the tests: headless Chromium (Debian's) through
// puppeteer-core, a scripted EIP-1193 wallet injected before any page
// script runs, and axe-core. The wallet's key stays in this process: the
// page reaches it through an exposed function and sees only its answers.
// Nothing here prints a key, token, JWT, cookie or signature.

import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import puppeteer from "puppeteer-core";
import { privateKeyToAccount, signTypedData } from "viem/accounts";

const require = createRequire(import.meta.url);

/** Chromium flags that keep it off the network it is not testing. */
const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** Starts Chromium on a fresh profile; `close()` ends it and removes the profile. */
export async function launch() {
  const profile = mkdtempSync(join(tmpdir(), "walletgate-console-"));
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: [...FLAGS, `--user-data-dir=${profile}`],
  });
  return {
    browser,
    async close() {
      await browser.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/**
 * A scripted EIP-1193 wallet backed by `privateKey`: `state` says what it
 * does next (its chain, whether it refuses to sign or to switch chains) and
 * records what it was asked.
 */
export function scriptedWallet(privateKey, { chainId }) {
  const account = privateKeyToAccount(privateKey);
  const state = {
    chainId,
    refuseSignature: false,
    refuseSwitch: false,
    asked: [],
  };
  const refusal = (code, message) => ({ error: { code, message } });
  async function request(method, params) {
    state.asked.push(method);
    switch (method) {
      case "eth_requestAccounts":
      case "eth_accounts":
        return { result: [account.address] };
      case "eth_chainId":
        return { result: `0x${state.chainId.toString(16)}` };
      case "wallet_switchEthereumChain": {
        if (state.refuseSwitch) return refusal(4902, "Unrecognized chain ID.");
        state.chainId = parseInt(params[0].chainId, 16);
        return { result: null };
      }
      case "personal_sign": {
        if (state.refuseSignature) return refusal(4001, "User rejected the request.");
        const signature = await account.signMessage({ message: { raw: params[0] } });
        return { result: signature };
      }
      case "eth_signTypedData_v4": {
        if (state.refuseSignature) return refusal(4001, "User rejected the request.");
        const typed = JSON.parse(params[1]);
        const { EIP712Domain, ...types } = typed.types;
        const signature = await signTypedData({
          privateKey,
          domain: typed.domain,
          types,
          primaryType: typed.primaryType,
          message: typed.message,
        });
        return { result: signature };
      }
      default:
        return refusal(4200, `Unsupported method ${method}.`);
    }
  }
  return { account, state, request };
}

/**
 * Opens a page whose `window.ethereum` is `wallet`, installed before the
 * page's own scripts; alerts and CSP violations are recorded in `seen`.
 */
export async function openWithWallet(browser, wallet) {
  const page = await browser.newPage();
  const seen = { dialogs: 0 };
  page.on("dialog", async (dialog) => {
    seen.dialogs += 1;
    await dialog.dismiss();
  });
  await page.exposeFunction("__walletgateWallet", (method, params) => wallet.request(method, params));
  await page.evaluateOnNewDocument(() => {
    window.__violations = [];
    document.addEventListener("securitypolicyviolation", (event) => {
      window.__violations.push(event.violatedDirective);
    });
    window.ethereum = {
      isWalletgateTest: true,
      async request({ method, params }) {
        const answer = await window.__walletgateWallet(method, params ?? []);
        if (answer.error) {
          const error = new Error(answer.error.message);
          error.code = answer.error.code;
          throw error;
        }
        return answer.result;
      },
    };
  });
  return { page, seen };
}

/** axe-core's A and AA violations on the page as it is now (ids and counts only). */
export async function axeViolations(page) {
  const source = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");
  // Evaluated through the DevTools protocol, which the page's CSP does not govern.
  await page.evaluate(source);
  return page.evaluate(async () => {
    const results = await window.axe.run(document, {
      runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"] },
    });
    return results.violations.map((violation) => `${violation.id} (${violation.nodes.length})`);
  });
}

/** Clicks the element with ARIA `role` and accessible `name`. */
export async function click(page, role, name) {
  const element = await page.waitForSelector(`::-p-aria([name="${name}"][role="${role}"])`, {
    visible: true,
    timeout: 10_000,
  });
  await element.click();
}

/** Types into the element with ARIA `role` and accessible `name`, replacing its text. */
export async function fill(page, role, name, text) {
  const element = await page.waitForSelector(`::-p-aria([name="${name}"][role="${role}"])`, {
    visible: true,
    timeout: 10_000,
  });
  await element.click({ count: 3 });
  await page.keyboard.press("Backspace");
  await element.type(text);
}

/** The text of `selector` once `predicate(text)` holds (or the last text seen after 10 s). */
export async function textWhen(page, selector, predicate) {
  const deadline = Date.now() + 10_000;
  let text = "";
  while (Date.now() < deadline) {
    text = await page.$eval(selector, (element) => element.textContent);
    if (predicate(text)) return text;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return text;
}
