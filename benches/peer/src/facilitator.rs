//! The peer's in-process facilitator, behind x402-types' `Facilitator` trait.
//!
//! It makes the checks walletgate's local EVM facilitator makes, so the
//! benchmark compares the servers and not the amount of checking: the offer
//! is ours (network, asset, payTo, amount, EIP-712 domain), the EIP-3009
//! signature recovers to `from` (one recovery per payment), `to == payTo`,
//! the time window (`validBefore >= now + 6 s`, `validAfter <= now`),
//! `value == amount`, the nonce unused and the balance sufficient.
//!
//! `verify` remembers what it established (keyed by the EIP-712 digest and
//! the signature) so `settle`, which x402-axum calls with the same request,
//! does not recover again; `settle` still re-checks the time window and,
//! under the ledger's lock, the nonce and the balance before moving funds. A
//! settle without a verify before it recovers the signer itself.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::{Future, ready};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use alloy_primitives::{Address, B256, Signature, U256, keccak256};
use alloy_sol_types::{Eip712Domain, SolStruct, sol};
use serde::Deserialize;
use x402_types::chain::ChainId;
use x402_types::facilitator::Facilitator;
use x402_types::proto::{self, SupportedPaymentKind, SupportedResponse, v1, v2};

sol! {
    /// EIP-3009 `TransferWithAuthorization`, what an exact-EVM payment signs.
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }
}

/// An authorization must still be valid this long when verified (room to settle).
pub const MIN_REMAINING_VALIDITY_SECS: u64 = 6;

/// Verified-but-unsettled payments kept at most (expired ones are dropped first).
const PENDING_CAP: usize = 65_536;

/// Funds of each development account: 10,000 USDC in atomic units.
pub const DEV_ACCOUNT_FUNDS_UNITS: u128 = 10_000_000_000;

/// The ten public Hardhat/Anvil development accounts (mnemonic
/// `test test … junk`), pre-funded on the peer's ledger. Public, worthless.
pub const DEV_ACCOUNTS: [&str; 10] = [
    "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
    "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
    "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
    "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65",
    "0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc",
    "0x976EA74026E726554dB657fA54763abd0C3a0aa9",
    "0x14dC79964da2C08b23698B3D3cc7Ca32193d9955",
    "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f",
    "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720",
];

/// Base Sepolia USDC.
pub const BASE_SEPOLIA_USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";

/// Reasons a payment is refused (x402's snake_case names).
mod reason {
    pub(super) const FORMAT: &str = "invalid_format";
    pub(super) const REQUIREMENTS: &str = "accepted_requirements_mismatch";
    pub(super) const SIGNATURE: &str = "invalid_exact_evm_payload_signature";
    pub(super) const RECIPIENT: &str = "invalid_exact_evm_payload_recipient_mismatch";
    pub(super) const VALID_BEFORE: &str = "invalid_exact_evm_payload_authorization_valid_before";
    pub(super) const VALID_AFTER: &str = "invalid_exact_evm_payload_authorization_valid_after";
    pub(super) const VALUE: &str = "invalid_exact_evm_payload_authorization_value";
    pub(super) const NONCE_USED: &str = "invalid_exact_evm_payload_authorization_nonce_used";
    pub(super) const FUNDS: &str = "insufficient_funds";
}

/// The one offer the peer quotes and accepts.
#[derive(Clone, Debug)]
pub struct Terms {
    /// CAIP-2, e.g. `eip155:84532`.
    pub network: ChainId,
    /// The EVM chain id of `network`.
    pub chain_id: u64,
    /// The token contract.
    pub asset: Address,
    /// The address paid.
    pub pay_to: Address,
    /// The exact price in atomic units.
    pub amount_units: u128,
    /// EIP-712 domain name and version of the token.
    pub domain_name: String,
    pub domain_version: String,
    /// How long an authorization may be valid for.
    pub max_timeout_seconds: u64,
}

impl Terms {
    /// Base Sepolia USDC (`USDC`/`2`) paid to `pay_to`, `amount_units` per request.
    pub fn base_sepolia_usdc(
        pay_to: Address,
        amount_units: u128,
        max_timeout_seconds: u64,
    ) -> Self {
        Self {
            network: ChainId::new("eip155", "84532"),
            chain_id: 84_532,
            asset: BASE_SEPOLIA_USDC.parse().expect("a valid constant address"),
            pay_to,
            amount_units,
            domain_name: "USDC".to_owned(),
            domain_version: "2".to_owned(),
            max_timeout_seconds,
        }
    }

