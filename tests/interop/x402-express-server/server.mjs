// The official x402 v2 Express server (@x402/express 2.27) protecting one
// route, with an in-process facilitator: walletgate's paying client pays it
// on loopback (tests/client_interop.rs). No network: the facilitator checks
// what the reference exact-EVM facilitator checks, short of the chain.
//
// usage: node server.mjs <port, 0 = a free one> <payTo address> [facilitator URL]
// The first stdout line is the port listened on (127.0.0.1). With a
// facilitator URL, payments are verified and settled there (the official
// HTTPFacilitatorClient, e.g. `walletgate facilitator` on a real chain:
// tests/facilitator_server.rs) instead of in-process.
//
//   POST /paid         $0.001 USDC on Base Sepolia (eip155:84532), scheme `exact`;
//                      answers {"paid": true, "echo": <request JSON>}
//   GET  /settlements  what the facilitator settled, oldest first (unprotected)
import express from "express";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import { HTTPFacilitatorClient } from "@x402/core/server";
import { ExactEvmScheme } from "@x402/evm/exact/server";
import { authorizationTypes } from "@x402/evm";
import { declareDiscoveryExtension } from "@x402/extensions/bazaar";
import { getAddress, isAddress, keccak256, recoverTypedDataAddress } from "viem";

const NETWORK = "eip155:84532";
const ROUTE = "POST /paid";

const [portArg, payTo, facilitatorUrl] = process.argv.slice(2);
if (portArg === undefined || !payTo || !isAddress(payTo)) {
  console.error("usage: node server.mjs <port, 0 = free> <payTo address>");
  process.exit(2);
}

/**
 * An in-process facilitator (the `FacilitatorClient` interface of
 * @x402/core/server: verify, settle, getSupported) for exact EIP-3009 on
 * Base Sepolia. Verify runs the reference facilitator's checks in its order
 * (@x402/evm exact/facilitator `verifyEIP3009`) with its reason strings:
 * scheme, EIP-712 domain in `extra`, network, the typed-data signature
 * recovered to `authorization.from`, recipient = payTo, validBefore >= now+6,
 * validAfter <= now, value == amount; then, in place of the chain's
 * `authorizationState`, a (from, nonce) already settled is refused. Settle
 * re-verifies, records the nonce and answers a transaction hash made from
 * the signature (no chain).
 */
class LocalFacilitator {
  constructor() {
    /** `${from}:${nonce}` (lowercase) of every settled authorization. */
    this.spent = new Set();
    /** What was settled, for GET /settlements. */
    this.settlements = [];
  }

  async getSupported() {
    return {
      kinds: [{ x402Version: 2, scheme: "exact", network: NETWORK }],
      extensions: [],
      signers: { "eip155:*": [] },
    };
  }

  async verify(paymentPayload, requirements) {
    const result = await this.check(paymentPayload, requirements);
    console.error(`facilitator verify: ${result.isValid ? "valid" : result.invalidReason}`);
    return result;
  }

  async settle(paymentPayload, requirements) {
    const verified = await this.check(paymentPayload, requirements);
    if (!verified.isValid) {
      console.error(`facilitator settle refused: ${verified.invalidReason}`);
      return {
        success: false,
        errorReason: verified.invalidReason,
        payer: verified.payer,
        transaction: "",
        network: requirements.network,
      };
    }
    const { authorization, signature } = paymentPayload.payload;
    const key = spentKey(authorization);
    // Verify and this claim run in one turn of the event loop: no other
    // settle of the same nonce can come between them.
    this.spent.add(key);
    const transaction = keccak256(signature);
    const settled = {
      payer: getAddress(authorization.from),
      to: getAddress(authorization.to),
      amount: authorization.value,
      nonce: authorization.nonce,
      network: requirements.network,
      transaction,
    };
    this.settlements.push(settled);
    console.error(`facilitator settle: ${settled.payer} paid ${settled.amount} (${transaction})`);
    return {
      success: true,
      transaction,
      network: requirements.network,
      payer: settled.payer,
      amount: authorization.value,
    };
  }

