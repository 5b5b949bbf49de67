//! The paying side of exact-EVM x402: sign an offer's EIP-3009
//! `TransferWithAuthorization` and encode it as `PAYMENT-SIGNATURE`.
//!
//! A [`Payer`] holds one secp256k1 key. [`Payer::payment_header`] signs an
//! `accepts[]` entry the way the official clients do: a fresh random 32-byte
//! nonce, `validAfter` 0, `validBefore` = now + `maxTimeoutSeconds`, the
//! EIP-712 domain the offer names in `extra`, `v` 27/28 and low `s`. The
//! lower-level steps ([`authorization`](Payer::authorization),
//! [`sign`](Payer::sign)) let a caller choose or change any field first.
//!
//! [`Payer::dev`] uses the public Hardhat/Anvil development keys, which
//! [`DevLedger`](crate::x402::facilitator::DevLedger) funds: for development and tests only.
//!
//! ```
//! use walletgate::x402::{server::PaymentOption, wire::{codec, ExactEvmPayload, PaymentPayload, UsdAmount}};
//! use walletgate::client::payer::Payer;
//!
//! let offer = PaymentOption::base_sepolia_usdc("0x70997970C51812dc3A010C7d01b50e0d17dc79C8")?
//!     .requirements(UsdAmount::from_micros(3000))
//!     .ok_or("not a whole number of units")?;
//! let payer = Payer::dev(0);
//! let header = payer.payment_header(&offer, 1_750_000_000)?;
//! let payment: PaymentPayload = codec::decode(header.as_bytes())?;
//! let evm: ExactEvmPayload = payment.exact_evm().ok_or("not exact-EVM")?;
//! assert_eq!(evm.authorization.from, payer.address());
//! assert_eq!(evm.authorization.valid_before, 1_750_000_000 + offer.max_timeout_seconds);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

use alloy_primitives::{Address, B256, U256};
use secp256k1::{Message, PublicKey, SECP256K1, SecretKey};

use crate::x402::wire::codec;
use crate::x402::wire::eip712::{
    ExactEvmDomain, TransferWithAuthorization, parse_evm_address, prefixed_hex,
};
use crate::x402::wire::types::{
    Eip3009Authorization, ExactEvmPayload, PaymentPayload, PaymentRequired, PaymentRequirements,
    SCHEME_EXACT, SCHEME_UPTO, X402_VERSION,
};
use crate::x402::wire::{UPTO_PROXY_ADDRESS, UptoPayment};

/// Why a payment could not be signed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PayerError {
    /// The key is not a secp256k1 secret key (zero, at least the group order, or not 32 hex bytes).
    InvalidKey,
    /// The offer is not `exact` on an `eip155:` network.
    NotExactEvm,
    /// The offer's `extra` lacks the EIP-712 `name`/`version`.
    MissingDomain,
    /// An address (`asset`, `payTo`, `from`, `to`) or the nonce is not `0x` hex of the right length.
    InvalidField(&'static str),
    /// The system's random source failed.
    Randomness,
    /// The quote has no exact-EVM offer.
    NoExactEvmOffer,
    /// The offer is not `upto` on an `eip155:` network, or names no
    /// `extra.facilitatorAddress` (the witness must name who settles).
    NotUptoEvm,
}

impl fmt::Display for PayerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidKey => f.write_str("not a secp256k1 secret key"),
            Self::NotExactEvm => f.write_str("the offer is not exact-EVM"),
            Self::MissingDomain => f.write_str("the offer names no EIP-712 domain"),
            Self::InvalidField(field) => write!(f, "`{field}` is not valid hex"),
            Self::Randomness => f.write_str("the random source failed"),
            Self::NoExactEvmOffer => f.write_str("the quote has no exact-EVM offer"),
            Self::NotUptoEvm => f.write_str(
                "the offer is not upto on an eip155 network with extra.facilitatorAddress",
            ),
        }
    }
}

impl std::error::Error for PayerError {}

/// The PUBLIC keys of the ten Hardhat/Anvil development accounts (mnemonic
/// `test test … junk`), in the order of
/// [`DevLedger::DEV_ACCOUNTS`](crate::x402::facilitator::DevLedger::DEV_ACCOUNTS). Published
/// everywhere and worthless on any real chain: development and tests only.
pub const DEV_KEYS: [&str; 10] = [
    "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
    "8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    "92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
    "4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
    "dbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
    "2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
];

