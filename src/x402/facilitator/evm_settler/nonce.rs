//! The settler's transaction nonces, handed out without a lock held across
//! the node's round trip: concurrent settlements sign and send in parallel
//! with consecutive nonces.
//!
//! A nonce whose transaction the node refused is given back: the next
//! settlement takes it (the lowest first), and if none comes before the next
//! block while later nonces wait behind it, the settler fills it with a
//! zero-value transfer to itself. Nothing else fills a nonce: a send whose
//! fate is unknown keeps its nonce, and its transaction is sent again when
//! the chain stalls on it. "Nonce too low" (another sender on the key)
//! raises the counter to the node's pending count, never lowers it.
//!
//! [`NonceAllocator`] is the seam: [`MemoryNonceAllocator`] serves one
//! process; replicas sharing one key share an allocator in a store.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Mutex, PoisonError};

use alloy_primitives::Address;

use crate::store::{BoxFuture, StoreError};

/// Where a settler key's transaction nonces come from.
///
/// Every method is atomic for one `account`: two callers never get the same
/// nonce, whichever process they run in, as long as they share the allocator.
pub trait NonceAllocator: Send + Sync + fmt::Debug {
    /// The nonce of `account`'s next transaction: the lowest one given back,
    /// else the next never handed out. `None` until [`seed`](Self::seed)ed.
    fn take(&self, account: Address) -> BoxFuture<'_, Result<Option<u64>, StoreError>>;

    /// Raises the next never-handed-out nonce to at least `next` (the node's
    /// pending count), dropping the given-back nonces below it (used by
    /// another transaction). Never lowers it: nonces handed out stay so.
    fn seed(&self, account: Address, next: u64) -> BoxFuture<'_, Result<(), StoreError>>;

    /// A nonce whose transaction the node refused (nothing was sent with
    /// it): the next [`take`](Self::take) hands it out again. The last one
    /// handed out simply lowers the counter.
    fn give_back(&self, account: Address, nonce: u64) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Removes and returns every nonce given back and not taken since: gaps
    /// that later transactions wait behind, for the settler to fill.
    fn take_gaps(&self, account: Address) -> BoxFuture<'_, Result<Vec<u64>, StoreError>>;
}

/// One account's nonces.
#[derive(Debug, Default)]
struct Book {
    /// The next nonce never handed out, `None` until seeded.
    next: Option<u64>,
    /// Nonces given back, below `next`.
    given_back: BTreeSet<u64>,
}

/// A [`NonceAllocator`] in this process's memory: one settler process per key.
#[derive(Debug, Default)]
pub struct MemoryNonceAllocator {
    books: Mutex<HashMap<Address, Book>>,
}

impl MemoryNonceAllocator {
    /// An allocator knowing no account yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn with_book<T>(&self, account: Address, f: impl FnOnce(&mut Book) -> T) -> T {
        let mut books = self.books.lock().unwrap_or_else(PoisonError::into_inner);
        f(books.entry(account).or_default())
    }
}

impl NonceAllocator for MemoryNonceAllocator {
    fn take(&self, account: Address) -> BoxFuture<'_, Result<Option<u64>, StoreError>> {
        let nonce = self.with_book(account, |book| {
            if let Some(lowest) = book.given_back.pop_first() {
                return Some(lowest);
            }
            let next = book.next?;
            book.next = Some(next + 1);
            Some(next)
        });
        Box::pin(std::future::ready(Ok(nonce)))
    }

    fn seed(&self, account: Address, next: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        self.with_book(account, |book| {
            book.next = Some(book.next.map_or(next, |ours| ours.max(next)));
            book.given_back.retain(|&nonce| nonce >= next);
        });
        Box::pin(std::future::ready(Ok(())))
    }

    fn give_back(&self, account: Address, nonce: u64) -> BoxFuture<'_, Result<(), StoreError>> {
        self.with_book(account, |book| {
            let Some(next) = book.next else { return };
            if nonce >= next {
                return;
            }
            book.given_back.insert(nonce);
            // Given back at the top: the counter comes down instead, so a
            // quiet settler leaves no gap to fill.
            let mut next = next;
            while next > 0 && book.given_back.remove(&(next - 1)) {
                next -= 1;
            }
            book.next = Some(next);
        });
        Box::pin(std::future::ready(Ok(())))
    }

    fn take_gaps(&self, account: Address) -> BoxFuture<'_, Result<Vec<u64>, StoreError>> {
        let gaps = self.with_book(account, |book| {
            std::mem::take(&mut book.given_back).into_iter().collect()
        });
        Box::pin(std::future::ready(Ok(gaps)))
    }
}

