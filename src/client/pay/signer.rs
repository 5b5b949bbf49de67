//! Signing an offer through alloy's [`Signer`] trait.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use alloy_signer::Signer;

use crate::client::payer::PayerError;
use crate::client::payer::{
    authorization_for, offer_domain, random_nonce, signed_payment, transfer_digest, upto_payload,
    upto_permit,
};
use crate::x402::wire::eip712::{DomainCache, parse_evm_address};
use crate::x402::wire::{
    ExactEvmDomain, PaymentPayload, PaymentRequirements, ResourceInfo, SCHEME_EXACT, SCHEME_UPTO,
    TokenId, codec,
};

/// Why an offer could not be signed.
#[derive(Debug)]
#[non_exhaustive]
pub enum SignError {
    /// The offer cannot be turned into an EIP-3009 authorization.
    Offer(PayerError),
    /// The signer refused or failed (its message; a signer never puts its key in one).
    Signer(String),
}

impl fmt::Display for SignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Offer(error) => write!(f, "cannot sign the offer: {error}"),
            Self::Signer(detail) => write!(f, "the signer failed: {detail}"),
        }
    }
}

impl std::error::Error for SignError {}

/// A shared alloy signer and the count of signatures it made for the client.
///
/// `Debug` shows the address only.
#[derive(Clone)]
pub struct PaymentSigner {
    signer: Arc<dyn Signer + Send + Sync>,
    address: String,
    signatures: Arc<AtomicU64>,
    /// EIP-712 domains of the offers signed (a separator is four hashes).
    domains: Arc<DomainCache>,
}

impl fmt::Debug for PaymentSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PaymentSigner")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl PaymentSigner {
    /// Wraps `signer` (a `PrivateKeySigner`, a keystore or a KMS signer).
    pub fn new(signer: impl Signer + Send + Sync + 'static) -> Self {
        let address = signer.address().to_checksum(None);
        Self {
            signer: Arc::new(signer),
            address,
            signatures: Arc::new(AtomicU64::new(0)),
            domains: Arc::default(),
        }
    }

    /// The checksummed address that pays.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Signatures made so far through this signer and its clones.
    pub fn signatures(&self) -> u64 {
        self.signatures.load(Ordering::Relaxed)
    }

    /// `message` signed per EIP-191 (`personal_sign`), as `0x` and hex;
    /// `None` if the signer refused.
    pub(crate) async fn sign_message(&self, message: &[u8]) -> Option<String> {
        let signature = self.signer.sign_message(message).await.ok()?;
        Some(format!(
            "0x{}",
            alloy_primitives::hex::encode(signature.as_bytes())
        ))
    }

    /// The `PAYMENT-SIGNATURE` value paying `offer` at `now_unix_secs`: an
    /// EIP-3009 authorization with a fresh random nonce, signed under the
    /// domain the offer names, echoing `resource`.
    pub async fn payment_header(
        &self,
        offer: &PaymentRequirements,
        resource: Option<&ResourceInfo>,
        now_unix_secs: u64,
    ) -> Result<String, SignError> {
        let payment = self.sign(offer, now_unix_secs).await?;
        let payment = PaymentPayload {
            resource: resource.cloned(),
            ..payment
        };
        Ok(codec::encode(&payment))
    }

    /// The `Authorization` value answering an MPP `evm`/`charge`
    /// `challenge` (its offer `charge`): an EIP-3009 authorization of exactly
    /// the amount to the recipient, nonce keccak256(id ‖ realm), valid until
    /// the challenge expires.
    pub(crate) async fn mpp_credential(
        &self,
        challenge: &super::mpp::Challenge,
        charge: &super::mpp::Charge,
    ) -> Result<String, SignError> {
        let mut authorization =
            authorization_for(self.address.clone(), &charge.offer, 0, challenge.nonce());
        authorization.valid_before = charge.valid_before;
        let signature = self
            .sign_authorization(&charge.offer, &authorization)
            .await?;
        let signature = format!("0x{}", alloy_primitives::hex::encode(signature));
        Ok(super::mpp::credential(
            challenge,
            charge.chain_id,
            &authorization,
            &signature,
        ))
    }

    /// The offer's EIP-712 domain, from the cache when it was seen before.
    fn domain(&self, offer: &PaymentRequirements) -> Result<ExactEvmDomain, PayerError> {
        let named = (
            offer.extra_str("name"),
            offer.extra_str("version"),
            offer.network.eip155_chain_id(),
            parse_evm_address(&offer.asset),
        );
        match named {
            (Some(name), Some(version), Some(chain_id), Some(asset))
                if offer.scheme == SCHEME_EXACT =>
            {
                Ok(self.domains.get(name, version, TokenId { chain_id, asset }))
            }
            // The uncached path says what is wrong with the offer.
            _ => offer_domain(offer),
        }
    }

    async fn sign(
        &self,
        offer: &PaymentRequirements,
        now_unix_secs: u64,
    ) -> Result<PaymentPayload, SignError> {
        if offer.scheme == SCHEME_UPTO {
            return self.sign_upto(offer, now_unix_secs).await;
        }
        let nonce = random_nonce().map_err(SignError::Offer)?;
        let authorization = authorization_for(self.address.clone(), offer, now_unix_secs, nonce);
        let signature = self.sign_authorization(offer, &authorization).await?;
        signed_payment(offer, authorization, &signature).map_err(SignError::Offer)
    }

    /// `authorization` signed under `offer`'s EIP-712 domain (counted).
    async fn sign_authorization(
        &self,
        offer: &PaymentRequirements,
        authorization: &crate::x402::wire::Eip3009Authorization,
    ) -> Result<[u8; 65], SignError> {
        let domain = self.domain(offer).map_err(SignError::Offer)?;
        let digest = transfer_digest(authorization, &domain).map_err(SignError::Offer)?;
        self.signatures.fetch_add(1, Ordering::Relaxed);
        let signature = self
            .signer
            .sign_hash(&digest)
            .await
            .map_err(|error| SignError::Signer(error.to_string()))?;
        Ok(signature.as_bytes())
    }
}

