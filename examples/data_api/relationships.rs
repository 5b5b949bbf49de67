//! Agent declarations and the agent-relationship handshake.
//!
//! A wallet may declare itself an agent. An agent and an owner form a
//! relationship in two steps: one side proposes, the other confirms.
//!
//! ```text
//!              propose (either side)            confirm (the other side)
//!   (none) ───────────────────────────▶ PENDING ─────────────────────────▶ CONFIRMED
//!     ▲                                    │                                  │
//!     └──────────── remove (either side) ──┴──────────────────────────────────┘
//! ```
//!
//! - Proposing needs the agent side to be a declared agent.
//! - Proposing again while pending, or after confirmation, changes nothing
//!   (`created: false`); a proposal from the side the relationship awaits
//!   confirms nothing: that side must call confirm.
//! - Only the awaited side can confirm; confirming twice changes nothing.
//! - Undeclaring an agent removes its relationships.
//! - The public listing shows confirmed relationships only.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use alloy_primitives::Address;
use rmcp::schemars::{self, JsonSchema};
use serde::{Deserialize, Serialize};

use crate::wire::schema;

/// Which side of a relationship the caller speaks for: `AGENT` or `OWNER`.
// Variants without doc comments, so the schema is a plain `enum`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum CallerRole {
    Agent,
    Owner,
}

/// The state of a relationship: `PENDING` (proposed, awaiting the other
/// side) or `CONFIRMED` (both sides agreed).
// Variants without doc comments, so the schema is a plain `enum`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
#[schemars(rename = "RelationshipStatus")]
pub(crate) enum Status {
    Pending,
    Confirmed,
}

/// One relationship as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Relationship {
    /// The agent's wallet.
    #[schemars(with = "schema::Address")]
    pub(crate) agent_account_id: String,
    /// The owner's wallet.
    #[schemars(with = "schema::Address")]
    pub(crate) owner_account_id: String,
    /// The state.
    pub(crate) status: Status,
    /// The wallet whose confirmation is awaited (pending only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "schema::Address")]
    pub(crate) awaiting_confirmation_from: Option<String>,
    /// When it was proposed (RFC 3339).
    #[schemars(with = "schema::DateTime")]
    pub(crate) created_at: String,
    /// When it was confirmed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "schema::DateTime")]
    pub(crate) confirmed_at: Option<String>,
}

/// Why a handshake step was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HandshakeError {
    /// A wallet cannot relate to itself.
    SelfRelationship,
    /// The agent side has not declared itself an agent.
    NotAnAgent(Address),
    /// Nothing pending awaits this caller's confirmation.
    NothingToConfirm,
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SelfRelationship => f.write_str("a wallet cannot be its own agent"),
            Self::NotAnAgent(wallet) => write!(
                f,
                "{wallet} has not declared itself an agent (PUT /api/v2/accounts/agent)"
            ),
            Self::NothingToConfirm => {
                f.write_str("no pending relationship awaits this wallet's confirmation")
            }
        }
    }
}

#[derive(Clone, Debug)]
struct Record {
    status: Status,
    awaiting: Option<Address>,
    created_at: String,
    confirmed_at: Option<String>,
}

/// Agents and relationships, in memory.
#[derive(Debug, Default)]
pub(crate) struct Relationships {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    agents: BTreeSet<Address>,
    /// Keyed by (agent, owner).
    records: BTreeMap<(Address, Address), Record>,
}

/// (agent, owner) for a caller speaking as `role` about `counterparty`.
fn pair(caller: Address, counterparty: Address, role: CallerRole) -> (Address, Address) {
    match role {
        CallerRole::Agent => (caller, counterparty),
        CallerRole::Owner => (counterparty, caller),
    }
}

fn view((agent, owner): (Address, Address), record: &Record) -> Relationship {
    Relationship {
        agent_account_id: agent.to_checksum(None),
        owner_account_id: owner.to_checksum(None),
        status: record.status,
        awaiting_confirmation_from: record.awaiting.map(|wallet| wallet.to_checksum(None)),
        created_at: record.created_at.clone(),
        confirmed_at: record.confirmed_at.clone(),
    }
}

impl Relationships {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated
        // (every step is one insert or remove), so a poisoned lock is usable.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Declares `wallet` an agent; returns whether that changed anything.
    pub(crate) fn declare_agent(&self, wallet: Address) -> bool {
        self.state().agents.insert(wallet)
    }

    /// Undeclares `wallet` and drops its agent relationships; returns whether it was one.
    pub(crate) fn undeclare_agent(&self, wallet: Address) -> bool {
        let mut state = self.state();
        state.records.retain(|(agent, _), _| *agent != wallet);
        state.agents.remove(&wallet)
    }

    /// Whether `wallet` is a declared agent.
    #[cfg(test)]
    pub(crate) fn is_agent(&self, wallet: Address) -> bool {
        self.state().agents.contains(&wallet)
    }

    /// Proposes a relationship; `created` is false when one already existed.
    pub(crate) fn propose(
        &self,
        caller: Address,
        counterparty: Address,
        role: CallerRole,
        now: &str,
    ) -> Result<(Relationship, bool), HandshakeError> {
        if caller == counterparty {
            return Err(HandshakeError::SelfRelationship);
        }
        let key = pair(caller, counterparty, role);
        let mut state = self.state();
        if !state.agents.contains(&key.0) {
            return Err(HandshakeError::NotAnAgent(key.0));
        }
        if let Some(existing) = state.records.get(&key) {
            return Ok((view(key, existing), false));
        }
        let record = Record {
            status: Status::Pending,
            awaiting: Some(counterparty),
            created_at: now.to_owned(),
            confirmed_at: None,
        };
        let shown = view(key, &record);
        state.records.insert(key, record);
        Ok((shown, true))
    }

