//! [`Fees`]: what a settlement transaction pays per gas, as the node
//! suggests it and as a stuck transaction's replacement raises it.

/// Fees and limits of one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Fees {
    pub(super) max_fee_per_gas: u128,
    pub(super) max_priority_fee_per_gas: u128,
}

impl Fees {
    /// From the latest base fee and the suggested tip: room for the base fee
    /// to double before the transaction is priced out.
    pub(super) fn from_node(base_fee: u128, tip: u128) -> Self {
        Self {
            max_fee_per_gas: base_fee.saturating_mul(2).saturating_add(tip),
            max_priority_fee_per_gas: tip,
        }
    }

    /// A same-nonce replacement's fees: both at least 12.5% above these
    /// (nodes ask +10%), and no lower than what the node suggests now.
    pub(super) fn bumped(self, now: Self) -> Self {
        let bump = |fee: u128| fee.saturating_add(fee.div_ceil(8)).max(fee + 1);
        Self {
            max_fee_per_gas: bump(self.max_fee_per_gas).max(now.max_fee_per_gas),
            max_priority_fee_per_gas: bump(self.max_priority_fee_per_gas)
                .max(now.max_priority_fee_per_gas),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacement_fees_rise_by_at_least_ten_percent() {
        let first = Fees::from_node(1_000, 100);
        assert_eq!(first.max_fee_per_gas, 2_100);
        let bumped = first.bumped(Fees::from_node(0, 0));
        assert!(bumped.max_fee_per_gas * 10 >= first.max_fee_per_gas * 11);
        assert!(bumped.max_priority_fee_per_gas * 10 >= first.max_priority_fee_per_gas * 11);
        // A node now asking more wins.
        let busy = first.bumped(Fees::from_node(10_000, 500));
        assert_eq!(busy.max_fee_per_gas, 20_500);
        // Tiny fees still move.
        assert_eq!(
            Fees::from_node(0, 1)
                .bumped(Fees::from_node(0, 0))
                .max_priority_fee_per_gas,
            2
        );
    }
}
