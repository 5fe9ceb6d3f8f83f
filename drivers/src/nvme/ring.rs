//! Queue ring arithmetic (NVMe Base Specification 1.4 §4.1 "Submission Queue & Completion Queue
//! Definition": full when tail + 1 = head, one slot always empty; §4.6 phase tag inverted on
//! every pass; docs/nvme-and-fio.md §1.3 and §1.8). Pure index bookkeeping, no memory access.

/// A submission queue as the host sees it: the tail it writes, the head the controller reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubmissionRing {
    entries: u32,
    tail: u32,
    head: u32,
}

impl SubmissionRing {
    /// A ring of `entries` slots (at least 2), empty.
    pub fn new(entries: u32) -> Self {
        assert!(entries >= 2, "a queue has at least two entries");
        SubmissionRing { entries, tail: 0, head: 0 }
    }

    pub fn entries(&self) -> u32 {
        self.entries
    }

    pub fn tail(&self) -> u32 {
        self.tail
    }

    pub fn head(&self) -> u32 {
        self.head
    }

    /// Slots holding commands the controller has not fetched (as far as the host knows).
    pub fn used(&self) -> u32 {
        self.distance(self.head, self.tail)
    }

    /// Slots the host may still fill: one always stays empty.
    pub fn free(&self) -> u32 {
        self.entries - 1 - self.used()
    }

    pub fn is_full(&self) -> bool {
        self.free() == 0
    }

    /// Claims the slot at the tail and moves the tail on; `None` when full.
    pub fn push(&mut self) -> Option<u32> {
        if self.is_full() {
            return None;
        }
        let slot = self.tail;
        self.tail = self.next(self.tail);
        Some(slot)
    }

    /// `(to - from) mod entries`.
    pub fn distance(&self, from: u32, to: u32) -> u32 {
        (to + self.entries - from) % self.entries
    }

    pub fn next(&self, index: u32) -> u32 {
        if index + 1 == self.entries {
            0
        } else {
            index + 1
        }
    }

    /// Whether `slot` lies in `[head, tail)`: a command the host believes not yet fetched.
    pub fn is_outstanding(&self, slot: u32) -> bool {
        slot < self.entries && self.distance(self.head, slot) < self.used()
    }

    /// Whether `new_head` (a completion's SQHD) is possible: inside the ring, not behind
    /// `lower_bound`, not past the tail. `lower_bound` is the current head, or the slot after a
    /// command the completion proves fetched.
    pub fn head_is_possible(&self, new_head: u32, lower_bound: u32) -> bool {
        if new_head >= self.entries {
            return false;
        }
        let reach = self.distance(self.head, new_head);
        reach <= self.used() && reach >= self.distance(self.head, lower_bound)
    }

    /// The smallest head consistent with the command in `slot` having been fetched.
    pub fn head_after_fetch_of(&self, slot: u32) -> u32 {
        if self.is_outstanding(slot) {
            self.next(slot)
        } else {
            self.head
        }
    }

    /// Takes a head reported by the controller; the caller checked it with
    /// [`SubmissionRing::head_is_possible`].
    pub fn set_head(&mut self, new_head: u32) {
        debug_assert!(new_head < self.entries);
        self.head = new_head;
    }
}

/// A completion queue as the host consumes it: the head and the phase a new entry carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompletionRing {
    entries: u32,
    head: u32,
    expected_phase: bool,
}

impl CompletionRing {
    /// A zeroed queue of `entries`: the controller's first pass writes phase 1.
    pub fn new(entries: u32) -> Self {
        assert!(entries >= 2, "a queue has at least two entries");
        CompletionRing { entries, head: 0, expected_phase: true }
    }

    pub fn entries(&self) -> u32 {
        self.entries
    }

    pub fn head(&self) -> u32 {
        self.head
    }

    pub fn expected_phase(&self) -> bool {
        self.expected_phase
    }

    /// Whether an entry whose phase tag is `phase` is new.
    pub fn is_new(&self, phase: bool) -> bool {
        phase == self.expected_phase
    }

    /// Consumes the entry at the head; the phase flips on wrap.
    pub fn advance(&mut self) {
        self.head += 1;
        if self.head == self.entries {
            self.head = 0;
            self.expected_phase = !self.expected_phase;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submission_ring_fills_to_entries_minus_one_and_wraps() {
        let mut ring = SubmissionRing::new(4);
        assert_eq!(ring.free(), 3);
        assert_eq!(ring.push(), Some(0));
        assert_eq!(ring.push(), Some(1));
        assert_eq!(ring.push(), Some(2));
        assert!(ring.is_full());
        assert_eq!(ring.push(), None, "one slot stays empty");
        assert_eq!(ring.tail(), 3);
        ring.set_head(2);
        assert_eq!(ring.free(), 2);
        assert_eq!(ring.push(), Some(3));
        assert_eq!(ring.push(), Some(0), "the tail wraps to 0");
        assert_eq!(ring.tail(), 1);
        assert!(ring.is_full());
        assert_eq!(ring.used(), 3);
        ring.set_head(1);
        assert_eq!(ring.used(), 0);
        assert_eq!(ring.free(), 3);
    }

    #[test]
    fn possible_heads_lie_between_the_head_and_the_tail() {
        let mut ring = SubmissionRing::new(8);
        for _ in 0..5 {
            ring.push();
        }
        ring.set_head(2); // commands in slots 2, 3, 4 outstanding; tail 5
        assert!(ring.head_is_possible(2, 2));
        assert!(ring.head_is_possible(5, 2));
        assert!(!ring.head_is_possible(6, 2), "past the tail");
        assert!(!ring.head_is_possible(1, 2), "behind the head");
        assert!(!ring.head_is_possible(8, 2), "outside the ring");
        assert!(!ring.head_is_possible(0xffff, 2));
        // The completion of the command in slot 3 proves the head is at least 4.
        assert_eq!(ring.head_after_fetch_of(3), 4);
        assert!(!ring.head_is_possible(3, 4));
        assert!(ring.head_is_possible(4, 4));
        // A slot already known fetched proves nothing new.
        assert_eq!(ring.head_after_fetch_of(1), 2);
        assert!(ring.is_outstanding(4) && !ring.is_outstanding(5) && !ring.is_outstanding(1));
    }

    #[test]
    fn possible_heads_across_the_wrap() {
        let mut ring = SubmissionRing::new(4);
        for _ in 0..3 {
            ring.push();
        }
        ring.set_head(3);
        ring.push();
        ring.push(); // slots 3 and 0 outstanding, tail 1
        assert!(ring.is_outstanding(3) && ring.is_outstanding(0));
        assert!(ring.head_is_possible(0, 3));
        assert!(ring.head_is_possible(1, 3));
        assert!(!ring.head_is_possible(2, 3));
        assert_eq!(ring.head_after_fetch_of(0), 1);
        assert_eq!(ring.head_after_fetch_of(3), 0);
    }

    #[test]
    fn completion_ring_flips_phase_on_each_wrap() {
        let mut ring = CompletionRing::new(3);
        assert!(ring.is_new(true) && !ring.is_new(false));
        for expected_head in [1, 2] {
            ring.advance();
            assert_eq!(ring.head(), expected_head);
            assert!(ring.expected_phase());
        }
        ring.advance();
        assert_eq!(ring.head(), 0);
        assert!(!ring.expected_phase(), "second pass expects phase 0");
        assert!(ring.is_new(false));
        for _ in 0..3 {
            ring.advance();
        }
        assert!(ring.expected_phase(), "third pass expects phase 1 again");
    }
}
