"""The official Python x402 v2 server middleware (PyPI `x402` 2.25, Flask)
protecting one route, with an in-process facilitator: walletgate's paying
client pays it on loopback (tests/client_interop.rs). No network: the
facilitator checks what the reference exact-EVM facilitator checks, short of
the chain.

usage: .venv/bin/python server.py <port, 0 = a free one> <payTo address>
The first stdout line is the port listened on (127.0.0.1).

  POST /paid         $0.001 USDC on Base Sepolia (eip155:84532), scheme `exact`;
                     answers {"paid": true, "echo": <request JSON>}
  GET  /settlements  what the facilitator settled, oldest first (unprotected)
"""

from __future__ import annotations

import sys
import threading
import time

from eth_account import Account
from eth_account.messages import encode_typed_data
from eth_utils import is_address, keccak, to_checksum_address
from flask import Flask, jsonify, request
from werkzeug.serving import make_server
from x402 import x402ResourceServerSync
from x402.http import PaymentOption, RouteConfig
from x402.http.middleware.flask import payment_middleware
from x402.mechanisms.evm.exact import ExactEvmServerScheme
from x402.schemas import SettleResponse, SupportedKind, SupportedResponse, VerifyResponse

NETWORK = "eip155:84532"

# EIP-3009 TransferWithAuthorization under a 4-field EIP-712 domain.
AUTHORIZATION_TYPES = {
    "EIP712Domain": [
        {"name": "name", "type": "string"},
        {"name": "version", "type": "string"},
        {"name": "chainId", "type": "uint256"},
        {"name": "verifyingContract", "type": "address"},
    ],
    "TransferWithAuthorization": [
        {"name": "from", "type": "address"},
        {"name": "to", "type": "address"},
        {"name": "value", "type": "uint256"},
        {"name": "validAfter", "type": "uint256"},
        {"name": "validBefore", "type": "uint256"},
        {"name": "nonce", "type": "bytes32"},
    ],
}