/// Signs EIP-3009 authorizations with one secp256k1 key.
///
/// `Debug` shows the address only, never the key.
#[derive(Clone)]
pub struct Payer {
    key: SecretKey,
    address: Address,
}

impl fmt::Debug for Payer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Payer")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl Payer {
    /// Development account `index % 10` (see [`DEV_KEYS`]).
    pub fn dev(index: usize) -> Self {
        let key = DEV_KEYS[index % DEV_KEYS.len()];
        // The ten constants are valid keys (a test checks each against its address).
        Self::from_hex_key(key).unwrap_or_else(|_| unreachable!("a public development key"))
    }

    /// A payer from 32 raw key bytes.
    pub fn from_key(bytes: [u8; 32]) -> Result<Self, PayerError> {
        let key = SecretKey::from_byte_array(bytes).map_err(|_| PayerError::InvalidKey)?;
        let public = PublicKey::from_secret_key_global(&key).serialize_uncompressed();
        Ok(Self {
            key,
            address: Address::from_raw_public_key(&public[1..]),
        })
    }

    /// A payer from 64 hex digits, with or without `0x`.
    pub fn from_hex_key(hex: &str) -> Result<Self, PayerError> {
        let hex = hex.trim();
        let prefixed = if hex.starts_with("0x") {
            std::borrow::Cow::Borrowed(hex)
        } else {
            std::borrow::Cow::Owned(format!("0x{hex}"))
        };
        Self::from_key(prefixed_hex::<32>(&prefixed).ok_or(PayerError::InvalidKey)?)
    }

    /// The checksummed address.
    pub fn address(&self) -> String {
        self.address.to_checksum(None)
    }

    /// The authorization for `offer` at `now_unix_secs` with `nonce`:
    /// `validAfter` 0, `validBefore` = now + `maxTimeoutSeconds`, the offer's
    /// amount to its `payTo`.
    pub fn authorization(
        &self,
        offer: &PaymentRequirements,
        now_unix_secs: u64,
        nonce: B256,
    ) -> Eip3009Authorization {
        authorization_for(self.address(), offer, now_unix_secs, nonce)
    }

    /// Signs `authorization` under the EIP-712 domain `offer` names, as the
    /// payment for `offer` (its `accepted` echo).
    pub fn sign(
        &self,
        offer: &PaymentRequirements,
        authorization: Eip3009Authorization,
    ) -> Result<PaymentPayload, PayerError> {
        self.sign_with_domain(offer, authorization, &offer_domain(offer)?)
    }

    /// Signs `authorization` under `domain` (whatever the offer says), as the payment for `offer`.
    pub fn sign_with_domain(
        &self,
        offer: &PaymentRequirements,
        authorization: Eip3009Authorization,
        domain: &ExactEvmDomain,
    ) -> Result<PaymentPayload, PayerError> {
        let digest = transfer_digest(&authorization, domain)?;
        signed_payment(offer, authorization, &self.sign_digest(digest))
    }

    /// The signature of a 32-byte digest, `r ‖ s ‖ v`: libsecp256k1 signs
    /// with low `s`; `v` is 27 + the recovery id, as the chain wants.
    pub fn sign_digest(&self, digest: B256) -> [u8; 65] {
        let signature = SECP256K1.sign_ecdsa_recoverable(Message::from_digest(digest.0), &self.key);
        let (recovery_id, compact) = signature.serialize_compact();
        let mut raw = [0u8; 65];
        raw[..64].copy_from_slice(&compact);
        raw[64] = if i32::from(recovery_id) == 0 { 27 } else { 28 };
        raw
    }

    /// The address, unformatted.
    pub fn address_bytes(&self) -> Address {
        self.address
    }

    /// The payment for `offer` at `now_unix_secs`, with a fresh random nonce.
    pub fn pay(
        &self,
        offer: &PaymentRequirements,
        now_unix_secs: u64,
    ) -> Result<PaymentPayload, PayerError> {
        self.sign(
            offer,
            self.authorization(offer, now_unix_secs, random_nonce()?),
        )
    }

    /// The `upto` payment for `offer` at `now_unix_secs`: a Permit2 permit
    /// of its amount (the ceiling) to x402's `upto` proxy, the witness naming
    /// its `payTo` and `extra.facilitatorAddress`, with a fresh random nonce.
    /// The payer must have approved Permit2 for the token once.
    pub fn pay_upto(
        &self,
        offer: &PaymentRequirements,
        now_unix_secs: u64,
    ) -> Result<PaymentPayload, PayerError> {
        let nonce = U256::from_be_bytes(random_nonce()?.0);
        let permit = upto_permit(self.address, offer, now_unix_secs, nonce)?;
        let chain_id = offer
            .network
            .eip155_chain_id()
            .ok_or(PayerError::NotUptoEvm)?;
        let signature = self.sign_digest(permit.signing_hash(chain_id));
        Ok(upto_payload(offer, &permit, &signature))
    }

    /// The payment for a quote: its first exact-EVM offer (clients sign the
    /// first they can), a fresh random nonce, and the quote's `resource`.
    pub fn pay_quote(
        &self,
        quote: &PaymentRequired,
        now_unix_secs: u64,
    ) -> Result<PaymentPayload, PayerError> {
        let offer = first_exact_evm_offer(quote).ok_or(PayerError::NoExactEvmOffer)?;
        let mut payment = self.pay(offer, now_unix_secs)?;
        payment.resource = Some(quote.resource.clone());
        Ok(payment)
    }

    /// The `PAYMENT-SIGNATURE` value paying `offer` at `now_unix_secs`, with a fresh random nonce.
    pub fn payment_header(
        &self,
        offer: &PaymentRequirements,
        now_unix_secs: u64,
    ) -> Result<String, PayerError> {
        Ok(codec::encode(&self.pay(offer, now_unix_secs)?))
    }

    /// The `PAYMENT-SIGNATURE` value paying `offer` at `now_unix_secs` with a
    /// chosen `nonce` (reproducible fixtures; see [`sequential_nonce`]).
    pub fn header_with_nonce(
        &self,
        offer: &PaymentRequirements,
        now_unix_secs: u64,
        nonce: B256,
    ) -> Result<String, PayerError> {
        let authorization = self.authorization(offer, now_unix_secs, nonce);
        Ok(codec::encode(&self.sign(offer, authorization)?))
    }
}

