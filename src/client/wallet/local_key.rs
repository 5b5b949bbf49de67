//! A signer holding a secp256k1 private key in memory.

use std::fmt;

use alloy_primitives::{Address, B256, ChainId, Signature};
use alloy_signer::Signer;
use alloy_signer::k256::ecdsa::SigningKey;

use super::WalletError;

/// An alloy [`Signer`] over a private key held in memory (what
/// alloy-signer-local's `PrivateKeySigner` does, without its transaction
/// signing dependencies). `Debug` shows the address only.
#[derive(Clone)]
pub struct LocalKeySigner {
    key: SigningKey,
    address: Address,
    chain_id: Option<ChainId>,
}

impl LocalKeySigner {
    /// A signer for the key written as 64 hex digits (`0x` optional,
    /// surrounding whitespace ignored, as in a key file).
    pub fn from_hex(text: &str) -> Result<Self, WalletError> {
        let text = text.trim();
        let text = text.strip_prefix("0x").unwrap_or(text);
        let bytes: [u8; 32] = alloy_primitives::hex::decode_to_array(text)
            .map_err(|_| WalletError::Config("the private key must be 64 hex digits".to_owned()))?;
        let key = SigningKey::from_slice(&bytes)
            .map_err(|_| WalletError::Config("the private key is not a valid key".to_owned()))?;
        let address = Address::from_private_key(&key);
        Ok(Self {
            key,
            address,
            chain_id: None,
        })
    }
}

impl fmt::Debug for LocalKeySigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalKeySigner")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl Signer for LocalKeySigner {
    async fn sign_hash(&self, hash: &B256) -> alloy_signer::Result<Signature> {
        let recoverable = self.key.sign_prehash_recoverable(hash.as_slice())?;
        Ok(Signature::from(recoverable))
    }

    fn address(&self) -> Address {
        self.address
    }

    fn chain_id(&self) -> Option<ChainId> {
        self.chain_id
    }

    fn set_chain_id(&mut self, chain_id: Option<ChainId>) {
        self.chain_id = chain_id;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Public Hardhat/Anvil development key #0.
    const DEV_KEY_0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

    #[tokio::test]
    async fn signs_eip191_messages_that_recover_to_its_address() {
        let signer = LocalKeySigner::from_hex(&format!(" {DEV_KEY_0}\n")).unwrap();
        assert_eq!(
            signer.address().to_checksum(None),
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
        );
        let signature = signer.sign_message(b"hello").await.unwrap();
        let recovered = signature.recover_address_from_msg(b"hello").unwrap();
        assert_eq!(recovered, signer.address());
        assert!(!format!("{signer:?}").contains(&DEV_KEY_0[2..]));
    }

    #[test]
    fn refuses_malformed_keys() {
        assert!(LocalKeySigner::from_hex("0x1234").is_err());
        assert!(LocalKeySigner::from_hex(&"0".repeat(64)).is_err());
    }
}