    /// The offer as x402-axum quotes it (`accepts[0]`).
    pub fn requirements(&self) -> v2::PaymentRequirements {
        v2::PaymentRequirements {
            scheme: "exact".to_owned(),
            network: self.network.clone(),
            amount: self.amount_units.to_string(),
            pay_to: self.pay_to.to_checksum(None),
            max_timeout_seconds: self.max_timeout_seconds,
            asset: self.asset.to_checksum(None),
            extra: Some(serde_json::json!({
                "name": self.domain_name,
                "version": self.domain_version,
            })),
        }
    }

    /// The offer as an x402-axum price tag.
    pub fn price_tag(&self) -> v2::PriceTag {
        v2::PriceTag {
            requirements: self.requirements(),
            enricher: None,
        }
    }

    fn domain_separator(&self) -> B256 {
        Eip712Domain::new(
            Some(self.domain_name.clone().into()),
            Some(self.domain_version.clone().into()),
            Some(U256::from(self.chain_id)),
            Some(self.asset),
            None,
        )
        .separator()
    }
}

/// Never returned: refusals are `isValid: false` / `success: false` answers.
#[derive(Debug)]
pub enum PeerError {}

impl fmt::Display for PeerError {
    fn fmt(&self, _f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {}
    }
}

impl std::error::Error for PeerError {}

/// Unix seconds, from the system clock or a test's fixed value.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs())
            .unwrap_or(0)
    })
}

/// The USDC ledger: balances and spent authorizations.
#[derive(Default)]
struct Ledger {
    balances: HashMap<Address, u128>,
    used: HashSet<(Address, B256)>,
    settlements: u64,
}

impl Ledger {
    fn check(&self, transfer: &Transfer) -> Result<(), &'static str> {
        if self.used.contains(&(transfer.from, transfer.nonce)) {
            return Err(reason::NONCE_USED);
        }
        if self.balances.get(&transfer.from).copied().unwrap_or(0) < transfer.value {
            return Err(reason::FUNDS);
        }
        Ok(())
    }
}

/// A verified signature: who signed, the signature, until when it is valid.
struct Verified {
    signer: Address,
    signature: [u8; 65],
    valid_before: u64,
}

/// The in-process facilitator of the peer.
pub struct PeerFacilitator {
    terms: Terms,
    /// `terms` as the offer x402-axum passes on, built once.
    requirements: v2::PaymentRequirements,
    separator: B256,
    clock: Clock,
    ledger: Mutex<Ledger>,
    pending: Mutex<HashMap<B256, Verified>>,
    supported: SupportedResponse,
}

impl fmt::Debug for PeerFacilitator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerFacilitator")
            .field("terms", &self.terms)
            .finish_non_exhaustive()
    }
}

