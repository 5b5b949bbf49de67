//! Sign-In with Ethereum (EIP-4361): message, EIP-191 signature, relying-party checks.
//!
//! A wallet proves it controls an address by signing a short text message
//! that names this server. The server:
//!
//! 1. hands out a single-use nonce ([`SiweVerifier::issue_nonce`]);
//! 2. receives the message (as text, or as JSON fields that it turns back into
//!    the exact signed text with [`SiweMessage::from_fields`]) and the signature;
//! 3. checks it with [`SiweVerifier::verify`] or [`SiweVerifier::verify_fields`].
//!
//! The message layout (LF separators, no trailing LF; bracketed lines optional):
//!
//! ```text
//! [scheme://]domain wants you to sign in with your Ethereum account:
//! 0xAddress
//!
//! [statement]
//!
//! URI: https://example.com/login
//! Version: 1
//! Chain ID: 1
//! Nonce: 32891757abc
//! Issued At: 2021-09-30T16:25:24.000Z
//! [Expiration Time: ...]
//! [Not Before: ...]
//! [Request ID: ...]
//! [Resources:
//! - https://example.com/a
//! - ipfs://...]
//! ```
//!
//! [`SiweMessage`] parses this strictly and renders it back byte for byte, so
//! the signature is always checked against exactly what the wallet signed.
//!
//! What [`SiweVerifier`] checks, and why each check is not optional:
//!
//! - the nonce was issued here and is spent on first use, pass or fail
//!   (replay), through a [`NonceStore`] that may be shared between processes;
//! - scheme, domain and URI equal this server's (a message signed for another
//!   site cannot be replayed here);
//! - the chain id is allowed;
//! - `Issued At` is not in the future and not older than a bound,
//!   `Expiration Time` and `Not Before` hold (all with a small clock leeway);
//! - the EIP-191 signature recovers to the message's address. Lowercase and
//!   checksummed addresses are both accepted unless
//!   [`AddressPolicy::ChecksummedOnly`] is chosen; a mixed-case address with
//!   a wrong checksum never is. Contract wallets (EIP-1271) are not supported:
//!   they need an RPC node.
//!
//! Every refusal is a typed [`VerifyError`] whose message says which check
//! failed and never contains the signature.
//!
//! # Example
//!
//! Verifying the published EIP-4361 example message (spruceid's
//! `verification_positive.json`), sent as fields the way the OpenSea SDK does:
//!
//! ```
//! use std::sync::Arc;
//! use walletgate::clock::FakeClock;
//! use walletgate::siwe::{InMemoryNonceStore, NonceStore, SiweMessageFields, SiweVerifier, VerifyError};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // 2022-01-27T17:10:00Z, twenty seconds after the message was issued.
//! let clock = FakeClock::at_unix_secs(1_643_303_400);
//! let nonces = Arc::new(InMemoryNonceStore::new());
//! let verifier = SiweVerifier::builder()
//!     .with_domain("login.xyz")
//!     .with_uri("https://login.xyz")
//!     .allow_chain_id(1)
//!     .with_clock(Arc::new(clock.clone()))
//!     .with_nonce_store(nonces.clone())
//!     .build()?;
//!
//! // In a real server the nonce comes from `verifier.issue_nonce()`; here it is
//! // the one the published example was signed with.
//! nonces.insert("bTyXgcQxn2htgkjJn", 1_643_303_300_000, 1_643_303_900_000).await?;
//!
//! let body = r#"{
//!     "domain": "login.xyz",
//!     "address": "0x9D85ca56217D2bb651b00f15e694EB7E713637D4",
//!     "statement": "Sign-In With Ethereum Example Statement",
//!     "uri": "https://login.xyz",
//!     "version": "1",
//!     "chainId": 1,
//!     "nonce": "bTyXgcQxn2htgkjJn",
//!     "issuedAt": "2022-01-27T17:09:38.578Z",
//!     "expirationTime": "2100-01-07T14:31:43.952Z",
//!     "accountType": "Ethereum"
//! }"#;
//! let signature = "0xdc35c7f8ba2720df052e0092556456127f00f7707eaa8e3bbff7e56774e7f2e05a093cfc9e02964c33d86e8e066e221b7d153d27e5a2e97ccd5ca7d3f2ce06cb1b";
//! let fields: SiweMessageFields = serde_json::from_str(body)?;
//!
//! let signed_in = verifier.verify_fields(&fields, signature).await?;
//! assert_eq!(signed_in.address.to_checksum(None), "0x9D85ca56217D2bb651b00f15e694EB7E713637D4");
//!
//! // The nonce is spent: the same message cannot sign in twice.
//! let replay = verifier.verify_fields(&fields, signature).await;
//! assert!(matches!(replay, Err(VerifyError::NonceAlreadyUsed)));
//!
//! // A fresh nonce for the next sign-in: 17 letters and digits.
//! let nonce = verifier.issue_nonce().await?;
//! assert_eq!(nonce.len(), 17);
//! # Ok(())
//! # }
//! ```

//! With feature `siwe-message` alone (what a signing client needs), only the
//! message, its fields and timestamps are here: no nonces, no recovery, no
//! libsecp256k1. Feature `siwe` adds the verifier.

mod message;
#[cfg(feature = "siwe")]
mod nonce;
mod syntax;
mod timestamp;
#[cfg(feature = "siwe")]
mod verifier;

pub use alloy_primitives::Address;
pub use message::{AddressPolicy, ParseError, SiweMessage, SiweMessageFields};
#[cfg(feature = "siwe")]
pub use nonce::{
    DEFAULT_MAX_NONCES, InMemoryNonceStore, NONCE_LEN, NonceConsumption, NonceStore,
    NonceStoreError, generate_nonce,
};
pub use timestamp::{InvalidTimestamp, Timestamp};
#[cfg(feature = "siwe")]
pub use verifier::{
    ConfigError, DEFAULT_LEEWAY_SECS, DEFAULT_MAX_ISSUED_AGE_SECS, DEFAULT_NONCE_TTL_SECS,
    SiweVerifier, SiweVerifierBuilder, VerifiedSignIn, VerifyError,
};
