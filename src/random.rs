//! Random text from the operating system's generator, for nonces, tokens
//! and session ids; the checksummed secret format of PATs and API keys.

/// The base62 alphabet: digits, upper-case, lower-case letters.
pub(crate) const BASE62: &[u8; 62] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// `len` uniformly random base62 characters.
pub(crate) fn base62(len: usize) -> Result<String, getrandom::Error> {
    let mut out = String::with_capacity(len);
    let mut buffer = [0u8; 64];
    while out.len() < len {
        getrandom::fill(&mut buffer)?;
        // Bytes of 248 (= 4 * 62) and above are dropped: they would bias the
        // first characters of the alphabet.
        for byte in buffer.into_iter().filter(|&byte| byte < 248) {
            if out.len() == len {
                break;
            }
            out.push(char::from(BASE62[usize::from(byte % 62)]));
        }
    }
    Ok(out)
}

/// Base62 characters of a checksum (62^6 > 2^32).
#[cfg(any(feature = "tokens", feature = "api-key"))]
const CHECKSUM_LEN: usize = 6;

/// `prefix`, `random_len` random base62 characters, then the base62 CRC32
/// of both: the shape GitHub's tokens have, so a secret scanner recognises a
/// leaked one offline (prefix and checksum) without a database.
#[cfg(any(feature = "tokens", feature = "api-key"))]
pub(crate) fn checksummed_secret(
    prefix: &str,
    random_len: usize,
) -> Result<String, getrandom::Error> {
    let mut secret = String::from(prefix);
    secret.push_str(&base62(random_len)?);
    secret.push_str(&checksum(&secret));
    Ok(secret)
}

/// Whether `text` has the shape [`checksummed_secret`] gives and its checksum
/// holds: "one of ours", not "valid".
#[cfg(any(feature = "tokens", feature = "api-key"))]
pub(crate) fn is_checksummed_secret(text: &str, prefix: &str, random_len: usize) -> bool {
    let Some(rest) = text.strip_prefix(prefix) else {
        return false;
    };
    if rest.len() != random_len + CHECKSUM_LEN || !rest.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return false;
    }
    let (body, sum) = text.split_at(text.len() - CHECKSUM_LEN);
    checksum(body) == sum
}

/// Base62 CRC32 of `text`, left-padded with `0` to six characters.
#[cfg(any(feature = "tokens", feature = "api-key"))]
fn checksum(text: &str) -> String {
    let mut value = crc32fast::hash(text.as_bytes());
    let mut digits = [b'0'; CHECKSUM_LEN];
    for slot in digits.iter_mut().rev() {
        *slot = BASE62[(value % 62) as usize];
        value /= 62;
    }
    digits.iter().map(|&byte| char::from(byte)).collect()
}

#[cfg(test)]
mod tests {
    #[cfg(any(feature = "tokens", feature = "api-key"))]
    #[test]
    fn checksummed_secrets_catch_every_single_character_change() {
        let secret = super::checksummed_secret("wg_x_", 30).unwrap();
        assert!(super::is_checksummed_secret(&secret, "wg_x_", 30));
        assert!(!super::is_checksummed_secret(&secret, "wg_y_", 30));
        for index in "wg_x_".len()..secret.len() {
            let mut changed = secret.clone().into_bytes();
            changed[index] = if changed[index] == b'a' { b'b' } else { b'a' };
            let changed = String::from_utf8(changed).unwrap();
            assert!(
                !super::is_checksummed_secret(&changed, "wg_x_", 30),
                "{index}"
            );
        }
    }

    #[test]
    fn base62_has_the_asked_length_and_alphabet() {
        for len in [0, 1, 17, 200] {
            let text = super::base62(len).unwrap();
            assert_eq!(text.len(), len);
            assert!(text.bytes().all(|byte| byte.is_ascii_alphanumeric()));
        }
        assert_ne!(super::base62(32).unwrap(), super::base62(32).unwrap());
    }
}
