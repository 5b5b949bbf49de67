//! Test support for the x402 tests: a payer that signs EIP-3009
//! authorizations with the public development keys.
#![allow(dead_code, unreachable_pub)]

pub mod poll;

use alloy_primitives::{Address, B256, U256};
use secp256k1::{Message, PublicKey, SECP256K1, SecretKey};
use walletgate::x402::{
    AtomicAmount, Eip3009Authorization, ExactEvmDomain, ExactEvmPayload, PaymentPayload,
    PaymentRequirements, ResourceInfo, TransferWithAuthorization, codec,
};

/// PUBLIC development keys of the Hardhat/Anvil mnemonic
/// (`test test test test test test test test test test test junk`), accounts 0-3.
/// Published everywhere; worthless on any real chain. Test use only.
pub const PUBLIC_DEV_KEYS: [&str; 4] = [
    "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
];

/// A payer holding one private key.
pub struct Payer {
    key: SecretKey,
    address: Address,
}

fn hex_bytes<const N: usize>(hex: &str) -> [u8; N] {
    let mut out = [0u8; N];
    for (index, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[index * 2..index * 2 + 2], 16).unwrap();
    }
    out
}

impl Payer {
    /// Development account `index` (0-3).
    pub fn dev(index: usize) -> Self {
        Self::from_key(hex_bytes(PUBLIC_DEV_KEYS[index]))
    }

    /// A payer from raw key bytes (e.g. an unfunded throwaway key).
    pub fn from_key(bytes: [u8; 32]) -> Self {
        let key = SecretKey::from_byte_array(bytes).unwrap();
        let public = PublicKey::from_secret_key_global(&key).serialize_uncompressed();
        Self {
            key,
            address: Address::from_raw_public_key(&public[1..]),
        }
    }

    /// The checksummed address.
    pub fn address(&self) -> String {
        self.address.to_checksum(None)
    }

    /// The authorization the official client would make for `offer` at `now`.
    pub fn authorization(
        &self,
        offer: &PaymentRequirements,
        now: u64,
        nonce: u64,
    ) -> Eip3009Authorization {
        let mut nonce_bytes = [0u8; 32];
        nonce_bytes[24..].copy_from_slice(&nonce.to_be_bytes());
        Eip3009Authorization {
            from: self.address(),
            to: offer.pay_to.clone(),
            value: offer.amount,
            valid_after: 0,
            valid_before: now + offer.max_timeout_seconds,
            nonce: B256::from(nonce_bytes).to_string(),
        }
    }

    /// Signs `authorization` under `domain` and wraps it as the payment for `offer`.
    pub fn pay_with_domain(
        &self,
        offer: &PaymentRequirements,
        authorization: Eip3009Authorization,
        domain: &ExactEvmDomain,
    ) -> PaymentPayload {
        let transfer = TransferWithAuthorization {
            from: authorization.from.parse().unwrap(),
            to: authorization.to.parse().unwrap(),
            value: U256::from(authorization.value.units()),
            validAfter: U256::from(authorization.valid_after),
            validBefore: U256::from(authorization.valid_before),
            nonce: authorization.nonce.parse().unwrap(),
        };
        let digest = domain.signing_hash(&transfer);
        let signature = SECP256K1.sign_ecdsa_recoverable(Message::from_digest(digest.0), &self.key);
        let (recovery_id, compact) = signature.serialize_compact();
        let mut raw = compact.to_vec();
        raw.push(27 + u8::try_from(i32::from(recovery_id)).unwrap());
        let payload = ExactEvmPayload {
            signature: format!("0x{}", alloy_primitives::hex::encode(raw)),
            authorization,
        };
        PaymentPayload {
            x402_version: 2,
            resource: Some(ResourceInfo::default()),
            accepted: offer.clone(),
            payload: serde_json::to_value(payload).unwrap(),
            extensions: None,
        }
    }

    /// Signs `authorization` under the domain `offer` names, as clients do.
    pub fn pay(
        &self,
        offer: &PaymentRequirements,
        authorization: Eip3009Authorization,
    ) -> PaymentPayload {
        self.pay_with_domain(offer, authorization, &domain_of(offer))
    }

    /// The `PAYMENT-SIGNATURE` value for `offer` at `now` with `nonce`.
    pub fn header(&self, offer: &PaymentRequirements, now: u64, nonce: u64) -> String {
        codec::encode(&self.pay(offer, self.authorization(offer, now, nonce)))
    }
}

/// The EIP-712 domain an offer names.
pub fn domain_of(offer: &PaymentRequirements) -> ExactEvmDomain {
    ExactEvmDomain::new(
        offer.extra_str("name").unwrap(),
        offer.extra_str("version").unwrap(),
        offer.network.eip155_chain_id().unwrap(),
        offer.asset.parse().unwrap(),
    )
}

/// An amount in atomic units.
pub fn units(n: u128) -> AtomicAmount {
    AtomicAmount::new(n)
}

/// The paid route of the tests.
pub const CHAT: &str = "/v1/chat/completions";
/// The payee: development account 9.
pub const PAY_TO: &str = walletgate::x402::DevLedger::DEV_ACCOUNTS[9];
/// The route's price, 0.002 USD, plus the 0.001 USD fee, in USDC units.
pub const QUOTED_UNITS: u128 = 3000;

/// `POST /v1/chat/completions` at 0.002 USD, paid in Base Sepolia USDC to [`PAY_TO`].
pub fn chat_layer(
    facilitator: impl walletgate::x402::Facilitator,
    clock: walletgate::SharedClock,
) -> walletgate::x402::X402Layer {
    walletgate::x402::X402Layer::builder()
        .payment_option(walletgate::x402::PaymentOption::base_sepolia_usdc(PAY_TO).unwrap())
        .pricing(
            walletgate::x402::PriceTable::by_route()
                .with_usd(format!("POST {CHAT}"), "0.002")
                .unwrap(),
        )
        .facilitator(facilitator)
        .clock(clock)
        .build()
        .unwrap()
}

/// A handler that answers 200 at once.
pub type Answering = tower::util::BoxCloneService<
    http::Request<http_body_util::Full<bytes::Bytes>>,
    http::Response<http_body_util::Full<bytes::Bytes>>,
    std::convert::Infallible,
>;

/// `layer` over a handler that answers 200 `answer` at once.
pub fn answering(layer: &walletgate::x402::X402Layer) -> walletgate::x402::X402<Answering> {
    let inner = tower::service_fn(
        |_request: http::Request<http_body_util::Full<bytes::Bytes>>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                bytes::Bytes::from_static(b"answer"),
            )))
        },
    );
    tower::Layer::layer(layer, tower::util::BoxCloneService::new(inner))
}
