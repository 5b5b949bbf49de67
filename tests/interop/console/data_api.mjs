// The data API's /console in headless Chromium with a scripted wallet: a
// refused signature changes nothing; a wrong network is named; sign in;
// create a token with read:favorites (its label an HTML payload, shown as
// text); copy it; use it the SDK's way (exchange, then favorites); a
// cross-site form post is refused; revoke it on the page and see the
// exchange refused; a reload forgets it; an expired session and a spent
// quota are named; sign out; axe-core finds no A/AA violation. Prints one JSON line of findings (no secret in it).
//
// Environment: DATA_API_URL (the server's origin), DATA_API_KEY, WALLET_KEY
// (the test wallet's key: a public development key), SIWE_CHAIN_ID; and
// QUOTA_URL, a second server whose key allows QUOTA_PER_MINUTE requests.

import { createServer } from "node:http";
import { axeViolations, click, fill, launch, openWithWallet, scriptedWallet, textWhen } from "./wallet.mjs";

const origin = process.env.DATA_API_URL;
const apiKey = process.env.DATA_API_KEY;
const chainId = Number(process.env.SIWE_CHAIN_ID || 1);
const wallet = scriptedWallet(process.env.WALLET_KEY, { chainId });
const LABEL = "<img src=x onerror=alert(1)>";
const out = {};

