// What the examples' pages share, as a module they import: the injected
// wallet (EIP-1193) one request at a time, its refusals as WalletError with
// the EIP-1193 code, a chain switch whose refusal is "wrong network"; and
// an answer's JSON body. It stores and logs nothing.

/** A refusal of the wallet (EIP-1193 error codes), or no wallet at all. */
export class WalletError extends Error {
  constructor(code, message, kind) {
    super(message);
    this.code = code;
    this.kind = kind;
  }
}

/** One EIP-1193 request to the injected wallet. */
export async function wallet(method, params) {
  const ethereum = window.ethereum;
  if (!ethereum || typeof ethereum.request !== "function") {
    throw new WalletError(undefined, "no wallet", "no-wallet");
  }
  try {
    return await ethereum.request(params === undefined ? { method } : { method, params });
  } catch (error) {
    throw new WalletError(error && error.code, (error && error.message) || String(error));
  }
}

/** The first account the wallet shares. */
export async function account() {
  const accounts = await wallet("eth_requestAccounts");
  if (!accounts || !accounts[0]) throw new WalletError(undefined, "the wallet shared no account.");
  return accounts[0];
}

/**
 * Asks the wallet to be on `chainId` (`wanted` says who wants it); a
 * refusal is a "wrong-network" WalletError, before anything is signed.
 */
export async function ensureChain(chainId, wanted) {
  const current = parseInt(await wallet("eth_chainId"), 16);
  if (current === chainId) return;
  try {
    await wallet("wallet_switchEthereumChain", [{ chainId: "0x" + chainId.toString(16) }]);
  } catch (error) {
    throw new WalletError(
      error.code,
      `${wanted} on chain ${chainId}; your wallet is on chain ${current} and did not switch (${error.message}).`,
      "wrong-network",
    );
  }
}

/** Bytes as 0x-hex. */
export function hex(bytes) {
  return "0x" + Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

/** The response's body as JSON, or null when it is empty or not JSON. */
export async function jsonOf(response) {
  const text = await response.text();
  try {
    return text ? JSON.parse(text) : null;
  } catch {
    return null;
  }
}
