//! The pod queue: largest pods first, failed pods retried while the solver makes progress
//! (Karpenter's `Queue`).

use std::collections::VecDeque;

/// Pods to place. A failed pod goes to the back; the queue ends once every pod in it has come
/// round again without any placement or relaxation in between.
#[derive(Debug)]
pub(super) struct Queue {
    pods: VecDeque<usize>,
    /// Per pod: the queue length when it was last pushed back, and the epoch of that push.
    last: Vec<Option<(u64, usize)>>,
    /// Bumped by every relaxation: progress that makes every retry worthwhile again.
    epoch: u64,
}

impl Queue {
    /// A queue of `order` (already sorted) over `total` pods.
    pub(super) fn new(order: Vec<usize>, total: usize) -> Self {
        Self {
            pods: order.into(),
            last: vec![None; total],
            epoch: 0,
        }
    }

    /// The next pod, or `None` when empty or no progress was made since it last failed.
    pub(super) fn pop(&mut self) -> Option<usize> {
        let &pod = self.pods.front()?;
        if self.last[pod] == Some((self.epoch, self.pods.len())) {
            return None;
        }
        self.pods.pop_front()
    }

    /// Puts a failed pod at the back.
    pub(super) fn push(&mut self, pod: usize, relaxed: bool) {
        self.pods.push_back(pod);
        if relaxed {
            self.epoch += 1;
        } else {
            self.last[pod] = Some((self.epoch, self.pods.len()));
        }
    }

    /// What is left when the queue stops.
    pub(super) fn remaining(&self) -> impl Iterator<Item = usize> + '_ {
        self.pods.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_after_a_full_round_without_progress() {
        let mut q = Queue::new(vec![0, 1], 2);
        assert_eq!(q.pop(), Some(0));
        q.push(0, false);
        assert_eq!(q.pop(), Some(1));
        q.push(1, false);
        // 0 was pushed when the queue held [1, 0]: two pods; now again two, nothing happened.
        assert_eq!(q.pop(), None);
        assert_eq!(q.remaining().collect::<Vec<_>>(), vec![0, 1]);
    }

    #[test]
    fn placements_and_relaxations_count_as_progress() {
        let mut q = Queue::new(vec![0, 1], 2);
        assert_eq!(q.pop(), Some(0));
        q.push(0, false);
        assert_eq!(q.pop(), Some(1)); // 1 is placed: the queue shrinks
        assert_eq!(q.pop(), Some(0), "length changed since 0 failed");
        q.push(0, true);
        assert_eq!(q.pop(), Some(0), "relaxed");
        q.push(0, false);
        assert_eq!(q.pop(), None);
    }
}