/// The authorization of a request, decoded and hashed.
struct Transfer {
    from: Address,
    to: Address,
    value: u128,
    valid_after: u64,
    valid_before: u64,
    nonce: B256,
    digest: B256,
    signature: [u8; 65],
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireRequest {
    x402_version: u8,
    payment_payload: WirePayload,
    payment_requirements: v2::PaymentRequirements,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePayload {
    x402_version: u8,
    accepted: v2::PaymentRequirements,
    payload: WireExact,
}

#[derive(Deserialize)]
struct WireExact {
    signature: String,
    authorization: WireAuthorization,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireAuthorization {
    from: String,
    to: String,
    value: String,
    valid_after: String,
    valid_before: String,
    nonce: String,
}

/// Exactly `N` bytes of `0x`-prefixed hex.
fn hex_array<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.strip_prefix("0x")?;
    let mut out = [0u8; N];
    alloy_primitives::hex::decode_to_slice(digits, &mut out).ok()?;
    Some(out)
}

impl PeerFacilitator {
    /// Accepts `terms`, reading time from `clock`; the ten development
    /// accounts start with [`DEV_ACCOUNT_FUNDS_UNITS`] each.
    pub fn new(terms: Terms, clock: Clock) -> Self {
        let mut ledger = Ledger::default();
        for account in DEV_ACCOUNTS {
            let address: Address = account.parse().expect("a valid constant address");
            ledger.balances.insert(address, DEV_ACCOUNT_FUNDS_UNITS);
        }
        let supported = SupportedResponse {
            kinds: vec![SupportedPaymentKind {
                x402_version: 2,
                scheme: "exact".to_owned(),
                network: terms.network.to_string(),
                extra: None,
            }],
            extensions: Vec::new(),
            signers: HashMap::new(),
        };
        Self {
            separator: terms.domain_separator(),
            requirements: terms.requirements(),
            terms,
            clock,
            ledger: Mutex::new(ledger),
            pending: Mutex::new(HashMap::new()),
            supported,
        }
    }

    /// The balance of `account`.
    #[cfg(test)]
    pub fn balance_of(&self, account: Address) -> u128 {
        self.ledger().balances.get(&account).copied().unwrap_or(0)
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn pending(&self) -> MutexGuard<'_, HashMap<B256, Verified>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Parses the request, checks the offer is ours and hashes the authorization.
    fn decode(&self, request: &proto::VerifyRequest) -> Result<Transfer, &'static str> {
        let wire: WireRequest =
            serde_json::from_str(request.as_str()).map_err(|_| reason::FORMAT)?;
        if wire.x402_version != 2 || wire.payment_payload.x402_version != 2 {
            return Err(reason::FORMAT);
        }
        let ours = &self.requirements;
        if wire.payment_requirements != *ours || wire.payment_payload.accepted != *ours {
            return Err(reason::REQUIREMENTS);
        }
        let WireExact {
            signature,
            authorization,
        } = wire.payment_payload.payload;
        let from = Address::from(hex_array::<20>(&authorization.from).ok_or(reason::FORMAT)?);
        let to = Address::from(hex_array::<20>(&authorization.to).ok_or(reason::FORMAT)?);
        let nonce = B256::from(hex_array::<32>(&authorization.nonce).ok_or(reason::FORMAT)?);
        let value: u128 = authorization.value.parse().map_err(|_| reason::FORMAT)?;
        let valid_after: u64 = authorization
            .valid_after
            .parse()
            .map_err(|_| reason::FORMAT)?;
        let valid_before: u64 = authorization
            .valid_before
            .parse()
            .map_err(|_| reason::FORMAT)?;
        let signature = hex_array::<65>(&signature).ok_or(reason::SIGNATURE)?;
        let struct_hash = TransferWithAuthorization {
            from,
            to,
            value: U256::from(value),
            validAfter: U256::from(valid_after),
            validBefore: U256::from(valid_before),
            nonce,
        }
        .eip712_hash_struct();
        let mut preimage = [0u8; 66];
        preimage[..2].copy_from_slice(&[0x19, 0x01]);
        preimage[2..34].copy_from_slice(self.separator.as_slice());
        preimage[34..].copy_from_slice(struct_hash.as_slice());
        let digest = keccak256(preimage);
        Ok(Transfer {
            from,
            to,
            value,
            valid_after,
            valid_before,
            nonce,
            digest,
            signature,
        })
    }

    /// The one EIP-712 recovery of a payment.
    fn recover(transfer: &Transfer) -> Result<(), &'static str> {
        let signature =
            Signature::from_raw_array(&transfer.signature).map_err(|_| reason::SIGNATURE)?;
        match signature.recover_address_from_prehash(&transfer.digest) {
            Ok(signer) if signer == transfer.from => Ok(()),
            _ => Err(reason::SIGNATURE),
        }
    }

    /// Recipient, time window and value.
    fn check_terms(&self, transfer: &Transfer) -> Result<(), &'static str> {
        if transfer.to != self.terms.pay_to {
            return Err(reason::RECIPIENT);
        }
        let now = (self.clock)();
        if transfer.valid_before < now.saturating_add(MIN_REMAINING_VALIDITY_SECS) {
            return Err(reason::VALID_BEFORE);
        }
        if transfer.valid_after > now {
            return Err(reason::VALID_AFTER);
        }
        if transfer.value != self.terms.amount_units {
            return Err(reason::VALUE);
        }
        Ok(())
    }

    fn verify_now(&self, request: &proto::VerifyRequest) -> v1::VerifyResponse {
        let transfer = match self.decode(request) {
            Ok(transfer) => transfer,
            Err(reason) => return invalid(reason, None),
        };
        let payer = Some(transfer.from);
        if let Err(reason) = Self::recover(&transfer)
            .and_then(|()| self.check_terms(&transfer))
            .and_then(|()| self.ledger().check(&transfer))
        {
            return invalid(reason, payer);
        }
        let now = (self.clock)();
        let mut pending = self.pending();
        if pending.len() >= PENDING_CAP {
            pending.retain(|_, verified| verified.valid_before > now);
        }
        pending.insert(
            transfer.digest,
            Verified {
                signer: transfer.from,
                signature: transfer.signature,
                valid_before: transfer.valid_before,
            },
        );
        drop(pending);
        v1::VerifyResponse::valid(transfer.from.to_checksum(None))
    }

