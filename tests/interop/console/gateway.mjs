// The gateway's page for a browser in headless Chromium with a scripted
// wallet: the price table, axe-core, a free model answering without the
// wallet, a wallet that will not switch chains (nothing signed or sent), a
// refused signature (nothing sent), then a paid chat from a wallet on
// another chain: switched, signed, answered, the receipt shown; then the
// free tier spent and a wallet without funds, named. Prints one
// JSON line of findings (no key or signature in it); the Rust test checks
// the ledger.
//
// Environment: GATEWAY_URL, WALLET_KEY (a public development key),
// FREE_MODEL, PAID_MODEL, START_CHAIN_ID (the chain the wallet starts on),
// FREE_PER_WINDOW (the free tier's allowance), POOR_WALLET_KEY (unfunded).

import { axeViolations, click, fill, launch, openWithWallet, scriptedWallet, textWhen } from "./wallet.mjs";

const origin = process.env.GATEWAY_URL;
const startChain = Number(process.env.START_CHAIN_ID);
const wallet = scriptedWallet(process.env.WALLET_KEY, { chainId: startChain });
const out = {};

async function send(page, model, prompt) {
  await page.select("#try-model", model);
  await fill(page, "textbox", "Prompt", prompt);
  await click(page, "button", "Send");
  // Done when an answer or an error is shown and the button is enabled again.
  await page.waitForFunction(
    () =>
      !document.querySelector("#try-form button").disabled &&
      (document.getElementById("try-error").textContent !== "" || !document.getElementById("try-result").hidden),
    { timeout: 20_000 },
  );
  return {
    error: await page.$eval("#try-error", (e) => e.textContent),
    answer: await page.$eval("#try-result", (e) => (e.hidden ? null : document.getElementById("try-answer").textContent)),
  };
}

const chromium = await launch();
try {
  const { page, seen } = await openWithWallet(chromium.browser, wallet);
  const loaded = await page.goto(`${origin}/`, { waitUntil: "load" });
  out.pageStatus = loaded.status();
  out.csp = loaded.headers()["content-security-policy"] || "";
  out.rows = await page.$$eval("tbody tr", (rows) =>
    rows.map((row) => ({ id: row.querySelector("th").textContent, price: row.children[2].textContent })),
  );
  out.links = await page.$$eval("header a", (links) => links.map((link) => link.getAttribute("href")));
  out.modelChoice = (await page.$(`::-p-aria([name="Model"][role="combobox"])`)) !== null;
  out.axe = await axeViolations(page);

  // A free model answers; the wallet is never asked.
  wallet.state.asked = [];
  out.free = await send(page, process.env.FREE_MODEL, "hello free");
  out.freeAskedWallet = wallet.state.asked;

  // A wallet that will not switch to the offer's chain: nothing signed or sent.
  wallet.state.asked = [];
  wallet.state.refuseSwitch = true;
  out.noSwitch = await send(page, process.env.PAID_MODEL, "hello paid");
  out.noSwitchAsked = wallet.state.asked;
  wallet.state.refuseSwitch = false;

  // A refused signature: its message, nothing sent.
  wallet.state.asked = [];
  wallet.state.chainId = startChain;
  wallet.state.refuseSignature = true;
  out.refused = await send(page, process.env.PAID_MODEL, "hello paid");
  out.refusedAsked = wallet.state.asked;
  wallet.state.refuseSignature = false;

  // Paid from a wallet on another chain: switched, signed, answered, receipt shown.
  wallet.state.asked = [];
  wallet.state.chainId = startChain;
  out.paid = await send(page, process.env.PAID_MODEL, "hello paid");
  out.paidAsked = wallet.state.asked;
  out.walletChainAfter = wallet.state.chainId;
  out.status = await page.$eval("#try-status", (e) => e.textContent);
  out.receipt = await page.$eval("#try-receipt", (e) =>
    e.hidden
      ? null
      : {
          price: document.getElementById("try-price").textContent,
          amount: document.getElementById("try-amount").textContent,
          transaction: document.getElementById("try-transaction").textContent,
          network: document.getElementById("try-network").textContent,
          payer: document.getElementById("try-payer").textContent,
        },
  );
  out.payer = wallet.account.address;
  out.axeAfterPaying = await axeViolations(page);
  // The free tier spent (FREE_PER_WINDOW free chats per client IP): named.
  for (let sent = 1; sent <= Number(process.env.FREE_PER_WINDOW); sent += 1) {
    out.freeTierSpent = await send(page, process.env.FREE_MODEL, "hello again");
  }
  out.alerts = seen.dialogs;
  out.violations = await page.evaluate(() => window.__violations);

  // A wallet with no funds on the ledger: signed, refused, named.
  const poor = scriptedWallet(process.env.POOR_WALLET_KEY, { chainId: 84532 });
  const { page: poorPage } = await openWithWallet(chromium.browser, poor);
  await poorPage.goto(`${origin}/`, { waitUntil: "load" });
  out.noFunds = await send(poorPage, process.env.PAID_MODEL, "hello paid");
  out.noFundsAsked = poor.state.asked;
} finally {
  await chromium.close();
}
console.log(JSON.stringify(out));