  async check(paymentPayload, requirements) {
    const invalid = (invalidReason, payer) => ({ isValid: false, invalidReason, payer });
    const evm = paymentPayload?.payload;
    const authorization = evm?.authorization;
    if (paymentPayload?.x402Version !== 2) return invalid("invalid_x402_version");
    if (!authorization || typeof evm.signature !== "string") return invalid("invalid_payload");
    const payer = authorization.from;
    if (paymentPayload.accepted?.scheme !== "exact" || requirements.scheme !== "exact") {
      return invalid("invalid_exact_evm_scheme", payer);
    }
    const { name, version } = requirements.extra ?? {};
    if (!name || !version) return invalid("invalid_exact_evm_missing_eip712_domain", payer);
    if (paymentPayload.accepted.network !== requirements.network) {
      return invalid("invalid_exact_evm_network_mismatch", payer);
    }
    const chain = /^eip155:(\d+)$/.exec(requirements.network);
    if (!chain) return invalid("invalid_network", payer);
    let message;
    try {
      message = {
        from: getAddress(authorization.from),
        to: getAddress(authorization.to),
        value: BigInt(authorization.value),
        validAfter: BigInt(authorization.validAfter),
        validBefore: BigInt(authorization.validBefore),
        nonce: authorization.nonce,
      };
    } catch {
      return invalid("invalid_payload", payer);
    }
    let signer;
    try {
      signer = await recoverTypedDataAddress({
        domain: {
          name,
          version,
          chainId: Number(chain[1]),
          verifyingContract: getAddress(requirements.asset),
        },
        types: authorizationTypes,
        primaryType: "TransferWithAuthorization",
        message,
        signature: evm.signature,
      });
    } catch {
      return invalid("invalid_exact_evm_signature", payer);
    }
    if (signer !== message.from) return invalid("invalid_exact_evm_signature", payer);
    if (message.to !== getAddress(requirements.payTo)) {
      return invalid("invalid_exact_evm_recipient_mismatch", payer);
    }
    const now = BigInt(Math.floor(Date.now() / 1000));
    if (message.validBefore < now + 6n) {
      return invalid("invalid_exact_evm_payload_authorization_valid_before", payer);
    }
    if (message.validAfter > now) {
      return invalid("invalid_exact_evm_payload_authorization_valid_after", payer);
    }
    if (message.value !== BigInt(requirements.amount)) {
      return invalid("invalid_exact_evm_payload_authorization_value_mismatch", payer);
    }
    if (this.spent.has(spentKey(authorization))) {
      return invalid("invalid_exact_evm_nonce_already_used", payer);
    }
    return { isValid: true, payer: message.from };
  }
}

function spentKey(authorization) {
  return `${String(authorization.from).toLowerCase()}:${String(authorization.nonce).toLowerCase()}`;
}

const facilitator = new LocalFacilitator();
const resourceServer = new x402ResourceServer(
  facilitatorUrl ? new HTTPFacilitatorClient({ url: facilitatorUrl }) : facilitator,
).register(NETWORK, new ExactEvmScheme());
const routes = {
  [ROUTE]: {
    accepts: { scheme: "exact", price: "$0.001", network: NETWORK, payTo },
    description: "walletgate client interop: one paid echo",
    mimeType: "application/json",
    // Optional quote members a client must tolerate: the resource's Bazaar
    // metadata and a declared extension (a client need not echo it).
    serviceName: "walletgate interop",
    tags: ["interop", "echo"],
    extensions: declareDiscoveryExtension({
      method: "POST",
      bodyType: "json",
      input: { question: "what is paid for?" },
      inputSchema: { properties: { question: { type: "string" } } },
      output: { example: { paid: true, echo: { question: "what is paid for?" } } },
    }),
  },
};

const app = express();
app.use(express.json());
app.get("/settlements", (_req, res) => res.json(facilitator.settlements));
app.use(paymentMiddleware(routes, resourceServer));
app.post("/paid", (req, res) => res.json({ paid: true, echo: req.body ?? null }));

const listener = app.listen(Number(portArg), "127.0.0.1", () => {
  console.log(listener.address().port);
});
process.on("SIGTERM", () => listener.close(() => process.exit(0)));
