// The data API console's script: thin on purpose. It calls the REST
// operations the SDK calls (SIWE nonce and verify, token management, the
// key's quota) and shows their answers; every rule (SIWE checks, scopes,
// expiry, the cross-site refusal) is the server's. Secrets (the API key, a
// new token) live in this page's memory and DOM only: never in storage,
// never logged. All text from the server or the wallet goes in as text
// (textContent), never as HTML.
import { WalletError, account, ensureChain, hex, jsonOf, wallet } from "/console/shared.js";

const STATEMENT = "Sign in to the walletgate data API console.";
const main = document.getElementById("console");
const byId = (id) => document.getElementById(id);
const siwe = {
  domain: main.dataset.siweDomain,
  uri: main.dataset.siweUri,
  chainId: Number(main.dataset.siweChainId),
};
main.hidden = false;

/** A refusal of the API, in its error envelope. */
class ApiError extends Error {
  constructor(status, code, message, retryAfter, sessionRoute) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
    this.sessionRoute = sessionRoute;
  }
}

const HEADLINES = {
  400: "Invalid request",
  401: "Not authorised",
  403: "Refused",
  404: "Not found",
  409: "Conflict",
  429: "Quota exhausted",
  503: "Service unavailable",
};

/** The error in words, with its code. */
function describe(error) {
  if (error instanceof ApiError) {
    let headline = HEADLINES[error.status] || "Request failed";
    if (error.status === 401 && error.sessionRoute) {
      headline = "Session expired or missing: sign in again";
    }
    let text = `${headline}: ${error.message} (HTTP ${error.status}, code ${error.code ?? "none"})`;
    if (error.status === 429 && error.retryAfter) {
      text += ` Retry in ${error.retryAfter} s.`;
    }
    return text;
  }
  if (error instanceof WalletError) {
    switch (error.kind) {
      case "no-wallet":
        return "No wallet (NO_WALLET): this page needs a browser wallet that provides window.ethereum (EIP-1193).";
      case "wrong-network":
        return `Wrong network (EIP-1193 code ${error.code ?? "none"}): ${error.message} Switch networks in your wallet and sign in again.`;
      default:
        if (error.code === 4001) {
          return `Wallet refused (EIP-1193 code 4001): ${error.message} Nothing was signed or sent; nothing changed.`;
        }
        return `Wallet error (EIP-1193 code ${error.code ?? "none"}): ${error.message}`;
    }
  }
  return `Unexpected error (CONSOLE_ERROR): ${error && error.message ? error.message : String(error)}`;
}

function showError(text) {
  byId("error").textContent = text;
}

function showNotice(text) {
  byId("notice").textContent = text;
}

/** Calls the API with the key from the field; answers the JSON body or throws ApiError. */
async function call(method, path, body) {
  const headers = { "x-api-key": byId("api-key").value.trim() };
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
    cache: "no-store",
  });
  const json = await jsonOf(response);
  if (!response.ok) {
    const detail = json && json.error ? json.error : {};
    const sessionRoute = path.startsWith("/api/v2/auth/tokens") || path.startsWith("/api/v2/auth/session");
    throw new ApiError(
      response.status,
      detail.code,
      detail.message || response.statusText,
      response.headers.get("retry-after"),
      sessionRoute,
    );
  }
  return json;
}

/** The EIP-4361 text of `fields`, laid out as the server rebuilds it. */
function siweText(fields) {
  return [
    `${fields.domain} wants you to sign in with your Ethereum account:`,
    fields.address,
    "",
    fields.statement,
    "",
    `URI: ${fields.uri}`,
    `Version: ${fields.version}`,
    `Chain ID: ${fields.chainId}`,
    `Nonce: ${fields.nonce}`,
    `Issued At: ${fields.issuedAt}`,
  ].join("\n");
}

async function signIn() {
  const address = await account();
  await ensureChain(siwe.chainId, "this server signs in");
  const { nonce } = await call("POST", "/api/v2/auth/siwe/nonce");
  const fields = {
    domain: siwe.domain,
    address,
    statement: STATEMENT,
    uri: siwe.uri,
    version: "1",
    chainId: siwe.chainId,
    nonce,
    issuedAt: new Date().toISOString(),
  };
  const text = siweText(fields);
  byId("siwe-message").textContent = text;
  byId("siwe").hidden = false;
  // personal_sign takes the UTF-8 bytes as hex.
  const signature = await wallet("personal_sign", [hex(new TextEncoder().encode(text)), address]);
  const signedIn = await call("POST", "/api/v2/auth/siwe/verify", { message: fields, signature });
  setSignedIn(signedIn.address);
  await loadTokens();
  await loadQuota();
}