class LocalFacilitator:
    """An in-process facilitator (x402's `FacilitatorClientSync`: verify,
    settle, get_supported) for exact EIP-3009 on Base Sepolia.

    Verify runs the reference facilitator's checks in its order (x402
    `mechanisms/evm/exact/facilitator.py`) with the Python SDK's reason
    strings: scheme, EIP-712 domain in `extra`, network, the typed-data
    signature recovered (eth_account) to `authorization.from`, recipient =
    payTo, validBefore >= now+6, validAfter <= now, value == amount; then, in
    place of the chain's `authorizationState`, a (from, nonce) already settled
    is refused. Settle re-verifies, records the nonce under a lock and answers
    a transaction hash made from the signature (no chain).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spent: set[str] = set()
        self.settlements: list[dict[str, str]] = []

    def get_supported(self) -> SupportedResponse:
        return SupportedResponse(
            kinds=[SupportedKind(x402_version=2, scheme="exact", network=NETWORK)],
            extensions=[],
            signers={},
        )

    def verify(self, payload, requirements) -> VerifyResponse:
        result = self._check(payload, requirements)
        print(
            f"facilitator verify: {'valid' if result.is_valid else result.invalid_reason}",
            file=sys.stderr,
            flush=True,
        )
        return result

    def settle(self, payload, requirements) -> SettleResponse:
        with self._lock:
            verified = self._check(payload, requirements)
            if not verified.is_valid:
                print(
                    f"facilitator settle refused: {verified.invalid_reason}",
                    file=sys.stderr,
                    flush=True,
                )
                return SettleResponse(
                    success=False,
                    error_reason=verified.invalid_reason,
                    payer=verified.payer,
                    transaction="",
                    network=requirements.network,
                )
            authorization = payload.payload["authorization"]
            self._spent.add(_spent_key(authorization))
            transaction = "0x" + keccak(hexstr=payload.payload["signature"]).hex()
            payer = to_checksum_address(authorization["from"])
            self.settlements.append(
                {
                    "payer": payer,
                    "to": to_checksum_address(authorization["to"]),
                    "amount": str(authorization["value"]),
                    "nonce": authorization["nonce"],
                    "network": requirements.network,
                    "transaction": transaction,
                }
            )
        print(
            f"facilitator settle: {payer} paid {authorization['value']} ({transaction})",
            file=sys.stderr,
            flush=True,
        )
        return SettleResponse(
            success=True,
            transaction=transaction,
            network=requirements.network,
            payer=payer,
            amount=str(authorization["value"]),
        )

    def _check(self, payload, requirements) -> VerifyResponse:
        def invalid(reason: str, payer: str | None = None) -> VerifyResponse:
            return VerifyResponse(is_valid=False, invalid_reason=reason, payer=payer)

        if getattr(payload, "x402_version", None) != 2:
            return invalid("invalid_x402_version")
        evm = payload.payload
        authorization = evm.get("authorization")
        signature = evm.get("signature")
        if not isinstance(authorization, dict) or not isinstance(signature, str):
            return invalid("invalid_payload")
        payer = authorization.get("from")
        if payload.accepted.scheme != "exact" or requirements.scheme != "exact":
            return invalid("unsupported_scheme", payer)
        extra = requirements.extra or {}
        if not extra.get("name") or not extra.get("version"):
            return invalid("missing_eip712_domain", payer)
        if payload.accepted.network != requirements.network:
            return invalid("network_mismatch", payer)
        if not requirements.network.startswith("eip155:"):
            return invalid("invalid_network", payer)
        try:
            message = {
                "from": to_checksum_address(authorization["from"]),
                "to": to_checksum_address(authorization["to"]),
                "value": int(authorization["value"]),
                "validAfter": int(authorization["validAfter"]),
                "validBefore": int(authorization["validBefore"]),
                "nonce": bytes.fromhex(authorization["nonce"].removeprefix("0x")),
            }
            if len(message["nonce"]) != 32:
                return invalid("invalid_payload", payer)
            chain_id = int(requirements.network.split(":", 1)[1])
        except (KeyError, TypeError, ValueError):
            return invalid("invalid_payload", payer)
        typed = {
            "types": AUTHORIZATION_TYPES,
            "primaryType": "TransferWithAuthorization",
            "domain": {
                "name": extra["name"],
                "version": extra["version"],
                "chainId": chain_id,
                "verifyingContract": to_checksum_address(requirements.asset),
            },
            "message": message,
        }
        try:
            signer = Account.recover_message(
                encode_typed_data(full_message=typed), signature=signature
            )
        except Exception:  # noqa: BLE001 - any malformed signature is invalid
            return invalid("invalid_exact_evm_payload_signature", payer)
        if signer != message["from"]:
            return invalid("invalid_exact_evm_payload_signature", payer)
        if message["to"] != to_checksum_address(requirements.pay_to):
            return invalid("invalid_exact_evm_payload_recipient_mismatch", payer)
        now = int(time.time())
        if message["validBefore"] < now + 6:
            return invalid("invalid_exact_evm_payload_authorization_valid_before", payer)
        if message["validAfter"] > now:
            return invalid("invalid_exact_evm_payload_authorization_valid_after", payer)
        if message["value"] != int(requirements.amount):
            return invalid("invalid_exact_evm_payload_authorization_value_mismatch", payer)
        if _spent_key(authorization) in self._spent:
            return invalid("invalid_exact_evm_nonce_already_used", payer)
        return VerifyResponse(is_valid=True, payer=message["from"])


def _spent_key(authorization: dict) -> str:
    return f"{str(authorization['from']).lower()}:{str(authorization['nonce']).lower()}"


def main() -> None:
    if len(sys.argv) != 3 or not is_address(sys.argv[2]):
        print("usage: server.py <port, 0 = free> <payTo address>", file=sys.stderr)
        sys.exit(2)
    port, pay_to = int(sys.argv[1]), sys.argv[2]

    facilitator = LocalFacilitator()
    server = x402ResourceServerSync(facilitator)
    server.register(NETWORK, ExactEvmServerScheme())
    routes = {
        "POST /paid": RouteConfig(
            accepts=PaymentOption(scheme="exact", pay_to=pay_to, price="$0.001", network=NETWORK),
            description="walletgate client interop: one paid echo",
            mime_type="application/json",
            # Optional resource members a client must tolerate (Bazaar metadata).
            service_name="walletgate interop",
            tags=["interop", "echo"],
        )
    }

    app = Flask(__name__)

    @app.get("/settlements")
    def settlements():
        return jsonify(facilitator.settlements)

    @app.post("/paid")
    def paid():
        return jsonify({"paid": True, "echo": request.get_json(silent=True)})

    payment_middleware(app, routes, server)

    http = make_server("127.0.0.1", port, app, threaded=True)
    print(http.server_port, flush=True)
    http.serve_forever()


if __name__ == "__main__":
    main()
