//! The client's error classes (specification 7 B rule 5): a payment failed,
//! the API answered an error, or the network failed.

use std::fmt;

use bytes::Bytes;
use http::StatusCode;

use super::mpp::Unsupported;
use super::policy::Refusal;
use super::signer::SignError;
use crate::envelope::ErrorCode;

/// A boxed transport error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the client tried before it gave up: every retry is counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempts {
    /// Requests sent.
    pub requests: u32,
    /// Payments signed (at most one, two after a `PAYMENT_BLOCKHASH_STALE` re-sign).
    pub signatures: u32,
    /// Resends of the same payment after `PAYMENT_VERIFICATION_UNAVAILABLE`.
    pub verification_retries: u32,
    /// Waits on `Retry-After` (429 / 503).
    pub retry_after_waits: u32,
    /// Failovers to another provider's model.
    pub failovers: u32,
    /// Resends of the same payment under its payment identifier after a
    /// transport failure (the server answers a settled one from its store).
    pub transport_resends: u32,
}

impl fmt::Display for Attempts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} request(s), {} signature(s), {} verification retr(ies), {} Retry-After wait(s), {} failover(s)",
            self.requests,
            self.signatures,
            self.verification_retries,
            self.retry_after_waits,
            self.failovers
        )
    }
}

/// Why a payment failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum PaymentErrorKind {
    /// The server refused the payment with a payment code (`PAYMENT_INVALID`,
    /// `PAYMENT_UNFUNDED`, `PAYMENT_REPLAY`, `SETTLEMENT_FAILED`, …).
    Refused(ErrorCode),
    /// The server asked for payment again after a payment was sent: never paid twice.
    RequiredAgain,
    /// The spend controls refused the quote; nothing was signed.
    Policy(Refusal),
    /// The 402 carried no readable quote.
    NoQuote,
    /// The 402 carried only MPP challenges the client does not pay (the
    /// first one's reason); nothing was signed.
    Unsupported(Unsupported),
    /// The offer could not be signed.
    Sign(SignError),
    /// The request body is a stream that cannot be resent; it was not paid for.
    StreamingBody,
    /// The request body is over the client's buffer limit; it was not paid for.
    BodyTooLarge {
        /// The limit, in bytes.
        limit_bytes: usize,
    },
}

/// A payment failed (specification 7 B rule 5: "payment failed").
#[derive(Debug)]
pub struct PaymentError {
    /// What went wrong.
    pub kind: PaymentErrorKind,
    /// The status of the last answer, if there was one.
    pub status: Option<StatusCode>,
    /// What the client tried.
    pub attempts: Attempts,
}

impl PaymentError {
    /// The server's payment code, if the server refused the payment.
    pub fn code(&self) -> Option<ErrorCode> {
        match self.kind {
            PaymentErrorKind::Refused(code) => Some(code),
            _ => None,
        }
    }
}

impl fmt::Display for PaymentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("payment failed: ")?;
        match &self.kind {
            PaymentErrorKind::Refused(ErrorCode::PaymentUnfunded) => f.write_str(
                "PAYMENT_UNFUNDED: the payment cannot be funded; check balance of the paying wallet (and the clock)",
            )?,
            PaymentErrorKind::Refused(ErrorCode::PaymentReplay) => f.write_str(
                "PAYMENT_REPLAY: this authorization was already used",
            )?,
            PaymentErrorKind::Refused(code) => {
                write!(f, "{code}: {}", code.default_message())?;
            }
            PaymentErrorKind::RequiredAgain => f.write_str(
                "the server asked for payment again after it was paid; not paying twice",
            )?,
            PaymentErrorKind::Policy(refusal) => write!(f, "{refusal}; nothing was signed")?,
            PaymentErrorKind::NoQuote => {
                f.write_str("the 402 answer carries no x402 quote or MPP challenge")?;
            }
            PaymentErrorKind::Unsupported(why) => write!(f, "{why}; nothing was signed")?,
            PaymentErrorKind::Sign(error) => write!(f, "{error}")?,
            PaymentErrorKind::StreamingBody => f.write_str(
                "the request body is a stream the client cannot resend; not paid for",
            )?,
            PaymentErrorKind::BodyTooLarge { limit_bytes } => write!(
                f,
                "the request body is over {limit_bytes} bytes, the most the client buffers to resend; not paid for"
            )?,
        }
        write!(f, " ({})", self.attempts)
    }
}

impl std::error::Error for PaymentError {}

/// Any other non-2xx answer.
#[derive(Debug)]
pub struct ApiError {
    /// The answer's status.
    pub status: StatusCode,
    /// The machine-readable code the body names (`code`, `error.code`), if any.
    pub code: Option<String>,
    /// The body (at most the client's error body limit).
    pub body: Bytes,
    /// What the client tried.
    pub attempts: Attempts,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "API error {}", self.status)?;
        if let Some(code) = &self.code {
            write!(f, " {code}")?;
        }
        write!(f, " ({})", self.attempts)
    }
}

impl std::error::Error for ApiError {}

/// The error of a paying client.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The payment failed.
    Payment(PaymentError),
    /// The API answered an error.
    Api(ApiError),
    /// The request never got an answer (connection, TLS, body).
    Transport(BoxError),
}

impl ClientError {
    /// Whether the API said to slow down (`429`).
    pub fn is_rate_limited(&self) -> bool {
        matches!(self, Self::Api(error) if error.status == StatusCode::TOO_MANY_REQUESTS)
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Payment(error) => error.fmt(f),
            Self::Api(error) => error.fmt(f),
            Self::Transport(error) => write!(f, "transport error: {error}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Payment(error) => Some(error),
            Self::Api(error) => Some(error),
            Self::Transport(error) => Some(error.as_ref()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unfunded_payer_is_told_to_check_its_balance() {
        let error = ClientError::Payment(PaymentError {
            kind: PaymentErrorKind::Refused(ErrorCode::PaymentUnfunded),
            status: Some(StatusCode::PAYMENT_REQUIRED),
            attempts: Attempts {
                requests: 2,
                signatures: 1,
                ..Attempts::default()
            },
        });
        let text = error.to_string();
        assert!(text.contains("check balance"), "{text}");
        assert!(text.contains("2 request(s), 1 signature(s)"), "{text}");
        let api = ClientError::Api(ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: Some("RATE_LIMITED".into()),
            body: Bytes::new(),
            attempts: Attempts::default(),
        });
        assert!(api.is_rate_limited());
        assert!(
            api.to_string()
                .starts_with("API error 429 Too Many Requests RATE_LIMITED")
        );
    }
}