impl PaymentSigner {
    /// An `upto` offer: a Permit2 permit of its ceiling, with a fresh random
    /// nonce (the payer must have approved Permit2 for the token once).
    async fn sign_upto(
        &self,
        offer: &PaymentRequirements,
        now_unix_secs: u64,
    ) -> Result<PaymentPayload, SignError> {
        let nonce = random_nonce().map_err(SignError::Offer)?;
        let from = self.signer.address();
        let permit = upto_permit(
            from,
            offer,
            now_unix_secs,
            alloy_primitives::U256::from_be_bytes(nonce.0),
        )
        .map_err(SignError::Offer)?;
        let chain_id = offer
            .network
            .eip155_chain_id()
            .ok_or(SignError::Offer(PayerError::NotUptoEvm))?;
        self.signatures.fetch_add(1, Ordering::Relaxed);
        let signature = self
            .signer
            .sign_hash(&permit.signing_hash(chain_id))
            .await
            .map_err(|error| SignError::Signer(error.to_string()))?;
        Ok(upto_payload(offer, &permit, &signature.as_bytes()))
    }
}

/// [`Payer`](crate::client::payer::Payer) is an alloy signer too: libsecp256k1, the
/// fastest in-memory signer (`alloy-signer-local`'s k256 takes about 2.7x as
/// long per signature; see `benches/client.rs`). It carries no chain id.
impl Signer for crate::client::payer::Payer {
    fn sign_hash<'a, 'b, 'c>(
        &'a self,
        hash: &'b alloy_primitives::B256,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = alloy_signer::Result<alloy_signer::Signature>>
                + Send
                + 'c,
        >,
    >
    where
        'a: 'c,
        'b: 'c,
        Self: 'c,
    {
        let raw = self.sign_digest(*hash);
        let signature =
            alloy_signer::Signature::from_raw_array(&raw).map_err(alloy_signer::Error::other);
        Box::pin(std::future::ready(signature))
    }

    fn address(&self) -> alloy_primitives::Address {
        self.address_bytes()
    }

    fn chain_id(&self) -> Option<u64> {
        None
    }

    fn set_chain_id(&mut self, _chain_id: Option<u64>) {}
}

#[cfg(test)]
mod tests {
    use alloy_signer_local::PrivateKeySigner;

    use super::*;
    use crate::client::payer::DEV_KEYS;
    use crate::client::payer::Payer;
    use crate::x402::{facilitator::DevLedger, server::PaymentOption, wire::UsdAmount};

    #[tokio::test]
    async fn an_alloy_signature_is_the_one_the_payer_makes() {
        let offer = PaymentOption::base_sepolia_usdc(DevLedger::DEV_ACCOUNTS[9])
            .unwrap()
            .requirements(UsdAmount::from_micros(3_000))
            .unwrap();
        let key: PrivateKeySigner = DEV_KEYS[1].parse().unwrap();
        let signer = PaymentSigner::new(key);
        assert_eq!(signer.address(), DevLedger::DEV_ACCOUNTS[1]);
        let header = signer
            .payment_header(&offer, None, 1_750_000_000)
            .await
            .unwrap();
        let payment: PaymentPayload = codec::decode(header.as_bytes()).unwrap();
        let evm = payment.exact_evm().unwrap();
        // The same authorization signed by the secp256k1 payer: the same bytes
        // (RFC 6979 signatures are deterministic).
        let nonce = evm.authorization.nonce.parse().unwrap();
        let same = Payer::dev(1)
            .header_with_nonce(&offer, 1_750_000_000, nonce)
            .unwrap();
        let same: PaymentPayload = codec::decode(same.as_bytes()).unwrap();
        assert_eq!(same.exact_evm().unwrap().signature, evm.signature);
        assert_eq!(signer.signatures(), 1);
        // The payer as an alloy signer signs the same bytes.
        let payer = PaymentSigner::new(Payer::dev(1));
        assert_eq!(payer.address(), DevLedger::DEV_ACCOUNTS[1]);
        let digest = alloy_primitives::B256::repeat_byte(7);
        let key: PrivateKeySigner = DEV_KEYS[1].parse().unwrap();
        assert_eq!(
            Signer::sign_hash(&Payer::dev(1), &digest).await.unwrap(),
            Signer::sign_hash(&key, &digest).await.unwrap()
        );
        let debug = format!("{signer:?}");
        assert!(!debug.contains(DEV_KEYS[1]), "{debug}");
    }
}
