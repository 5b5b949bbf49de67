#![doc = include_str!("../README.md")]
// `doc_cfg` badges ("Available on crate feature ... only") on docs.rs; rustdoc
// infers them from `#[cfg]` since `doc_auto_cfg` was folded into `doc_cfg`.
#![cfg_attr(docsrs, feature(doc_cfg))]

/// `get_ref`, `get_mut` and `into_inner` for a service whose wrapped service
/// is its private `inner` field (tower-http's `define_inner_service_accessors`).
// Unused when no layer feature is compiled in.
#[allow(unused_macros)]
macro_rules! define_inner_service_accessors {
    () => {
        /// Gets a reference to the inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// Gets a mutable reference to the inner service.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// Consumes `self`, returning the inner service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}

/// `impl Seam for Arc<T>` in which every method hands the call to `T`, so a
/// shared store, check or facilitator is one too: written as the trait's name
/// and its methods' signatures, each ending in `;`.
// Unused when no seam's feature is compiled in.
#[allow(unused_macros)]
macro_rules! forward_to_arc {
    ($seam:ident { $(
        fn $name:ident $(<$($lifetime:lifetime),+>)?
            (&$($self_lifetime:lifetime)? self $(, $arg:ident: $ty:ty)* $(,)?) $(-> $ret:ty)?;
    )+ }) => {
        impl<T: $seam + ?Sized> $seam for std::sync::Arc<T> {
            $(
                fn $name $(<$($lifetime),+>)? (&$($self_lifetime)? self $(, $arg: $ty)*) $(-> $ret)? {
                    (**self).$name($($arg),*)
                }
            )+
        }
    };
}

// First, so the `trace_*` macros are in scope in every module below.
#[macro_use]
mod trace;

#[cfg(feature = "api-key")]
pub mod api_key;
pub mod body;
// The payer (`client::payer`) comes with `x402`: its tests, benches and
// examples sign payments without the paying client.
#[cfg(any(feature = "client-pay", feature = "client-wallet", feature = "x402"))]
pub mod client;
pub mod clock;
pub mod envelope;
#[cfg(feature = "free-tier")]
pub mod free_tier;
pub mod gateway;
pub mod metrics;
#[cfg(any(feature = "siwe", feature = "tokens", feature = "api-key"))]
mod random;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "siwe-message")]
pub mod siwe;
pub mod store;
#[cfg(feature = "rustls")]
pub mod tls;
#[cfg(feature = "tokens")]
pub mod tokens;
#[cfg(feature = "gateway")]
pub mod upstream;
#[cfg(feature = "wallet-jwt")]
pub mod wallet_jwt;
#[cfg(feature = "x402")]
pub mod x402;

/// An error and its sources joined with `: `. A hyper client error says only
/// `client error (Connect)` at the top; the cause (connection refused, a TLS
/// certificate that is not trusted) is further down the chain.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // An io::Error shows its inner error's text, then yields that
        // error's own source: skip the repeat.
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use super::error_chain;

    #[test]
    fn error_chain_names_the_cause_once() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("client error (Connect)")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let error = Outer(std::io::Error::other(
            "invalid peer certificate: UnknownIssuer",
        ));
        assert_eq!(
            error_chain(&error),
            "client error (Connect): invalid peer certificate: UnknownIssuer"
        );
    }
}
