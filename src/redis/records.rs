//! How the token backends write digests, wallets and numbers into Redis and
//! read them back.

use std::collections::HashMap;
use std::str::FromStr;

use alloy_primitives::{Address, hex};

use crate::store::StoreError;
use crate::tokens::SecretDigest;

/// A Redis hash as `HGETALL` gives it.
pub(super) type Fields = HashMap<String, String>;

/// Lowercase hex of a digest: the id part of its keys.
pub(super) fn digest_hex(digest: &SecretDigest) -> String {
    hex::encode(digest.as_bytes())
}

/// Lowercase `0x` hex of a wallet: the id part of its keys.
pub(super) fn wallet_text(wallet: Address) -> String {
    hex::encode_prefixed(wallet.as_slice())
}

/// A stored record that does not read back (another writer, or a corrupted key).
pub(super) fn malformed(what: &'static str) -> StoreError {
    StoreError::new(what)
}

/// Field `name` of `fields`, parsed.
pub(super) fn field<T: FromStr>(
    fields: &Fields,
    name: &str,
    what: &'static str,
) -> Result<T, StoreError> {
    fields
        .get(name)
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| malformed(what))
}

/// Optional field `name` of `fields`, parsed when present.
pub(super) fn optional_field<T: FromStr>(
    fields: &Fields,
    name: &str,
    what: &'static str,
) -> Result<Option<T>, StoreError> {
    fields
        .get(name)
        .map(|text| text.parse().map_err(|_| malformed(what)))
        .transpose()
}

/// Field `name` of `fields` as a digest written by [`digest_hex`].
pub(super) fn digest_field(
    fields: &Fields,
    name: &str,
    what: &'static str,
) -> Result<SecretDigest, StoreError> {
    fields
        .get(name)
        .and_then(|text| digest_from_hex(text))
        .ok_or_else(|| malformed(what))
}

/// A digest written by [`digest_hex`].
pub(super) fn digest_from_hex(text: &str) -> Option<SecretDigest> {
    let bytes: [u8; 32] = hex::decode(text).ok()?.try_into().ok()?;
    Some(SecretDigest::from_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_and_wallets_read_back() {
        let digest = SecretDigest::of("a secret");
        assert_eq!(digest_from_hex(&digest_hex(&digest)), Some(digest));
        assert_eq!(digest_from_hex("00"), None);
        let wallet: Address = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
            .parse()
            .unwrap();
        let text = wallet_text(wallet);
        assert_eq!(text, "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266");
        assert_eq!(text.parse::<Address>().unwrap(), wallet);
    }

    #[test]
    fn missing_or_unreadable_fields_are_store_errors() {
        let fields: Fields = [("n".to_owned(), "x".to_owned())].into_iter().collect();
        assert!(field::<u64>(&fields, "n", "bad").is_err());
        assert!(field::<u64>(&fields, "missing", "bad").is_err());
        assert_eq!(
            optional_field::<u64>(&fields, "missing", "bad").unwrap(),
            None
        );
        assert!(optional_field::<u64>(&fields, "n", "bad").is_err());
    }
}
