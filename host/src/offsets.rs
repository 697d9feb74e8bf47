//! Which offset of a partition may be committed: the one after the last
//! record whose transaction committed (or that was skipped as invalid or a
//! duplicate) with nothing unresolved before it (R-KFK-CONS-X1).
//!
//! Offsets are tracked in delivery order, never by arithmetic on offsets:
//! real topics have gaps (transaction markers, compaction).

use std::collections::VecDeque;

/// One partition's offsets within one assignment.
#[derive(Debug, Default)]
pub struct OffsetTracker {
    /// Delivered records not yet committable, in delivery order; `true` once done.
    pending: VecDeque<(i64, bool)>,
    /// The offset to commit next: after the last done record of the prefix.
    position: Option<i64>,
    /// What was last handed to a commit.
    committed: Option<i64>,
}

impl OffsetTracker {
    /// A partition an operator rewound to `offset`: that is its position,
    /// to commit, until a record moves it.
    pub fn starting_at(offset: i64) -> Self {
        Self { pending: VecDeque::new(), position: Some(offset), committed: None }
    }

    /// A record was handed to the partition's worker.
    pub fn delivered(&mut self, offset: i64) {
        self.pending.push_back((offset, false));
    }

    /// The record at `offset` is resolved: processed, duplicate or skipped.
    /// Records may be resolved in any order (lanes); the position moves
    /// only over a resolved prefix.
    pub fn completed(&mut self, offset: i64) {
        // Delivered in offset order within an assignment: a binary search,
        // so a lane held back by a backoff does not make every other lane's
        // completion walk the records queued behind it.
        let found = match self.pending.binary_search_by_key(&offset, |(o, _)| *o) {
            Ok(i) => Some(i),
            Err(_) => self.pending.iter().position(|(o, _)| *o == offset),
        };
        if let Some(entry) = found.and_then(|i| self.pending.get_mut(i)) {
            entry.1 = true;
        }
        while let Some(&(offset, true)) = self.pending.front() {
            self.pending.pop_front();
            self.position = Some(offset + 1);
        }
    }

    /// The position to commit, if it moved since the last commit.
    pub fn to_commit(&self) -> Option<i64> {
        self.position.filter(|p| Some(*p) != self.committed)
    }

    /// The position to commit even if it was handed to a commit already:
    /// an asynchronous commit may have failed unseen (a rebalance in
    /// progress), and committing a position again is harmless.
    pub fn to_recommit(&self) -> Option<i64> {
        self.position
    }

    /// `position` was handed to a commit (an asynchronous one may still
    /// fail: [`Self::to_recommit`] is how it goes out again).
    pub fn committed(&mut self, position: i64) {
        self.committed = Some(position);
    }

    /// The position of the prefix resolved so far.
    pub fn position(&self) -> Option<i64> {
        self.position
    }

    /// Nothing delivered is still unresolved.
    pub fn is_settled(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::OffsetTracker;

    #[test]
    fn commits_after_the_resolved_prefix_across_gaps() {
        let mut t = OffsetTracker::default();
        for offset in [5, 7, 10] {
            t.delivered(offset);
        }
        assert_eq!(t.to_commit(), None);
        t.completed(7);
        assert_eq!(t.to_commit(), None, "5 is unresolved, so 7 cannot be committed");
        t.completed(5);
        assert_eq!(t.to_commit(), Some(8), "the offset after 7, not 6: there is no 6");
        t.committed(8);
        assert_eq!(t.to_commit(), None);
        assert_eq!(t.to_recommit(), Some(8), "a refresh commits the position again");
        t.completed(10);
        assert_eq!(t.to_commit(), Some(11));
        assert!(t.is_settled());
    }

    #[test]
    fn records_resolved_out_of_order_commit_only_the_contiguous_prefix() {
        // Lanes resolve a partition's records in any order: whatever the
        // order, the position is never past a record still unresolved.
        let offsets: Vec<i64> = (0..40).map(|i| i * 3).collect();
        for seed in 0..50u64 {
            let mut order = offsets.clone();
            let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            for i in (1..order.len()).rev() {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                order.swap(i, usize::try_from(x >> 33).unwrap_or(0) % (i + 1));
            }
            let mut t = OffsetTracker::default();
            offsets.iter().for_each(|&o| t.delivered(o));
            let mut done = std::collections::BTreeSet::new();
            for o in order {
                t.completed(o);
                done.insert(o);
                let first_open = offsets.iter().find(|x| !done.contains(x));
                let expected = match first_open {
                    Some(&open) => offsets.iter().take_while(|&&x| x < open).last().map(|x| x + 1),
                    None => Some(offsets[offsets.len() - 1] + 1),
                };
                assert_eq!(t.position(), expected, "seed {seed}, after {o}");
            }
            assert!(t.is_settled());
        }
    }

    #[test]
    fn an_unresolved_record_holds_the_position() {
        let mut t = OffsetTracker::default();
        t.delivered(0);
        t.delivered(1);
        t.completed(1);
        assert_eq!(t.position(), None);
        assert!(!t.is_settled());
    }
}