// The steps of a signature, shared by [`Payer`] and signers that hold their
// key elsewhere (the paying client signs through alloy's `Signer` trait).

/// The first offer of `quote` that is `exact` on an `eip155:` network.
pub fn first_exact_evm_offer(quote: &PaymentRequired) -> Option<&PaymentRequirements> {
    quote
        .accepts
        .iter()
        .find(|offer| offer.scheme == SCHEME_EXACT && offer.network.eip155_chain_id().is_some())
}

/// The authorization `from` pays for `offer` at `now_unix_secs` with `nonce`:
/// `validAfter` 0, `validBefore` = now + `maxTimeoutSeconds`, the offer's
/// amount to its `payTo`.
pub fn authorization_for(
    from: String,
    offer: &PaymentRequirements,
    now_unix_secs: u64,
    nonce: B256,
) -> Eip3009Authorization {
    Eip3009Authorization {
        from,
        to: offer.pay_to.clone(),
        value: offer.amount,
        valid_after: 0,
        valid_before: now_unix_secs.saturating_add(offer.max_timeout_seconds),
        nonce: nonce.to_string(),
    }
}

/// A fresh random 32-byte nonce.
pub fn random_nonce() -> Result<B256, PayerError> {
    let mut nonce = [0u8; 32];
    getrandom::fill(&mut nonce).map_err(|_| PayerError::Randomness)?;
    Ok(B256::from(nonce))
}

/// The EIP-712 domain `offer` names, or why it names none a payer can sign under.
pub fn offer_domain(offer: &PaymentRequirements) -> Result<ExactEvmDomain, PayerError> {
    ExactEvmDomain::for_offer(offer).ok_or_else(|| {
        if offer.scheme != SCHEME_EXACT || offer.network.eip155_chain_id().is_none() {
            PayerError::NotExactEvm
        } else if parse_evm_address(&offer.asset).is_none() {
            PayerError::InvalidField("asset")
        } else {
            PayerError::MissingDomain
        }
    })
}

/// The EIP-712 digest a wallet signs to make `authorization` under `domain`.
pub fn transfer_digest(
    authorization: &Eip3009Authorization,
    domain: &ExactEvmDomain,
) -> Result<B256, PayerError> {
    let address =
        |text: &str, field| parse_evm_address(text).ok_or(PayerError::InvalidField(field));
    let transfer = TransferWithAuthorization {
        from: address(&authorization.from, "from")?,
        to: address(&authorization.to, "to")?,
        value: U256::from(authorization.value.units()),
        validAfter: U256::from(authorization.valid_after),
        validBefore: U256::from(authorization.valid_before),
        nonce: prefixed_hex::<32>(&authorization.nonce)
            .map(B256::from)
            .ok_or(PayerError::InvalidField("nonce"))?,
    };
    Ok(domain.signing_hash(&transfer))
}