function setSignedIn(address) {
  byId("session-state").textContent = `Signed in as ${address}.`;
  byId("sign-in").hidden = true;
  byId("sign-out").hidden = false;
  byId("tokens-section").hidden = false;
}

function setSignedOut() {
  byId("session-state").textContent = "Not signed in.";
  byId("sign-in").hidden = false;
  byId("sign-out").hidden = true;
  byId("tokens-section").hidden = true;
  byId("tokens").replaceChildren();
  hideNewToken();
}

function hideNewToken() {
  byId("new-token-value").textContent = "";
  byId("new-token").hidden = true;
}

function cell(tag, text) {
  const element = document.createElement(tag);
  element.textContent = text;
  return element;
}

async function loadTokens() {
  const tokens = await call("GET", "/api/v2/auth/tokens");
  const rows = tokens.map((token) => {
    const row = document.createElement("tr");
    const label = cell("th", token.label);
    label.scope = "row";
    const action = document.createElement("td");
    if (!token.revoked) {
      const revoke = cell("button", "Revoke");
      revoke.type = "button";
      revoke.addEventListener("click", () => run(revoke, () => revokeToken(token)));
      action.append(revoke);
    }
    row.append(
      label,
      cell("td", token.scopes.join(" ")),
      cell("td", token.createdAt),
      cell("td", token.expiresAt),
      cell("td", token.revoked ? "revoked" : "active"),
      action,
    );
    return row;
  });
  if (rows.length === 0) {
    const row = document.createElement("tr");
    const empty = cell("td", "No tokens yet.");
    empty.colSpan = 6;
    row.append(empty);
    rows.push(row);
  }
  byId("tokens").replaceChildren(...rows);
}

async function createToken() {
  const scopes = Array.from(document.querySelectorAll('input[name="scope"]:checked'), (box) => box.value);
  const created = await call("POST", "/api/v2/auth/tokens", {
    label: byId("token-label").value,
    scopes,
    expiresInDays: Number(byId("token-days").value),
  });
  byId("new-token-value").textContent = created.token;
  byId("new-token").hidden = false;
  byId("token-label").value = "";
  showNotice(`Created the token “${created.label}”. Copy it now: it is shown once.`);
  await loadTokens();
  await loadQuota();
}

async function revokeToken(token) {
  await call("DELETE", `/api/v2/auth/tokens/${encodeURIComponent(token.id)}`);
  setSignedOut();
  showNotice(
    `Revoked the token “${token.label}”. Revoking a token also signs this wallet out everywhere: sign in again to manage tokens.`,
  );
  await loadQuota();
}

async function signOut() {
  await call("DELETE", "/api/v2/auth/session");
  setSignedOut();
  showNotice("Signed out.");
}

async function copyToken() {
  try {
    await navigator.clipboard.writeText(byId("new-token-value").textContent);
    showNotice("Copied the token to the clipboard.");
  } catch (error) {
    showError(`Copy failed (CLIPBOARD_REFUSED): ${error.message}. Select the token and copy it by hand.`);
  }
}

async function loadQuota() {
  const quota = await call("GET", "/api/v2/key/quota");
  const known = quota.limit !== undefined;
  byId("quota-used").textContent = known ? String(quota.used) : "no quota";
  byId("quota-remaining").textContent = known ? String(quota.remaining) : "no quota";
  byId("quota-limit").textContent = known
    ? `${quota.limit} per ${quota.windowSeconds} s`
    : "this key has no quota";
}

/** Runs an action from `button`: one at a time, its error shown in words. */
async function run(button, action) {
  showError("");
  showNotice("");
  button.disabled = true;
  try {
    await action();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401 && error.sessionRoute) setSignedOut();
    showError(describe(error));
  } finally {
    button.disabled = false;
  }
}

byId("sign-in").addEventListener("click", (event) => run(event.currentTarget, signIn));
byId("sign-out").addEventListener("click", (event) => run(event.currentTarget, signOut));
byId("refresh-quota").addEventListener("click", (event) => run(event.currentTarget, loadQuota));
byId("copy-token").addEventListener("click", (event) => run(event.currentTarget, copyToken));
byId("create-token").addEventListener("submit", (event) => {
  event.preventDefault();
  run(event.submitter || byId("create-token").querySelector("button"), createToken);
});
