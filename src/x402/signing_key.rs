//! A secp256k1 private key the server signs with (a settler's transactions,
//! offers and receipts): read from a file only its owner may read, shown
//! by its address only.

use std::fmt;
use std::path::Path;

use alloy_primitives::{Address, B256, Signature, U256};
use secp256k1::{Message, PublicKey, SECP256K1, SecretKey};

use crate::x402::wire::eip712::prefixed_hex;

/// Why a key could not be read (never its contents).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// The file could not be used: why.
    File(String),
    /// Not a secp256k1 private key.
    Invalid,
}

/// A private key and its address. `Debug` shows the address only.
#[derive(Clone)]
pub(crate) struct SigningKey {
    key: SecretKey,
    address: Address,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// The key in `path`: 64 hex digits, `0x` optional, surrounding
    /// whitespace (a trailing newline) ignored. On Unix the file must not be
    /// readable by group or others (mode 0600 or stricter).
    pub(crate) fn from_file(path: &Path) -> Result<Self, KeyError> {
        let metadata =
            std::fs::metadata(path).map_err(|error| KeyError::File(error.to_string()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(KeyError::File(format!(
                    "mode {mode:o} lets others read it: chmod 600 (or 400) the file"
                )));
            }
        }
        #[cfg(not(unix))]
        let _ = metadata;
        let text =
            std::fs::read_to_string(path).map_err(|error| KeyError::File(error.to_string()))?;
        Self::from_hex(&text).map_err(|_| {
            KeyError::File("not a secp256k1 private key (64 hex digits, 0x optional)".into())
        })
    }

    /// A key from 64 hex digits, with or without `0x`.
    pub(crate) fn from_hex(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        let digits = text.strip_prefix("0x").unwrap_or(text);
        let bytes = prefixed_hex::<32>(&format!("0x{digits}")).ok_or(KeyError::Invalid)?;
        let key = SecretKey::from_byte_array(bytes).map_err(|_| KeyError::Invalid)?;
        let public = PublicKey::from_secret_key_global(&key).serialize_uncompressed();
        Ok(Self {
            key,
            address: Address::from_raw_public_key(&public[1..]),
        })
    }

    /// The address the key signs as.
    pub(crate) fn address(&self) -> Address {
        self.address
    }

    /// The signature of `hash` (low `s`, the parity bit).
    pub(crate) fn sign_hash(&self, hash: B256) -> Signature {
        let signature = SECP256K1.sign_ecdsa_recoverable(Message::from_digest(hash.0), &self.key);
        let (recovery_id, compact) = signature.serialize_compact();
        Signature::new(
            U256::from_be_slice(&compact[..32]),
            U256::from_be_slice(&compact[32..]),
            i32::from(recovery_id) == 1,
        )
    }
}