async function api(method, path, { body, bearer } = {}) {
  const headers = { "x-api-key": apiKey };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (bearer) headers.authorization = `Bearer ${bearer}`;
  const response = await fetch(`${origin}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, json: text ? JSON.parse(text) : null };
}

/** What the browser holds for this origin: cookie names and flags, never values. */
async function cookieFlags(page) {
  const cookies = await page.cookies(origin);
  return cookies
    .filter((cookie) => cookie.value !== "")
    .map((cookie) => ({ name: cookie.name, httpOnly: cookie.httpOnly, sameSite: cookie.sameSite }))
    .sort((a, b) => a.name.localeCompare(b.name));
}

/** The form a page on another site would post to create a token (JSON smuggled in text/plain). */
function attackerPage() {
  const html = `<!doctype html><html><body>
<form id="f" method="POST" action="${origin}/api/v2/auth/tokens" enctype="text/plain">
<input type="hidden" name='{"label":"csrf","scopes":["read:favorites"],"expiresInDays":1,"x":"' value='"}'>
</form><script>document.getElementById("f").submit();</script></body></html>`;
  const server = createServer((request, response) => {
    response.writeHead(200, { "content-type": "text/html" });
    response.end(html);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

const chromium = await launch();
try {
  const { page, seen } = await openWithWallet(chromium.browser, wallet);
  const loaded = await page.goto(`${origin}/console`, { waitUntil: "load" });
  out.pageStatus = loaded.status();
  out.csp = loaded.headers()["content-security-policy"] || "";
  out.axeSignedOut = await axeViolations(page);

  await fill(page, "textbox", "API key", apiKey);

  // A refused signature: its message, and nothing changed.
  wallet.state.refuseSignature = true;
  await click(page, "button", "Sign in");
  out.refusedError = await textWhen(page, "#error", (text) => text !== "");
  out.refusedShowsMessage = (await page.$eval("#siwe-message", (e) => e.textContent)).includes(
    "wants you to sign in with your Ethereum account:",
  );
  out.refusedCookies = (await cookieFlags(page)).length;
  out.refusedTokensHidden = await page.$eval("#tokens-section", (e) => e.hidden);
  wallet.state.refuseSignature = false;

  // A wallet on another chain that will not switch: "wrong network", nothing signed.
  wallet.state.chainId = chainId + 1;
  wallet.state.refuseSwitch = true;
  wallet.state.asked = [];
  await click(page, "button", "Sign in");
  out.wrongNetworkError = await textWhen(page, "#error", (text) => text.includes("Wrong network"));
  out.wrongNetworkSigned = wallet.state.asked.includes("personal_sign");
  out.wrongNetworkCookies = (await cookieFlags(page)).length;
  wallet.state.refuseSwitch = false;

  // Sign in (the wallet switches back to the server's chain when asked).
  await click(page, "button", "Sign in");
  out.sessionState = await textWhen(page, "#session-state", (text) => text.startsWith("Signed in"));
  out.signedInAs = wallet.account.address;
  out.cookies = await cookieFlags(page);
  out.quotaAfterSignIn = {
    used: await page.$eval("#quota-used", (e) => e.textContent),
    remaining: await page.$eval("#quota-remaining", (e) => e.textContent),
    limit: await page.$eval("#quota-limit", (e) => e.textContent),
  };

  // Create a token whose label is HTML.
  await fill(page, "textbox", "Label", LABEL);
  await click(page, "checkbox", "read:favorites");
  await fill(page, "spinbutton", "Expires (days)", "1");
  await click(page, "button", "Create");
  await page.waitForSelector("#new-token:not([hidden])", { timeout: 10_000 });
  const token = await page.$eval("#new-token-value", (e) => e.textContent);
  out.tokenShown = token.startsWith("wg_pat_");
  await textWhen(page, "#tokens", (text) => text.includes("active"));
  out.labelCells = await page.$$eval("#tokens th", (cells) => cells.map((cell) => cell.textContent));
  out.imagesInTable = await page.$$eval("#tokens img", (images) => images.length);
  out.alerts = seen.dialogs;
  out.violations = await page.evaluate(() => window.__violations);

  // Copy puts exactly the token on the clipboard.
  await chromium.browser.defaultBrowserContext().overridePermissions(origin, ["clipboard-read", "clipboard-write", "clipboard-sanitized-write"]);
  await click(page, "button", "Copy");
  out.copyNotice = await textWhen(page, "#notice", (text) => text.startsWith("Copied") || text !== "");
  out.clipboardIsToken = (await page.evaluate(() => navigator.clipboard.readText())) === token;

  out.axeSignedIn = await axeViolations(page);

  // The token at work, the SDK's way: exchange, then favorites with the JWT.
  const exchanged = await api("POST", "/api/v2/auth/tokens/exchange", {
    body: { subjectToken: token, subjectTokenType: "ACCESS_TOKEN" },
  });
  out.exchangeStatus = exchanged.status;
  const favorites = await api("GET", `/api/v2/account/${wallet.account.address}/favorites`, {
    bearer: exchanged.json?.accessToken,
  });
  out.favoritesStatus = favorites.status;
  out.favoritesCount = favorites.json?.nfts?.length ?? null;

  // A page on another site posts the create-token form in the same browser.
  const attacker = await attackerPage();
  const attackerUrl = `http://localhost:${attacker.address().port}/`;
  const other = await chromium.browser.newPage();
  const posted = other.waitForResponse((response) => response.url() === `${origin}/api/v2/auth/tokens`, { timeout: 10_000 });
  await other.goto(attackerUrl);
  const forged = await posted;
  out.crossSiteStatus = forged.status();
  out.crossSiteError = (await forged.json().catch(() => null))?.error ?? null;
  await other.close();
  attacker.close();
  const listed = await page.evaluate(
    (key) => fetch("/api/v2/auth/tokens", { headers: { "x-api-key": key } }).then((r) => r.json()),
    apiKey,
  );
  out.tokensAfterCrossSite = listed.map((entry) => entry.label);

  // Revoke on the page: the exchange is refused from then on.
  await click(page, "button", "Revoke");
  out.revokeNotice = await textWhen(page, "#notice", (text) => text.startsWith("Revoked"));
  out.signInShownAfterRevoke = await page.$eval("#sign-in", (e) => !e.hidden);
  out.exchangeAfterRevoke = (
    await api("POST", "/api/v2/auth/tokens/exchange", {
      body: { subjectToken: token, subjectTokenType: "ACCESS_TOKEN" },
    })
  ).status;

  // A reload forgets the token and the key; nothing was kept in storage.
  await page.reload({ waitUntil: "load" });
  out.afterReload = await page.evaluate(
    (secret) => ({
      tokenInPage: document.documentElement.outerHTML.includes(secret),
      localStorage: localStorage.length,
      sessionStorage: sessionStorage.length,
      apiKeyField: document.getElementById("api-key").value,
    }),
    token,
  );
  out.afterReload.apiKeyField = out.afterReload.apiKeyField === "" ? "empty" : "filled";

  // Sign in again; a session the server no longer knows (as once it expired) is named.
  await fill(page, "textbox", "API key", apiKey);
  await click(page, "button", "Sign in");
  await textWhen(page, "#session-state", (text) => text.startsWith("Signed in"));
  await page.setCookie({ name: "access_token", value: "expired", url: origin, httpOnly: true, sameSite: "Strict" });
  await fill(page, "textbox", "Label", "after expiry");
  await click(page, "button", "Create");
  out.expiredError = await textWhen(page, "#error", (text) => text !== "");
  out.signInShownAfterExpiry = await page.$eval("#sign-in", (e) => !e.hidden);

  // Sign in again, then sign out.
  await click(page, "button", "Sign in");
  await textWhen(page, "#session-state", (text) => text.startsWith("Signed in"));
  await click(page, "button", "Sign out");
  out.signOutNotice = await textWhen(page, "#notice", (text) => text === "Signed out.");
  out.cookiesAfterSignOut = (await cookieFlags(page)).length;
  out.alertsAtEnd = seen.dialogs;

  // A key whose quota is spent (a server allowing QUOTA_PER_MINUTE): named, with when to retry.
  if (process.env.QUOTA_URL) {
    const limited = await chromium.browser.newPage();
    await limited.goto(`${process.env.QUOTA_URL}/console`, { waitUntil: "load" });
    await fill(limited, "textbox", "API key", apiKey);
    for (let click_ = 0; click_ <= Number(process.env.QUOTA_PER_MINUTE); click_ += 1) {
      await click(limited, "button", "Refresh quota");
      await limited.waitForFunction(() => !document.getElementById("refresh-quota").disabled);
    }
    out.quotaError = await textWhen(limited, "#error", (text) => text !== "");
    await limited.close();
  }
} finally {
  await chromium.close();
}
console.log(JSON.stringify(out));