    /// Confirms a relationship that awaits `caller`.
    pub(crate) fn confirm(
        &self,
        caller: Address,
        counterparty: Address,
        role: CallerRole,
        now: &str,
    ) -> Result<(Relationship, bool), HandshakeError> {
        let key = pair(caller, counterparty, role);
        let mut state = self.state();
        let record = state
            .records
            .get_mut(&key)
            .ok_or(HandshakeError::NothingToConfirm)?;
        match (record.status, record.awaiting) {
            (Status::Confirmed, _) => Ok((view(key, record), false)),
            (Status::Pending, Some(awaited)) if awaited == caller => {
                record.status = Status::Confirmed;
                record.awaiting = None;
                record.confirmed_at = Some(now.to_owned());
                Ok((view(key, record), false))
            }
            (Status::Pending, _) => Err(HandshakeError::NothingToConfirm),
        }
    }

    /// Removes a relationship in any state; returns whether one existed.
    pub(crate) fn remove(&self, caller: Address, counterparty: Address, role: CallerRole) -> bool {
        let key = pair(caller, counterparty, role);
        self.state().records.remove(&key).is_some()
    }

    /// Every relationship `wallet` is part of, in any state.
    pub(crate) fn own(&self, wallet: Address) -> Vec<Relationship> {
        self.state()
            .records
            .iter()
            .filter(|((agent, owner), _)| *agent == wallet || *owner == wallet)
            .map(|(key, record)| view(*key, record))
            .collect()
    }

    /// The confirmed relationships of `wallet`, for anyone to read.
    pub(crate) fn public(&self, wallet: Address) -> Vec<Relationship> {
        self.own(wallet)
            .into_iter()
            .filter(|relationship| relationship.status == Status::Confirmed)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::address;

    const AGENT: Address = address!("0x70997970C51812dc3A010C7d01b50e0d17dc79C8");
    const OWNER: Address = address!("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");
    const NOW: &str = "2026-11-21T12:00:00Z";
    const LATER: &str = "2026-11-21T12:05:00Z";

    #[test]
    fn handshake_runs_through_every_state() {
        let store = Relationships::default();
        assert!(store.declare_agent(AGENT));
        assert!(
            !store.declare_agent(AGENT),
            "declaring twice changes nothing"
        );

        let (proposed, created) = store.propose(OWNER, AGENT, CallerRole::Owner, NOW).unwrap();
        assert!(created);
        assert_eq!(proposed.status, Status::Pending);
        assert_eq!(
            proposed.awaiting_confirmation_from.as_deref(),
            Some(AGENT.to_checksum(None).as_str())
        );
        assert!(store.public(OWNER).is_empty(), "pending is not public");

        // The proposer cannot confirm its own proposal.
        assert_eq!(
            store.confirm(OWNER, AGENT, CallerRole::Owner, LATER),
            Err(HandshakeError::NothingToConfirm)
        );
        let (confirmed, _) = store
            .confirm(AGENT, OWNER, CallerRole::Agent, LATER)
            .unwrap();
        assert_eq!(confirmed.status, Status::Confirmed);
        assert_eq!(confirmed.confirmed_at.as_deref(), Some(LATER));
        assert_eq!(confirmed.awaiting_confirmation_from, None);
        assert_eq!(store.public(AGENT), vec![confirmed.clone()]);
        assert_eq!(store.own(OWNER), vec![confirmed]);

        assert!(store.remove(OWNER, AGENT, CallerRole::Owner));
        assert!(!store.remove(OWNER, AGENT, CallerRole::Owner));
        assert!(store.own(AGENT).is_empty());
    }

    #[test]
    fn proposing_needs_a_declared_agent() {
        let store = Relationships::default();
        assert_eq!(
            store.propose(OWNER, AGENT, CallerRole::Owner, NOW),
            Err(HandshakeError::NotAnAgent(AGENT))
        );
    }

    #[test]
    fn proposing_again_changes_nothing() {
        let store = Relationships::default();
        store.declare_agent(AGENT);
        store.propose(AGENT, OWNER, CallerRole::Agent, NOW).unwrap();
        let (again, created) = store
            .propose(AGENT, OWNER, CallerRole::Agent, LATER)
            .unwrap();
        assert!(!created);
        assert_eq!(again.created_at, NOW);
    }

    #[test]
    fn undeclaring_drops_relationships() {
        let store = Relationships::default();
        store.declare_agent(AGENT);
        store.propose(AGENT, OWNER, CallerRole::Agent, NOW).unwrap();
        assert!(store.undeclare_agent(AGENT));
        assert!(store.own(OWNER).is_empty());
        assert!(!store.is_agent(AGENT));
    }

    #[test]
    fn self_relationship_refused() {
        let store = Relationships::default();
        store.declare_agent(AGENT);
        assert_eq!(
            store.propose(AGENT, AGENT, CallerRole::Agent, NOW),
            Err(HandshakeError::SelfRelationship)
        );
    }
}
