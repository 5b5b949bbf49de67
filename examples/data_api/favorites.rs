//! A wallet's favorite NFTs, paged by an opaque cursor.
//!
//! `limit` is 1 to 100 (default 50); `next` is present while more remain and
//! is passed back as `after`. The cursor names the last item returned, so a
//! page boundary stays put when favorites are added elsewhere in the list.

use std::collections::HashMap;

use alloy_primitives::Address;
use rmcp::schemars::{self, JsonSchema};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use crate::wire::schema;

/// Smallest accepted `limit`.
pub(crate) const MIN_LIMIT: u32 = 1;
/// Largest accepted `limit`.
pub(crate) const MAX_LIMIT: u32 = 100;
/// `limit` when the query has none.
pub(crate) const DEFAULT_LIMIT: u32 = 50;

/// One favorite, in the shape of the public API's `Nft`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub(crate) struct Nft {
    /// Token id within the contract.
    pub(crate) identifier: String,
    /// Collection slug.
    pub(crate) collection: String,
    /// Contract address.
    #[schemars(with = "schema::Address")]
    pub(crate) contract: String,
    /// `erc721` or `erc1155`.
    #[schemars(extend("enum" = ["erc721", "erc1155"]))]
    pub(crate) token_standard: String,
    /// Display name.
    pub(crate) name: String,
    /// Link to the item.
    #[schemars(extend("format" = "uri"))]
    pub(crate) opensea_url: String,
    /// Last change (RFC 3339).
    #[schemars(with = "schema::DateTime")]
    pub(crate) updated_at: String,
    /// Whether trading is disabled.
    pub(crate) is_disabled: bool,
    /// Whether the item is marked NSFW.
    pub(crate) is_nsfw: bool,
    /// Item traits.
    pub(crate) traits: Vec<Trait>,
}

/// One trait of an [`Nft`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub(crate) struct Trait {
    /// Trait name.
    pub(crate) trait_type: String,
    /// Trait value.
    pub(crate) value: String,
}

/// A collection: its slug and contract.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct Collection {
    /// Collection slug.
    pub(crate) collection: String,
    /// Contract address.
    pub(crate) contract: String,
}

/// One favorite as the store keeps it: the item and its JSON, written once
/// when it is added. A page is then its items' JSON side by side: serde_json
/// escaping every string of every item on every request was most of what a
/// page cost.
#[derive(Debug)]
pub(crate) struct Favorite {
    nft: Nft,
    json: Box<RawValue>,
}

impl Favorite {
    fn new(nft: Nft) -> Self {
        let json = serde_json::value::to_raw_value(&nft)
            .expect("an Nft is strings and booleans: it always serializes");
        Self { nft, json }
    }
}

/// Its JSON is the item's, by construction.
impl PartialEq for Favorite {
    fn eq(&self, other: &Self) -> bool {
        self.nft == other.nft
    }
}

impl Eq for Favorite {}

/// As the item's JSON, written once: the same bytes as serializing the item.
impl Serialize for Favorite {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(serializer)
    }
}

/// One page of favorites, borrowed from the store: serialized where it is
/// made, never copied (a copy of each item and its drop cost a page about a
/// third of what serializing it does).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(rename = "FavoritesPage")]
pub(crate) struct Page<'a> {
    /// The items.
    #[schemars(with = "Vec<Nft>")]
    pub(crate) nfts: &'a [Favorite],
    /// Cursor for the next page (pass as `after`); absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub(crate) next: Option<String>,
}

/// Why a page request was refused (400).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PageError {
    /// `limit` outside 1..=100.
    LimitOutOfRange(i64),
    /// `after` is not a cursor this server issued for this wallet.
    UnknownCursor,
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::LimitOutOfRange(limit) => write!(
                f,
                "limit must be between {MIN_LIMIT} and {MAX_LIMIT}, got {limit}"
            ),
            Self::UnknownCursor => {
                f.write_str("after is not a cursor returned as next by this endpoint")
            }
        }
    }
}

/// Checks a requested `limit`, applying the default.
pub(crate) fn checked_limit(requested: Option<i64>) -> Result<u32, PageError> {
    match requested {
        None => Ok(DEFAULT_LIMIT),
        Some(limit) => u32::try_from(limit)
            .ok()
            .filter(|limit| (MIN_LIMIT..=MAX_LIMIT).contains(limit))
            .ok_or(PageError::LimitOutOfRange(limit)),
    }
}

/// Favorites per wallet, in memory.
#[derive(Debug, Default)]
pub(crate) struct Favorites {
    by_wallet: HashMap<Address, Vec<Favorite>>,
}

fn cursor_of(Favorite { nft, .. }: &Favorite) -> String {
    // Opaque to clients, but stable: the hex of the last item's key.
    let key = format!("{}:{}", nft.contract, nft.identifier);
    alloy_primitives::hex::encode(key)
}

impl Favorites {
    /// Adds a favorite for `wallet`.
    pub(crate) fn add(&mut self, wallet: Address, nft: Nft) {
        self.by_wallet
            .entry(wallet)
            .or_default()
            .push(Favorite::new(nft));
    }

