//! A sorted queue: the one ordered-set shape the engine's queues (ready lanes, delayed jobs,
//! jobs to forget) need, without a B-tree.

use std::collections::VecDeque;

/// Keys in ascending order: what the engine's queues need (add, remove, take the first)
/// without a B-tree. `BTreeSet` cost the worker's wasm 6.5 KB more than this and
/// [`IdSet`](super::ledger::IdSet) (2.6 KB gzipped).
///
/// The keys lie in blocks of at most [`QUEUE_BLOCK`] * 2, each a ring buffer, so that no
/// change moves more than a block and the list of blocks: a queue of a million keys adds or
/// removes anywhere in a few microseconds, as the B-tree did. Taking the first key moves
/// nothing.
pub(super) struct SortedQueue<T> {
    /// Not empty, and each block's keys come before the next block's.
    blocks: Vec<VecDeque<T>>,
}

/// See [`SortedQueue`]: a block is split in two when it grows past twice this.
const QUEUE_BLOCK: usize = 512;

impl<T> Default for SortedQueue<T> {
    fn default() -> Self {
        SortedQueue { blocks: Vec::new() }
    }
}

impl<T: Ord> SortedQueue<T> {
    /// The block where `key` is or belongs: the first whose last key is not below it, else
    /// the last block. `None` when there are no blocks.
    fn block_of(&self, key: &T) -> Option<usize> {
        let i = self
            .blocks
            .partition_point(|b| b.back().is_some_and(|last| last < key));
        i.min(self.blocks.len().checked_sub(1)?).into()
    }

    pub(super) fn insert(&mut self, key: T) {
        let Some(i) = self.block_of(&key) else {
            let mut block = VecDeque::new();
            block.push_back(key);
            self.blocks.push(block);
            return;
        };
        let block = &mut self.blocks[i];
        if let Err(at) = block.binary_search(&key) {
            block.insert(at, key);
            if block.len() > 2 * QUEUE_BLOCK {
                let upper = block.split_off(QUEUE_BLOCK);
                self.blocks.insert(i + 1, upper);
            }
        }
    }

    pub(super) fn remove(&mut self, key: &T) {
        let Some(i) = self.block_of(key) else { return };
        let block = &mut self.blocks[i];
        if let Ok(at) = block.binary_search(key) {
            block.remove(at);
            if block.is_empty() {
                self.blocks.remove(i);
            }
        }
    }

    pub(super) fn first(&self) -> Option<&T> {
        self.blocks.first()?.front()
    }

    pub(super) fn pop_first(&mut self) -> Option<T> {
        let block = self.blocks.first_mut()?;
        let first = block.pop_front();
        if block.is_empty() {
            self.blocks.remove(0);
        }
        first
    }

    pub(super) fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The keys in order, first to last.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.blocks.iter().flatten()
    }

    pub(super) fn clear(&mut self) {
        self.blocks.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::random::Rng;

    /// `SortedQueue` keeps the order and contents a `BTreeSet` would, over enough keys to split
    /// and empty many blocks, with adds and removals at the ends and in the middle.
    #[test]
    fn sorted_queue_is_an_ordered_set() {
        let mut rng = Rng::seeded(3);
        let mut queue = SortedQueue::default();
        let mut reference = BTreeSet::new();
        for round in 0..40_000u64 {
            let key = match rng.below_or_equal(3) {
                // Mostly the newest key, as enqueues bring.
                0 | 1 => (round, rng.below_or_equal(2), String::new()),
                _ => (
                    rng.below_or_equal(round),
                    0,
                    rng.below_or_equal(9).to_string(),
                ),
            };
            match rng.below_or_equal(9) {
                0..=4 => {
                    queue.insert(key.clone());
                    reference.insert(key);
                }
                5 | 6 => {
                    // A key present, if any: the middle of the set.
                    let present = reference.iter().nth(reference.len() / 2).cloned();
                    if let Some(k) = present {
                        queue.remove(&k);
                        reference.remove(&k);
                    }
                }
                7 => {
                    queue.remove(&key);
                    reference.remove(&key);
                }
                _ => assert_eq!(queue.pop_first(), reference.pop_first()),
            }
            assert_eq!(queue.first(), reference.first());
            assert_eq!(queue.is_empty(), reference.is_empty());
        }
        assert!(queue.blocks.len() > 2, "blocks were split");
        let mut all = Vec::new();
        while let Some(k) = queue.pop_first() {
            all.push(k);
        }
        assert_eq!(all, reference.into_iter().collect::<Vec<_>>());
    }
}