    fn settle_now(&self, request: &proto::SettleRequest) -> v1::SettleResponse {
        let network = self.terms.network.to_string();
        let refused = |reason: &str| v1::SettleResponse::Error {
            reason: reason.to_owned(),
            network: network.clone(),
        };
        let transfer = match self.decode(request) {
            Ok(transfer) => transfer,
            Err(reason) => return refused(reason),
        };
        let verified = self.pending().remove(&transfer.digest);
        let recovered = match verified {
            Some(verified)
                if verified.signer == transfer.from && verified.signature == transfer.signature =>
            {
                Ok(())
            }
            _ => Self::recover(&transfer),
        };
        if let Err(reason) = recovered.and_then(|()| self.check_terms(&transfer)) {
            return refused(reason);
        }
        let mut ledger = self.ledger();
        if let Err(reason) = ledger.check(&transfer) {
            return refused(reason);
        }
        ledger.used.insert((transfer.from, transfer.nonce));
        if let Some(balance) = ledger.balances.get_mut(&transfer.from) {
            *balance -= transfer.value;
        }
        *ledger.balances.entry(transfer.to).or_default() += transfer.value;
        ledger.settlements += 1;
        let mut preimage = [0u8; 40];
        preimage[..32].copy_from_slice(transfer.digest.as_slice());
        preimage[32..].copy_from_slice(&ledger.settlements.to_be_bytes());
        drop(ledger);
        v1::SettleResponse::Success {
            payer: transfer.from.to_checksum(None),
            transaction: keccak256(preimage).to_string(),
            network,
        }
    }
}

fn invalid(reason: &str, payer: Option<Address>) -> v1::VerifyResponse {
    v1::VerifyResponse::Invalid {
        reason: reason.to_owned(),
        payer: payer.map(|address| address.to_checksum(None)),
    }
}

impl Facilitator for PeerFacilitator {
    type Error = PeerError;

    fn verify(
        &self,
        request: &proto::VerifyRequest,
    ) -> impl Future<Output = Result<proto::VerifyResponse, PeerError>> + Send {
        ready(Ok(self.verify_now(request).into()))
    }

    fn settle(
        &self,
        request: &proto::SettleRequest,
    ) -> impl Future<Output = Result<proto::SettleResponse, PeerError>> + Send {
        ready(Ok(self.settle_now(request).into()))
    }

    fn supported(&self) -> impl Future<Output = Result<SupportedResponse, PeerError>> + Send {
        ready(Ok(self.supported.clone()))
    }
}

/// Signing with the public development keys, for the peer's tests.
#[cfg(test)]
pub(crate) mod test_support {
    use alloy_primitives::{Address, B256, U256};
    use alloy_sol_types::{Eip712Domain, SolStruct};
    use secp256k1::{Message, SECP256K1, SecretKey};
    use serde_json::{Value, json};

    use super::{Terms, TransferWithAuthorization};

    /// PUBLIC Hardhat/Anvil development key of account 0. Worthless; tests only.
    const DEV_KEY_0: &str = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

    /// An authorization before signing; tests change fields to make it wrong.
    pub(crate) struct Draft {
        pub(crate) from: Address,
        pub(crate) to: Address,
        pub(crate) value: u128,
        pub(crate) valid_after: u64,
        pub(crate) valid_before: u64,
        pub(crate) nonce: u64,
        pub(crate) key: [u8; 32],
    }

    impl Draft {
        /// A correct payment of `terms` by development account 0 at `now`.
        pub(crate) fn new(terms: &Terms, now: u64, nonce: u64) -> Self {
            let mut key = [0u8; 32];
            alloy_primitives::hex::decode_to_slice(DEV_KEY_0, &mut key).unwrap();
            Self {
                from: super::DEV_ACCOUNTS[0].parse().unwrap(),
                to: terms.pay_to,
                value: terms.amount_units,
                valid_after: 0,
                valid_before: now + terms.max_timeout_seconds,
                nonce,
                key,
            }
        }

