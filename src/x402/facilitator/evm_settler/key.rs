//! The settler's private key: read from a file only its owner may read,
//! never printed (the crate's one signing key type, named the settler's).

use std::fmt;
use std::path::Path;

use alloy_primitives::{Address, B256, Signature};

use super::error::SettlerError;
use crate::x402::signing_key::{KeyError, SigningKey};

/// The key that signs the settler's transactions (and pays their gas).
///
/// Its `Debug` shows the address only.
#[derive(Clone)]
pub struct SettlerKey {
    key: SigningKey,
}

impl fmt::Debug for SettlerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SettlerKey")
            .field("address", &self.key.address())
            .finish_non_exhaustive()
    }
}

impl SettlerKey {
    /// The key in `path`: 64 hex digits, `0x` optional, surrounding
    /// whitespace (a trailing newline) ignored. On Unix the file must not be
    /// readable by group or others (mode 0600 or stricter).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, SettlerError> {
        let path = path.as_ref();
        let key = SigningKey::from_file(path).map_err(|error| SettlerError::KeyFile {
            path: path.display().to_string(),
            reason: match error {
                KeyError::File(reason) => reason,
                KeyError::Invalid => "not a secp256k1 private key".into(),
            },
        })?;
        Ok(Self { key })
    }

    /// A key from 64 hex digits, with or without `0x`.
    pub fn from_hex(text: &str) -> Result<Self, SettlerError> {
        let key = SigningKey::from_hex(text).map_err(|_| SettlerError::InvalidKey)?;
        Ok(Self { key })
    }

    /// The settler's address: the transactions' sender.
    pub fn address(&self) -> Address {
        self.key.address()
    }

    /// The signature of a transaction's signing hash (low `s`, the parity bit).
    pub(super) fn sign_hash(&self, hash: B256) -> Signature {
        self.key.sign_hash(hash)
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
