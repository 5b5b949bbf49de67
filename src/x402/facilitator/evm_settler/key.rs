//! The settler's private key: read from a file only its owner may read,
//! never printed.

use std::fmt;
use std::path::Path;

use alloy_primitives::{Address, B256, Signature, U256};
use secp256k1::{Message, PublicKey, SECP256K1, SecretKey};

use super::SettlerError;
use crate::x402::wire::eip712::prefixed_hex;

/// The key that signs the settler's transactions (and pays their gas).
///
/// Its `Debug` shows the address only.
#[derive(Clone)]
pub struct SettlerKey {
    key: SecretKey,
    address: Address,
}

impl fmt::Debug for SettlerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SettlerKey")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl SettlerKey {
    /// The key in `path`: 64 hex digits, `0x` optional, surrounding
    /// whitespace (a trailing newline) ignored. On Unix the file must not be
    /// readable by group or others (mode 0600 or stricter).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, SettlerError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let metadata = std::fs::metadata(path).map_err(|error| SettlerError::KeyFile {
            path: shown.clone(),
            reason: error.to_string(),
        })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(SettlerError::KeyFile {
                    path: shown,
                    reason: format!(
                        "mode {mode:o} lets others read it: chmod 600 (or 400) the file"
                    ),
                });
            }
        }
        #[cfg(not(unix))]
        let _ = metadata;
        let text = std::fs::read_to_string(path).map_err(|error| SettlerError::KeyFile {
            path: shown.clone(),
            reason: error.to_string(),
        })?;
        Self::from_hex(&text).map_err(|_| SettlerError::KeyFile {
            path: shown,
            reason: "not a secp256k1 private key (64 hex digits, 0x optional)".into(),
        })
    }

    /// A key from 64 hex digits, with or without `0x`.
    pub fn from_hex(text: &str) -> Result<Self, SettlerError> {
        let text = text.trim();
        let digits = text.strip_prefix("0x").unwrap_or(text);
        let bytes = prefixed_hex::<32>(&format!("0x{digits}")).ok_or(SettlerError::InvalidKey)?;
        let key = SecretKey::from_byte_array(bytes).map_err(|_| SettlerError::InvalidKey)?;
        let public = PublicKey::from_secret_key_global(&key).serialize_uncompressed();
        Ok(Self {
            key,
            address: Address::from_raw_public_key(&public[1..]),
        })
    }

    /// The settler's address: the transactions' sender.
    pub fn address(&self) -> Address {
        self.address
    }

    /// The signature of a transaction's signing hash (low `s`, the parity bit).
    pub(super) fn sign_hash(&self, hash: B256) -> Signature {
        let signature = SECP256K1.sign_ecdsa_recoverable(Message::from_digest(hash.0), &self.key);
        let (recovery_id, compact) = signature.serialize_compact();
        Signature::new(
            U256::from_be_slice(&compact[..32]),
            U256::from_be_slice(&compact[32..]),
            i32::from(recovery_id) == 1,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANVIL_1: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";

    #[test]
    fn hex_with_or_without_prefix_and_newline() {
        let key = SettlerKey::from_hex(&format!("{ANVIL_1}\n")).unwrap();
        assert_eq!(
            key.address().to_checksum(None),
            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
        );
        let bare = SettlerKey::from_hex(ANVIL_1.trim_start_matches("0x")).unwrap();
        assert_eq!(bare.address(), key.address());
        assert!(SettlerKey::from_hex("0x12").is_err());
        assert!(SettlerKey::from_hex(&"00".repeat(32)).is_err());
    }

    #[test]
    fn debug_names_the_address_only() {
        let key = SettlerKey::from_hex(ANVIL_1).unwrap();
        let shown = format!("{key:?}");
        assert!(shown.contains("0x70997970"));
        assert!(!shown.to_lowercase().contains(&ANVIL_1[2..10]));
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_others_may_read_is_refused_without_echoing_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("walletgate-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("settler.key");
        std::fs::write(&path, format!("{ANVIL_1}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let refused = SettlerKey::from_file(&path).unwrap_err().to_string();
        assert!(refused.contains("chmod 600"), "{refused}");
        assert!(!refused.contains(&ANVIL_1[2..10]));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(SettlerKey::from_file(&path).is_ok());
        std::fs::write(&path, "not a key").unwrap();
        let refused = SettlerKey::from_file(&path).unwrap_err().to_string();
        assert!(refused.contains("not a secp256k1 private key"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