        /// The `PaymentPayload` JSON, signed under `terms`' domain.
        pub(crate) fn payload(&self, terms: &Terms) -> Value {
            let mut nonce = [0u8; 32];
            nonce[24..].copy_from_slice(&self.nonce.to_be_bytes());
            let domain = Eip712Domain::new(
                Some(terms.domain_name.clone().into()),
                Some(terms.domain_version.clone().into()),
                Some(U256::from(terms.chain_id)),
                Some(terms.asset),
                None,
            );
            let digest = TransferWithAuthorization {
                from: self.from,
                to: self.to,
                value: U256::from(self.value),
                validAfter: U256::from(self.valid_after),
                validBefore: U256::from(self.valid_before),
                nonce: B256::from(nonce),
            }
            .eip712_signing_hash(&domain);
            let key = SecretKey::from_byte_array(self.key).unwrap();
            let signature = SECP256K1.sign_ecdsa_recoverable(Message::from_digest(digest.0), &key);
            let (recovery_id, compact) = signature.serialize_compact();
            let mut raw = compact.to_vec();
            raw.push(27 + u8::try_from(i32::from(recovery_id)).unwrap());
            json!({
                "x402Version": 2,
                "accepted": terms.requirements(),
                "payload": {
                    "signature": format!("0x{}", alloy_primitives::hex::encode(raw)),
                    "authorization": {
                        "from": self.from.to_checksum(None),
                        "to": self.to.to_checksum(None),
                        "value": self.value.to_string(),
                        "validAfter": self.valid_after.to_string(),
                        "validBefore": self.valid_before.to_string(),
                        "nonce": B256::from(nonce).to_string(),
                    },
                },
            })
        }

        /// The facilitator request x402-axum would build from this payment.
        pub(crate) fn request(&self, terms: &Terms) -> x402_types::proto::VerifyRequest {
            request_of(terms, self.payload(terms))
        }
    }

