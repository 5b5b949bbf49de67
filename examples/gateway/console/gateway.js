// The gateway page's "try it" form: thin on purpose. It sends one chat; on
// a 402 it shows the quote's price, asks the injected wallet (EIP-1193) to
// switch to the offer's chain and to sign the offer's EIP-3009 transfer
// authorization, sends the request again with PAYMENT-SIGNATURE, and shows
// the answer and the PAYMENT-RESPONSE receipt. Prices, offers, checks and
// settlement are the server's. Text from the server or the wallet goes in
// as text (textContent), never as HTML; nothing is stored or logged.
import { WalletError, account, ensureChain, hex, jsonOf, wallet } from "/console/shared.js";

const byId = (id) => document.getElementById(id);
byId("try").hidden = false;

/** A refusal of the gateway, in its error envelope. */
class GatewayError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// The gateway's codes (walletgate::envelope::ErrorCode) a person meets here.
const HEADLINES = {
  FREE_TIER_RATE_LIMITED: "Free tier exhausted",
  PAYMENT_UNFUNDED: "Insufficient funds",
  PAYMENT_INVALID: "Payment refused",
  PAYMENT_REPLAY: "Payment already used",
  PAYMENT_VERIFICATION_UNAVAILABLE: "Payment service unavailable",
  RATE_LIMITED: "Model busy",
};

/** The error in words, with its code. */
function describe(error) {
  if (error instanceof GatewayError) {
    const headline = HEADLINES[error.code] || (error.status === 402 ? "Payment refused" : "Request failed");
    return `${headline}: ${error.message} (HTTP ${error.status}, code ${error.code ?? "none"})`;
  }
  if (error instanceof WalletError) {
    if (error.kind === "no-wallet") {
      return "No wallet (NO_WALLET): paying needs a browser wallet that provides window.ethereum (EIP-1193).";
    }
    if (error.kind === "wrong-network") {
      return `Wrong network (EIP-1193 code ${error.code ?? "none"}): ${error.message} Nothing was signed or sent.`;
    }
    if (error.code === 4001) {
      return `Signature refused (EIP-1193 code 4001): ${error.message} Nothing was sent or paid.`;
    }
    return `Wallet error (EIP-1193 code ${error.code ?? "none"}): ${error.message}`;
  }
  return `Unexpected error (PAGE_ERROR): ${error && error.message ? error.message : String(error)}`;
}

/** POSTs the chat, with `payment` (the PAYMENT-SIGNATURE value) if given. */
async function send(body, payment) {
  const headers = { "content-type": "application/json", accept: "application/json" };
  if (payment) headers["payment-signature"] = payment;
  const response = await fetch("/v1/chat/completions", {
    method: "POST",
    headers,
    body: JSON.stringify(body),
    cache: "no-store",
  });
  const json = await jsonOf(response);
  return { response, json };
}

/** The envelope's code and message, whichever shape the gateway answered. */
function refusal(response, json) {
  const detail = json && typeof json.error === "object" && json.error ? json.error : {};
  const code = detail.code || (json && json.code) || undefined;
  const message = detail.message || (json && (json.message || json.error)) || response.statusText;
  return new GatewayError(response.status, code, String(message));
}

const base64Json = (text) => JSON.parse(atob(text));

/** The PAYMENT-SIGNATURE for the quote's first offer, signed by the wallet. */
async function pay(required) {
  const offer = required.accepts && required.accepts[0];
  if (!offer || offer.scheme !== "exact" || !String(offer.network).startsWith("eip155:")) {
    throw new GatewayError(402, "UNSUPPORTED_OFFER", "this page pays only exact offers on EVM chains");
  }
  const chainId = Number(String(offer.network).slice("eip155:".length));
  const from = await account();
  await ensureChain(chainId, "the offer is");
  const authorization = {
    from,
    to: offer.payTo,
    value: String(offer.amount),
    validAfter: "0",
    validBefore: String(Math.floor(Date.now() / 1000) + Number(offer.maxTimeoutSeconds)),
    nonce: hex(crypto.getRandomValues(new Uint8Array(32))),
  };
  const typed = {
    types: {
      EIP712Domain: [
        { name: "name", type: "string" },
        { name: "version", type: "string" },
        { name: "chainId", type: "uint256" },
        { name: "verifyingContract", type: "address" },
      ],
      TransferWithAuthorization: [
        { name: "from", type: "address" },
        { name: "to", type: "address" },
        { name: "value", type: "uint256" },
        { name: "validAfter", type: "uint256" },
        { name: "validBefore", type: "uint256" },
        { name: "nonce", type: "bytes32" },
      ],
    },
    primaryType: "TransferWithAuthorization",
    domain: {
      name: offer.extra && offer.extra.name,
      version: offer.extra && offer.extra.version,
      chainId,
      verifyingContract: offer.asset,
    },
    message: authorization,
  };
  const signature = await wallet("eth_signTypedData_v4", [from, JSON.stringify(typed)]);
  const payment = {
    x402Version: 2,
    resource: required.resource,
    accepted: offer,
    payload: { signature, authorization },
  };
  return btoa(JSON.stringify(payment));
}

function showResult(json, receiptHeader, price) {
  const message = json && json.choices && json.choices[0] && json.choices[0].message;
  byId("try-answer").textContent = message ? String(message.content) : JSON.stringify(json);
  byId("try-result").hidden = false;
  if (!receiptHeader) return;
  const receipt = base64Json(receiptHeader);
  byId("try-price").textContent = price;
  byId("try-amount").textContent = `${receipt.amount ?? "not stated"} (atomic units)`;
  byId("try-transaction").textContent = receipt.transaction;
  byId("try-network").textContent = receipt.network;
  byId("try-payer").textContent = receipt.payer ?? "";
  byId("try-receipt").hidden = false;
}

async function tryIt() {
  const body = {
    model: byId("try-model").value,
    messages: [{ role: "user", content: byId("try-prompt").value }],
    max_tokens: 64,
  };
  let { response, json } = await send(body);
  let price = "";
  if (response.status === 402) {
    const header = response.headers.get("payment-required");
    const required = header ? base64Json(header) : json;
    price = json && json.price ? `${json.price.amount} ${json.price.currency}` : `${required.accepts[0].amount} (atomic units)`;
    byId("try-status").textContent = `Payment required: ${price}. Asking your wallet to sign…`;
    const payment = await pay(required);
    byId("try-status").textContent = `Signed; sending again with the payment (${price})…`;
    ({ response, json } = await send(body, payment));
  }
  if (!response.ok) throw refusal(response, json);
  showResult(json, response.headers.get("payment-response"), price);
  byId("try-status").textContent = price ? `Answered and paid ${price}.` : "Answered (free model).";
}

byId("try-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const button = event.submitter || byId("try-form").querySelector("button");
  byId("try-error").textContent = "";
  byId("try-status").textContent = "";
  byId("try-result").hidden = true;
  byId("try-receipt").hidden = true;
  button.disabled = true;
  try {
    await tryIt();
  } catch (error) {
    byId("try-status").textContent = "";
    byId("try-error").textContent = describe(error);
  } finally {
    button.disabled = false;
  }
});
