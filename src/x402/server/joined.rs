//! Short keys joined from parts without a heap allocation.

/// Joins `parts` into a buffer on the stack and hands it to `then`
/// (mutable, e.g. to lowercase it); past `STACK_BYTES` the join is a `String`.
/// Keys built per request (a route's price key, an authorization's key) are
/// short: the common case allocates nothing.
pub(crate) fn with_joined<R>(parts: &[&str], then: impl FnOnce(&mut str) -> R) -> R {
    const STACK_BYTES: usize = 256;
    let len: usize = parts.iter().map(|part| part.len()).sum();
    let mut stack = [0u8; STACK_BYTES];
    let Some(joined) = stack.get_mut(..len) else {
        return then(&mut parts.concat());
    };
    let mut rest = &mut joined[..];
    for part in parts {
        let (head, tail) = rest.split_at_mut(part.len());
        head.copy_from_slice(part.as_bytes());
        rest = tail;
    }
    then(std::str::from_utf8_mut(joined).expect("joined strs are UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_joins_read_the_same() {
        let short = with_joined(&["POST", " ", "/v1/chat"], |text| text.to_owned());
        assert_eq!(short, "POST /v1/chat");
        let long_path = "/x".repeat(200);
        let long = with_joined(&["GET", " ", &long_path], |text| {
            text.make_ascii_uppercase();
            text.to_owned()
        });
        assert_eq!(long, format!("GET {}", long_path.to_ascii_uppercase()));
    }
}