    /// Wraps a payment as the facilitator request x402-axum builds.
    pub(crate) fn request_of(terms: &Terms, payload: Value) -> x402_types::proto::VerifyRequest {
        let body = json!({
            "x402Version": 2,
            "paymentPayload": payload,
            "paymentRequirements": terms.requirements(),
        });
        serde_json::value::to_raw_value(&body).unwrap().into()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::test_support::{Draft, request_of};
    use super::*;

    const NOW: u64 = 1_750_000_000;

    /// Makes a correct draft wrong in one way.
    type Spoil = fn(&mut Draft);

    fn terms() -> Terms {
        Terms::base_sepolia_usdc(DEV_ACCOUNTS[9].parse().unwrap(), 3_000, 300)
    }

    fn facilitator_at(now: Arc<AtomicU64>) -> PeerFacilitator {
        PeerFacilitator::new(terms(), Arc::new(move || now.load(Ordering::Relaxed)))
    }

    fn facilitator() -> PeerFacilitator {
        facilitator_at(Arc::new(AtomicU64::new(NOW)))
    }

    fn verify_reason(
        facilitator: &PeerFacilitator,
        request: &proto::VerifyRequest,
    ) -> Option<String> {
        match facilitator.verify_now(request) {
            v1::VerifyResponse::Valid { .. } => None,
            v1::VerifyResponse::Invalid { reason, .. } => Some(reason),
        }
    }

    fn settle_reason(
        facilitator: &PeerFacilitator,
        request: &proto::SettleRequest,
    ) -> Option<String> {
        match facilitator.settle_now(request) {
            v1::SettleResponse::Success { .. } => None,
            v1::SettleResponse::Error { reason, .. } => Some(reason),
        }
    }

    #[test]
    fn a_verified_payment_settles_once_and_moves_the_funds() {
        let facilitator = facilitator();
        let terms = terms();
        let payer: Address = DEV_ACCOUNTS[0].parse().unwrap();
        let request = Draft::new(&terms, NOW, 1).request(&terms);
        assert_eq!(verify_reason(&facilitator, &request), None);
        assert_eq!(settle_reason(&facilitator, &request), None);
        assert_eq!(
            facilitator.balance_of(payer),
            DEV_ACCOUNT_FUNDS_UNITS - 3_000
        );
        assert_eq!(
            facilitator.balance_of(terms.pay_to),
            DEV_ACCOUNT_FUNDS_UNITS + 3_000
        );
        assert_eq!(
            verify_reason(&facilitator, &request).as_deref(),
            Some(reason::NONCE_USED)
        );
        assert_eq!(
            settle_reason(&facilitator, &request).as_deref(),
            Some(reason::NONCE_USED)
        );
        assert_eq!(
            facilitator.balance_of(payer),
            DEV_ACCOUNT_FUNDS_UNITS - 3_000
        );
    }

    #[test]
    fn a_nonce_spent_between_verify_and_settle_is_refused() {
        let facilitator = facilitator();
        let terms = terms();
        let request = Draft::new(&terms, NOW, 2).request(&terms);
        assert_eq!(verify_reason(&facilitator, &request), None);
        assert_eq!(verify_reason(&facilitator, &request), None);
        assert_eq!(settle_reason(&facilitator, &request), None);
        assert_eq!(
            settle_reason(&facilitator, &request).as_deref(),
            Some(reason::NONCE_USED)
        );
    }

    #[test]
    fn a_settle_without_verify_still_recovers_the_signer() {
        let facilitator = facilitator();
        let terms = terms();
        let mut draft = Draft::new(&terms, NOW, 3);
        let mut payload = draft.payload(&terms);
        payload["payload"]["authorization"]["from"] = DEV_ACCOUNTS[1].into();
        assert_eq!(
            settle_reason(&facilitator, &request_of(&terms, payload)).as_deref(),
            Some(reason::SIGNATURE)
        );
        draft.nonce = 4;
        assert_eq!(settle_reason(&facilitator, &draft.request(&terms)), None);
    }

    #[test]
    fn a_value_tampered_after_verify_is_refused_at_settle() {
        let facilitator = facilitator();
        let terms = terms();
        let mut payload = Draft::new(&terms, NOW, 5).payload(&terms);
        assert_eq!(
            verify_reason(&facilitator, &request_of(&terms, payload.clone())),
            None
        );
        payload["payload"]["authorization"]["value"] = "1".into();
        let refused = settle_reason(&facilitator, &request_of(&terms, payload));
        assert_eq!(refused.as_deref(), Some(reason::SIGNATURE));
    }

    #[test]
    fn wrong_recipient_value_window_and_signer_are_refused() {
        let facilitator = facilitator();
        let terms = terms();
        let cases: [(&str, Spoil); 6] = [
            (reason::RECIPIENT, |d| {
                d.to = DEV_ACCOUNTS[8].parse().unwrap()
            }),
            (reason::VALUE, |d| d.value = 2_999),
            (reason::VALID_BEFORE, |d| d.valid_before = NOW + 5),
            (reason::VALID_AFTER, |d| d.valid_after = NOW + 1),
            (reason::SIGNATURE, |d| {
                d.from = DEV_ACCOUNTS[1].parse().unwrap()
            }),
            (reason::FUNDS, |d| {
                // A key no one funded signs for its own address.
                d.key = [7u8; 32];
                let key = secp256k1::SecretKey::from_byte_array(d.key).unwrap();
                let public =
                    secp256k1::PublicKey::from_secret_key_global(&key).serialize_uncompressed();
                d.from = Address::from_raw_public_key(&public[1..]);
            }),
        ];
        for (index, (expected, spoil)) in cases.into_iter().enumerate() {
            let mut draft = Draft::new(&terms, NOW, 100 + index as u64);
            spoil(&mut draft);
            let request = draft.request(&terms);
            assert_eq!(
                verify_reason(&facilitator, &request).as_deref(),
                Some(expected)
            );
            assert_eq!(
                settle_reason(&facilitator, &request).as_deref(),
                Some(expected)
            );
        }
    }

    #[test]
    fn an_authorization_that_expired_after_verify_is_refused_at_settle() {
        let now = Arc::new(AtomicU64::new(NOW));
        let facilitator = facilitator_at(now.clone());
        let terms = terms();
        let request = Draft::new(&terms, NOW, 6).request(&terms);
        assert_eq!(verify_reason(&facilitator, &request), None);
        now.store(NOW + 300, Ordering::Relaxed);
        assert_eq!(
            settle_reason(&facilitator, &request).as_deref(),
            Some(reason::VALID_BEFORE)
        );
    }

    #[test]
    fn an_offer_that_is_not_ours_is_refused() {
        let facilitator = facilitator();
        let terms = terms();
        let mut other = terms.clone();
        other.amount_units = 1;
        let draft = Draft {
            value: 1,
            ..Draft::new(&other, NOW, 7)
        };
        let refused = verify_reason(&facilitator, &draft.request(&other));
        assert_eq!(refused.as_deref(), Some(reason::REQUIREMENTS));
    }
}
