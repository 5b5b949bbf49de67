// Verifies a walletgate 402's signed offers and a settlement's signed receipt
// with the official @x402/extensions 2.27 offer-receipt helpers, and checks
// that a receipt changed by one byte no longer verifies as the same signer.
//
// usage: node offer_receipt.mjs < {"paymentRequired": "<PAYMENT-REQUIRED>", "paymentResponse": "<PAYMENT-RESPONSE>"}
// Prints one JSON line: {offers: [{signer, acceptIndex, matched}], receipt: {signer, payload},
// changedPayloadSigner, changedSignature}.
import { decodePaymentRequiredHeader } from "@x402/core/http";
import {
  decodeSignedOffers,
  extractOffersFromPaymentRequired,
  extractReceiptFromResponse,
  findAcceptsObjectFromSignedOffer,
  verifyOfferSignatureEIP712,
  verifyReceiptSignatureEIP712,
} from "@x402/extensions/offer-receipt";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { paymentRequired, paymentResponse } = JSON.parse(input);

const required = decodePaymentRequiredHeader(paymentRequired);
const signed = extractOffersFromPaymentRequired(required);
const decoded = decodeSignedOffers(signed);
const offers = [];
for (const [i, offer] of signed.entries()) {
  const { signer } = await verifyOfferSignatureEIP712(offer);
  const matched = findAcceptsObjectFromSignedOffer(decoded[i], required.accepts) !== undefined;
  offers.push({ signer, acceptIndex: offer.acceptIndex, matched });
}

const response = new Response(null, { headers: { "PAYMENT-RESPONSE": paymentResponse } });
const receipt = extractReceiptFromResponse(response);
const verified = await verifyReceiptSignatureEIP712(receipt);

// One byte of the payload changed: it recovers someone else.
const changed = structuredClone(receipt);
changed.payload.transaction = changed.payload.transaction.replace(/.$/, (c) => (c === "0" ? "1" : "0"));
const changedPayloadSigner = (await verifyReceiptSignatureEIP712(changed)).signer;

// One byte of the signature changed: another signer, or no signature at all.
const tampered = structuredClone(receipt);
const at = 10;
const flipped = tampered.signature[at] === "0" ? "1" : "0";
tampered.signature = tampered.signature.slice(0, at) + flipped + tampered.signature.slice(at + 1);
let changedSignature;
try {
  changedSignature = (await verifyReceiptSignatureEIP712(tampered)).signer;
} catch (error) {
  changedSignature = `refused: ${error.name}`;
}

console.log(
  JSON.stringify({
    offers,
    receipt: { signer: verified.signer, payload: verified.payload },
    changedPayloadSigner,
    changedSignature,
  }),
);