    /// The page after `after` (or the first), at most `limit` items.
    pub(crate) fn page(
        &self,
        wallet: Address,
        limit: u32,
        after: Option<&str>,
    ) -> Result<Page<'_>, PageError> {
        let all = self.by_wallet.get(&wallet).map_or(&[][..], Vec::as_slice);
        let start = match after {
            None => 0,
            Some(cursor) => {
                all.iter()
                    .position(|nft| cursor_of(nft) == cursor)
                    .ok_or(PageError::UnknownCursor)?
                    + 1
            }
        };
        let end = start.saturating_add(limit as usize).min(all.len());
        let nfts = &all[start..end];
        let next = (end < all.len()).then(|| cursor_of(&all[end - 1]));
        Ok(Page { nfts, next })
    }

    /// Every collection some wallet favors: slug and contract, sorted by slug.
    /// Collections are public on-chain facts; whose favorites they are is not shown.
    pub(crate) fn collections(&self) -> Vec<Collection> {
        let mut seen: Vec<Collection> = self
            .by_wallet
            .values()
            .flatten()
            .map(|Favorite { nft, .. }| Collection {
                collection: nft.collection.clone(),
                contract: nft.contract.clone(),
            })
            .collect();
        seen.sort();
        seen.dedup();
        seen
    }

    /// Development data: `count` favorites for `wallet`.
    pub(crate) fn seed(&mut self, wallet: Address, count: u32) {
        const COLLECTIONS: [&str; 3] = ["pudgy-penguins", "azuki", "art-blocks-curated"];
        for index in 0..count {
            let collection = COLLECTIONS[index as usize % COLLECTIONS.len()];
            let contract = format!("0x{:040x}", 0xC0FFEE_u64 + u64::from(index % 3));
            self.add(
                wallet,
                Nft {
                    identifier: (1000 + index).to_string(),
                    collection: collection.to_owned(),
                    name: format!("{collection} #{}", 1000 + index),
                    opensea_url: format!(
                        "https://opensea.io/assets/ethereum/{contract}/{}",
                        1000 + index
                    ),
                    contract,
                    token_standard: "erc721".to_owned(),
                    updated_at: "2026-11-01T00:00:00Z".to_owned(),
                    is_disabled: false,
                    is_nsfw: false,
                    traits: vec![Trait {
                        trait_type: "Background".to_owned(),
                        value: ["Blue", "Gold", "Mint"][index as usize % 3].to_owned(),
                    }],
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::address;

    const WALLET: Address = address!("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");

    #[test]
    fn pages_walk_every_item_once() {
        let mut favorites = Favorites::default();
        favorites.seed(WALLET, 7);
        let mut seen = Vec::new();
        let mut after = None;
        for _ in 0..10 {
            let page = favorites.page(WALLET, 3, after.as_deref()).unwrap();
            seen.extend(page.nfts.iter().map(|item| item.nft.identifier.clone()));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        let expected: Vec<String> = (1000..1007).map(|id: u32| id.to_string()).collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn last_page_has_no_next() {
        let mut favorites = Favorites::default();
        favorites.seed(WALLET, 2);
        assert_eq!(favorites.page(WALLET, 2, None).unwrap().next, None);
    }

    #[test]
    fn limit_bounds() {
        assert_eq!(checked_limit(None), Ok(DEFAULT_LIMIT));
        assert_eq!(checked_limit(Some(1)), Ok(1));
        assert_eq!(checked_limit(Some(100)), Ok(100));
        assert_eq!(checked_limit(Some(0)), Err(PageError::LimitOutOfRange(0)));
        assert_eq!(
            checked_limit(Some(101)),
            Err(PageError::LimitOutOfRange(101))
        );
        assert_eq!(checked_limit(Some(-5)), Err(PageError::LimitOutOfRange(-5)));
    }

    #[test]
    fn collections_are_listed_once_each() {
        let mut favorites = Favorites::default();
        favorites.seed(WALLET, 7);
        favorites.seed(address!("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"), 2);
        let slugs: Vec<String> = favorites
            .collections()
            .into_iter()
            .map(|collection| collection.collection)
            .collect();
        assert_eq!(slugs, ["art-blocks-curated", "azuki", "pudgy-penguins"]);
    }

    /// A page's bytes are those of its items serialized on the spot.
    #[test]
    fn a_page_serializes_as_its_items_would() {
        #[derive(Serialize)]
        struct Expected<'a> {
            nfts: Vec<&'a Nft>,
            #[serde(skip_serializing_if = "Option::is_none")]
            next: Option<&'a str>,
        }
        let mut favorites = Favorites::default();
        favorites.seed(WALLET, 3);
        for limit in [2, 3] {
            let page = favorites.page(WALLET, limit, None).unwrap();
            let expected = Expected {
                nfts: page.nfts.iter().map(|item| &item.nft).collect(),
                next: page.next.as_deref(),
            };
            assert_eq!(
                serde_json::to_string(&page).unwrap(),
                serde_json::to_string(&expected).unwrap()
            );
            assert_eq!(
                serde_json::to_value(&page).unwrap(),
                serde_json::to_value(&expected).unwrap()
            );
        }
    }

    #[test]
    fn foreign_cursor_refused() {
        let favorites = Favorites::default();
        assert_eq!(
            favorites.page(WALLET, 10, Some("not-a-cursor")),
            Err(PageError::UnknownCursor)
        );
    }
}
