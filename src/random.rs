//! Random text from the operating system's generator, for nonces, tokens
//! and session ids.

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

#[cfg(test)]
mod tests {
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