/// The allocator's contract, for every implementation's tests.
#[cfg(test)]
pub(crate) mod contract {
    use super::*;

    pub(crate) async fn run(allocator: &dyn NonceAllocator) {
        let account = Address::repeat_byte(0x5e);
        assert_eq!(allocator.take(account).await.unwrap(), None, "unseeded");
        allocator.seed(account, 7).await.unwrap();
        let taken: Vec<u64> = [
            allocator.take(account).await.unwrap(),
            allocator.take(account).await.unwrap(),
            allocator.take(account).await.unwrap(),
        ]
        .into_iter()
        .flatten()
        .collect();
        assert_eq!(taken, [7, 8, 9], "consecutive");
        // A refusal in the middle is a gap: taken again first.
        allocator.give_back(account, 8).await.unwrap();
        assert_eq!(allocator.take(account).await.unwrap(), Some(8));
        assert_eq!(allocator.take(account).await.unwrap(), Some(10));
        // At the top, the counter comes down: no gap.
        allocator.give_back(account, 10).await.unwrap();
        assert_eq!(
            allocator.take_gaps(account).await.unwrap(),
            Vec::<u64>::new()
        );
        assert_eq!(allocator.take(account).await.unwrap(), Some(10));
        // A gap nobody took is the settler's to fill, once.
        allocator.give_back(account, 9).await.unwrap();
        assert_eq!(allocator.take_gaps(account).await.unwrap(), [9]);
        assert_eq!(
            allocator.take_gaps(account).await.unwrap(),
            Vec::<u64>::new()
        );
        assert_eq!(allocator.take(account).await.unwrap(), Some(11));
        // The node ahead raises the counter and drops gaps below it; behind, changes nothing.
        allocator.give_back(account, 8).await.unwrap();
        allocator.seed(account, 20).await.unwrap();
        assert_eq!(allocator.take(account).await.unwrap(), Some(20));
        allocator.seed(account, 3).await.unwrap();
        assert_eq!(allocator.take(account).await.unwrap(), Some(21));
        // Accounts are apart.
        assert_eq!(allocator.take(Address::ZERO).await.unwrap(), None);
    }

    /// `count` takes at once, spread over `allocators` (replicas sharing one
    /// store, or one allocator): every nonce from `from` on, each once.
    pub(crate) async fn concurrent_takes(
        allocators: &[std::sync::Arc<dyn NonceAllocator>],
        account: Address,
        from: u64,
        count: usize,
    ) {
        allocators[0].seed(account, from).await.unwrap();
        let takers: Vec<_> = (0..count)
            .map(|n| {
                let allocator = allocators[n % allocators.len()].clone();
                tokio::spawn(async move { allocator.take(account).await.unwrap().unwrap() })
            })
            .collect();
        let mut nonces = Vec::new();
        for taker in takers {
            nonces.push(taker.await.unwrap());
        }
        nonces.sort_unstable();
        assert_eq!(nonces, (from..from + count as u64).collect::<Vec<_>>());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn memory_allocator_keeps_the_contract() {
        contract::run(&MemoryNonceAllocator::new()).await;
    }

    #[tokio::test]
    async fn concurrent_takes_never_share_a_nonce() {
        let allocator: Arc<dyn NonceAllocator> = Arc::new(MemoryNonceAllocator::new());
        contract::concurrent_takes(&[allocator], Address::repeat_byte(1), 0, 64).await;
    }
}