/// The payment for `offer` (its `accepted` echo) carrying `authorization` and
/// its 65-byte signature `r ‖ s ‖ v` (`v` 27/28) over [`transfer_digest`].
pub fn signed_payment(
    offer: &PaymentRequirements,
    authorization: Eip3009Authorization,
    signature: &[u8; 65],
) -> Result<PaymentPayload, PayerError> {
    let payload = ExactEvmPayload {
        signature: format!("0x{}", alloy_primitives::hex::encode(signature)),
        authorization,
    };
    Ok(PaymentPayload {
        x402_version: X402_VERSION,
        resource: None,
        accepted: offer.clone(),
        payload: serde_json::to_value(payload).map_err(|_| PayerError::InvalidField("payload"))?,
        extensions: None,
    })
}

/// The Permit2 permit `from` signs for an `upto` `offer` at `now_unix_secs`
/// with Permit2 `nonce`: the offer's amount as the ceiling, x402's proxy as
/// spender, `deadline` = now + `maxTimeoutSeconds`, `validAfter` 0.
pub fn upto_permit(
    from: Address,
    offer: &PaymentRequirements,
    now_unix_secs: u64,
    nonce: U256,
) -> Result<UptoPayment, PayerError> {
    if offer.scheme != SCHEME_UPTO || offer.network.eip155_chain_id().is_none() {
        return Err(PayerError::NotUptoEvm);
    }
    let facilitator = offer
        .extra_str("facilitatorAddress")
        .and_then(parse_evm_address)
        .ok_or(PayerError::NotUptoEvm)?;
    Ok(UptoPayment {
        from,
        token: parse_evm_address(&offer.asset).ok_or(PayerError::InvalidField("asset"))?,
        ceiling: offer.amount.units(),
        spender: UPTO_PROXY_ADDRESS,
        nonce,
        deadline: now_unix_secs.saturating_add(offer.max_timeout_seconds),
        to: parse_evm_address(&offer.pay_to).ok_or(PayerError::InvalidField("payTo"))?,
        facilitator,
        valid_after: 0,
        signature: Vec::new(),
    })
}

/// The `upto` payment of `permit` signed with `signature`, for `offer`
/// (numbers as decimal strings, addresses checksummed, as the official client writes them).
pub fn upto_payload(
    offer: &PaymentRequirements,
    permit: &UptoPayment,
    signature: &[u8],
) -> PaymentPayload {
    let address = |address: Address| address.to_checksum(None);
    PaymentPayload {
        x402_version: X402_VERSION,
        resource: None,
        accepted: offer.clone(),
        payload: serde_json::json!({
            "signature": format!("0x{}", alloy_primitives::hex::encode(signature)),
            "permit2Authorization": {
                "from": address(permit.from),
                "permitted": {"token": address(permit.token), "amount": permit.ceiling.to_string()},
                "spender": address(permit.spender),
                "nonce": permit.nonce.to_string(),
                "deadline": permit.deadline.to_string(),
                "witness": {
                    "to": address(permit.to),
                    "facilitator": address(permit.facilitator),
                    "validAfter": permit.valid_after.to_string(),
                },
            },
        }),
        extensions: None,
    }
}

/// Nonce `n` (big-endian in the last 8 bytes): distinct, reproducible nonces
/// for tests and pre-signed fixtures. Real payers use [`Payer::pay`]'s random ones.
pub fn sequential_nonce(n: u64) -> B256 {
    let mut nonce = [0u8; 32];
    nonce[24..].copy_from_slice(&n.to_be_bytes());
    B256::from(nonce)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::FakeClock;
    use crate::x402::facilitator::{DevLedger, LocalEvmFacilitator};
    use crate::x402::facilitator::{Facilitator, FacilitatorRequest};
    use crate::x402::server::PaymentOption;
    use crate::x402::wire::{AtomicAmount, Network};

    const NOW: u64 = 1_750_000_000;

    fn offer() -> PaymentRequirements {
        PaymentOption::base_sepolia_usdc(DevLedger::DEV_ACCOUNTS[9])
            .unwrap()
            .requirements_for_amount(AtomicAmount::new(3000))
    }

    #[test]
    fn dev_keys_are_the_dev_accounts() {
        for (index, account) in DevLedger::DEV_ACCOUNTS.iter().enumerate() {
            assert_eq!(Payer::dev(index).address(), *account);
            assert_eq!(
                Payer::from_hex_key(&format!("0x{}", DEV_KEYS[index]))
                    .unwrap()
                    .address(),
                *account
            );
        }
        assert_eq!(Payer::dev(10).address(), DevLedger::DEV_ACCOUNTS[0]);
        assert_eq!(
            Payer::from_key([0; 32]).unwrap_err(),
            PayerError::InvalidKey
        );
        assert_eq!(
            Payer::from_hex_key("0x12").unwrap_err(),
            PayerError::InvalidKey
        );
        let debug = format!("{:?}", Payer::dev(0));
        assert!(!debug.contains(DEV_KEYS[0]), "{debug}");
    }

    #[tokio::test]
    async fn a_signed_offer_verifies_and_settles_locally() {
        let ledger = Arc::new(DevLedger::new());
        let facilitator =
            LocalEvmFacilitator::new(ledger.clone(), Arc::new(FakeClock::at_unix_secs(NOW)));
        let header = Payer::dev(1).payment_header(&offer(), NOW).unwrap();
        let payment: PaymentPayload = codec::decode(header.as_bytes()).unwrap();
        let evm = payment.exact_evm().unwrap();
        assert_eq!(evm.authorization.valid_before, NOW + 300);
        assert_eq!(evm.authorization.to, offer().pay_to);
        let request = FacilitatorRequest::new(payment, offer());
        let verdict = facilitator.verify(&request).await.unwrap();
        assert!(verdict.is_valid, "{verdict:?}");
        assert!(facilitator.settle(&request).await.unwrap().success);
        assert_eq!(ledger.settlements(), 1);
    }

    #[test]
    fn random_nonces_differ_and_sequential_ones_are_reproducible() {
        let payer = Payer::dev(0);
        let nonce = |header: String| {
            let payment: PaymentPayload = codec::decode(header.as_bytes()).unwrap();
            payment.exact_evm().unwrap().authorization.nonce
        };
        assert_ne!(
            nonce(payer.payment_header(&offer(), NOW).unwrap()),
            nonce(payer.payment_header(&offer(), NOW).unwrap())
        );
        let fixed = payer
            .header_with_nonce(&offer(), NOW, sequential_nonce(7))
            .unwrap();
        assert_eq!(
            fixed,
            payer
                .header_with_nonce(&offer(), NOW, sequential_nonce(7))
                .unwrap()
        );
        assert!(nonce(fixed).ends_with("0000000000000007"));
    }

    #[test]
    fn a_quote_is_paid_with_its_first_evm_offer_and_resource() {
        let mut solana = offer();
        solana.network = Network::parse("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp").unwrap();
        let mut quote = PaymentRequired {
            x402_version: 2,
            error: None,
            resource: crate::x402::wire::ResourceInfo {
                url: "http://localhost/v1/chat/completions".into(),
                ..Default::default()
            },
            accepts: vec![solana.clone(), offer()],
            extensions: None,
        };
        let payment = Payer::dev(0).pay_quote(&quote, NOW).unwrap();
        assert_eq!(payment.accepted, offer());
        assert_eq!(payment.resource.as_ref(), Some(&quote.resource));
        quote.accepts = vec![solana];
        assert_eq!(
            Payer::dev(0).pay_quote(&quote, NOW).unwrap_err(),
            PayerError::NoExactEvmOffer
        );
    }

    #[test]
    fn offers_it_cannot_sign_are_refused() {
        let payer = Payer::dev(0);
        let mut solana = offer();
        solana.network = Network::parse("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp").unwrap();
        assert_eq!(
            payer.pay(&solana, NOW).unwrap_err(),
            PayerError::NotExactEvm
        );
        let mut no_domain = offer();
        no_domain.extra.clear();
        assert_eq!(
            payer.pay(&no_domain, NOW).unwrap_err(),
            PayerError::MissingDomain
        );
        let mut bad_pay_to = offer();
        bad_pay_to.pay_to = "0x12".into();
        assert_eq!(
            payer.pay(&bad_pay_to, NOW).unwrap_err(),
            PayerError::InvalidField("to")
        );
    }
}
