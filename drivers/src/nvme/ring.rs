//! The submission ring and the completion ring every NVMe queue uses, the admin queue and each
//! I/O queue pair alike (NVMe Base Specification 1.4 §4.1 "Submission Queue & Completion Queue
//! Definition": full when tail + 1 = head, one slot always empty; §4.6 phase tag inverted on
//! every pass; docs/nvme-and-fio.md §1.3 and §1.8). As in rcore-os/virtio-drivers' `VirtQueue`,
//! the steps whose order the hardware depends on exist once, here:
//!
//! - handing entries over: entry stores, cache clean, store barrier, tail doorbell
//!   ([`SubmissionRing::push`], [`SubmissionRing::notify`]);
//! - taking completions: invalidate, phase load, load barrier, the entry's other loads
//!   ([`CompletionRing::pop`]); then load barrier and head doorbell once per batch
//!   ([`CompletionRing::release`]).
//!
//! The barriers are `hal::barrier`'s, which say why each is the cheapest that is correct.

use super::command::{
    phase_of, CompletionEntry, IoEntry, SubmissionEntry, COMPLETION_ENTRY_BYTES, SUBMISSION_ENTRY_BYTES,
};
use hal::barrier;
use hal::dma::{DmaAllocation, DmaRegion};
use hal::mmio::RegisterIo;
use hal::platform::Platform;

/// A completion reported an SQ head that cannot be: the ring's state before it was corrected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImpossibleHead {
    pub known_head: u32,
    pub tail: u32,
}

/// A queue pair's memory and size: the submission and the completion queue, each with the bus
/// address the controller is given for it (AQA/ASQ/ACQ for the admin queue, NVMe 1.4 §3.1.8-3.1.10;
/// Create I/O Completion/Submission Queue for the others, §5.3-5.4).
#[derive(Clone, Copy, Debug)]
pub struct QueueMemory<'p> {
    pub submission: DmaAllocation<'p>,
    pub completion: DmaAllocation<'p>,
    pub entries: u32,
}

/// A submission queue as the host fills it: its memory, and counts of the entries pushed, handed
/// to the controller (doorbell) and fetched by it (the SQ head it reported). The counts never
/// wrap, so a command is named by its push sequence number even after its slot was reused:
/// controllers complete out of order, and a late completion must not be taken for the slot's
/// newer occupant.
pub struct SubmissionRing<'p> {
    memory: DmaRegion<'p>,
    doorbell_offset_bytes: usize,
    entries: u32,
    pushed: u64,
    notified: u64,
    fetched: u64,
    /// The slots of `pushed` and `fetched` (kept as they move, instead of a division each time).
    tail_slot: u32,
    head_slot: u32,
    /// Whether the platform's cache maintenance does anything for this ring's memory, asked
    /// at the first hand-over (the memory never moves).
    maintained: Option<bool>,
}

impl<'p> SubmissionRing<'p> {
    /// An empty ring of `entries` slots (at least 2) in `memory`, whose tail doorbell is at
    /// `doorbell_offset_bytes` in BAR0.
    pub fn new(memory: DmaRegion<'p>, entries: u32, doorbell_offset_bytes: usize) -> Self {
        assert!(entries >= 2, "a queue has at least two entries");
        assert!(memory.length_bytes() >= entries as usize * SUBMISSION_ENTRY_BYTES, "SQ memory too small");
        SubmissionRing {
            memory,
            doorbell_offset_bytes,
            entries,
            pushed: 0,
            notified: 0,
            fetched: 0,
            tail_slot: 0,
            head_slot: 0,
            maintained: None,
        }
    }

    fn slot_of(&self, sequence: u64) -> u32 {
        (sequence % u64::from(self.entries)) as u32
    }

    pub fn tail(&self) -> u32 {
        self.tail_slot
    }

    /// Slots of the ring.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    pub fn head(&self) -> u32 {
        self.head_slot
    }

    /// Slots holding commands the controller has not fetched (as far as the host knows).
    pub fn used(&self) -> u32 {
        (self.pushed - self.fetched) as u32
    }

    /// Slots the host may still fill: one always stays empty.
    pub fn free(&self) -> u32 {
        self.entries - 1 - self.used()
    }

    pub fn is_full(&self) -> bool {
        self.free() == 0
    }

    /// Writes `entry` into the slot at the tail and moves the tail on (the controller is not
    /// told until [`SubmissionRing::notify`]). Returns the entry's sequence number (its slot is
    /// that modulo the ring size); `None` when full.
    pub fn push(&mut self, entry: &SubmissionEntry) -> Option<u64> {
        self.push_quadwords(&entry.quadwords())
    }

    /// As [`SubmissionRing::push`], for an I/O command built as 64-bit words.
    #[inline]
    pub fn push_io(&mut self, entry: &IoEntry) -> Option<u64> {
        self.push_quadwords(&entry.quadwords)
    }

    #[inline(always)]
    fn push_quadwords(&mut self, quadwords: &[u64; 8]) -> Option<u64> {
        if self.is_full() {
            return None;
        }
        let sequence = self.pushed;
        let slot = self.tail_slot;
        self.memory.write_u64s(slot as usize * SUBMISSION_ENTRY_BYTES, quadwords);
        self.pushed += 1;
        self.tail_slot = if slot + 1 == self.entries { 0 } else { slot + 1 };
        Some(sequence)
    }

    /// How many entries were pushed and not yet handed to the controller.
    pub fn unnotified(&self) -> usize {
        (self.pushed - self.notified) as usize
    }

    /// Hands every entry pushed since the last call to the controller: cleans them from the
    /// cache, orders them before the doorbell with a store barrier, and writes the tail
    /// doorbell once. Returns whether there was anything to hand over.
    #[inline(always)]
    pub fn notify<R: RegisterIo + ?Sized, P: Platform + ?Sized>(
        &mut self,
        registers: &R,
        platform: &P,
    ) -> bool {
        if self.pushed == self.notified {
            return false;
        }
        let tail = self.tail();
        let memory = self.memory.buffer();
        if *self.maintained.get_or_insert_with(|| platform.needs_cache_maintenance(&memory)) {
            self.clean_entries(self.slot_of(self.notified), tail, platform);
        }
        // The entries (Normal memory) must reach the controller before the doorbell (Device
        // memory) tells it to fetch them: `dmb oshst`, as Linux's `writel()`.
        barrier::store_before_doorbell();
        registers.write32(self.doorbell_offset_bytes, tail);
        self.notified = self.pushed;
        true
    }

    /// Cleans the slots from `from` up to `tail` (exclusive, wrapping) from the cache.
    fn clean_entries<P: Platform + ?Sized>(&self, from: u32, tail: u32, platform: &P) {
        let bytes_from = from as usize * SUBMISSION_ENTRY_BYTES;
        if from < tail {
            platform.clean_for_device(
                &self.memory.slice(bytes_from, (tail - from) as usize * SUBMISSION_ENTRY_BYTES),
            );
        } else {
            let bytes = (self.entries - from) as usize * SUBMISSION_ENTRY_BYTES;
            platform.clean_for_device(&self.memory.slice(bytes_from, bytes));
            if tail > 0 {
                platform.clean_for_device(&self.memory.slice(0, tail as usize * SUBMISSION_ENTRY_BYTES));
            }
        }
    }

    /// Takes the SQ head a completion reported for the command pushed as `sequence` (NVMe 1.4
    /// §4.6 SQHD). A head behind the current one, past the tail, or before that command (which
    /// the completion proves fetched) is impossible: the ring then keeps the head it can prove
    /// and says what it knew.
    #[inline(always)]
    pub fn accept_head(&mut self, reported_head: u16, sequence: u64) -> Result<(), ImpossibleHead> {
        let reported_head = u32::from(reported_head);
        if reported_head == self.tail_slot {
            // The controller fetched everything pushed (the usual answer): the head is the tail,
            // which the checks below would find too (fewer than `entries` slots are ever used, so
            // the distance to the tail is `pushed - fetched`, and no bound lies past `pushed`).
            self.fetched = self.pushed;
            self.head_slot = reported_head;
            return Ok(());
        }
        self.accept_head_behind_tail(reported_head, sequence)
    }

    /// [`SubmissionRing::accept_head`] for a head that is not the tail.
    fn accept_head_behind_tail(&mut self, reported_head: u32, sequence: u64) -> Result<(), ImpossibleHead> {
        let lower_bound = self.fetched.max(sequence + 1).min(self.pushed);
        // Both below `entries`: the distance forward from the head is one subtraction, wrapped.
        let reach = if reported_head >= self.head_slot {
            reported_head - self.head_slot
        } else {
            reported_head + self.entries - self.head_slot
        };
        let candidate = self.fetched + u64::from(reach);
        if reported_head < self.entries && candidate <= self.pushed && candidate >= lower_bound {
            self.fetched = candidate;
            self.head_slot = reported_head;
            Ok(())
        } else {
            let known = ImpossibleHead { known_head: self.head(), tail: self.tail() };
            self.fetched = lower_bound;
            self.head_slot = self.slot_of(lower_bound);
            Err(known)
        }
    }
}

/// A completion queue as the host consumes it: its memory, the head, the phase a new entry
/// carries, and how many entries were taken since the head doorbell was last written.
pub struct CompletionRing<'p> {
    memory: DmaRegion<'p>,
    doorbell_offset_bytes: usize,
    entries: u32,
    head: u32,
    expected_phase: bool,
    unreleased: u32,
    /// As [`SubmissionRing`]'s: asked at the first look for a completion.
    maintained: Option<bool>,
}

impl<'p> CompletionRing<'p> {
    /// A ring of `entries` slots in `memory` (zeroed, so the controller's first pass writes
    /// phase 1), whose head doorbell is at `doorbell_offset_bytes` in BAR0.
    pub fn new(memory: DmaRegion<'p>, entries: u32, doorbell_offset_bytes: usize) -> Self {
        assert!(entries >= 2, "a queue has at least two entries");
        assert!(memory.length_bytes() >= entries as usize * COMPLETION_ENTRY_BYTES, "CQ memory too small");
        CompletionRing {
            memory,
            doorbell_offset_bytes,
            entries,
            head: 0,
            expected_phase: true,
            unreleased: 0,
            maintained: None,
        }
    }

    pub fn expected_phase(&self) -> bool {
        self.expected_phase
    }

    /// The entry at the head if the controller has posted it (its phase tag is the one this
    /// pass expects); the head moves on, the phase flips on wrap. The slot stays the host's
    /// until [`CompletionRing::release`].
    #[inline(always)]
    pub fn pop<P: Platform + ?Sized>(&mut self, platform: &P) -> Option<CompletionEntry> {
        let offset = self.head as usize * COMPLETION_ENTRY_BYTES;
        // A copy the barrier below cannot make the compiler reload: the second read's bounds
        // check then follows from the first's.
        let memory = self.memory;
        if *self.maintained.get_or_insert_with(|| platform.needs_cache_maintenance(&memory.buffer())) {
            platform.invalidate_for_cpu(&memory.slice(offset, COMPLETION_ENTRY_BYTES));
        }
        let dword3 = memory.read_u32(offset + 12);
        if phase_of(dword3) != self.expected_phase {
            return None;
        }
        // The rest of the entry (and the data it announces) may only be read after the phase:
        // `dmb oshld`, as SPDK after its phase check.
        barrier::load_after_completion();
        let mut entry = CompletionEntry::default();
        memory.read_words(offset, &mut entry.dwords[..3]);
        entry.dwords[3] = dword3;
        self.head += 1;
        if self.head == self.entries {
            self.head = 0;
            self.expected_phase = !self.expected_phase;
        }
        self.unreleased += 1;
        Some(entry)
    }

    /// Gives the entries taken since the last call back to the controller with one head
    /// doorbell write. Returns whether there were any.
    #[inline]
    pub fn release<R: RegisterIo + ?Sized>(&mut self, registers: &R) -> bool {
        if self.unreleased == 0 {
            return false;
        }
        // The entries' loads must be done before the controller may overwrite their slots:
        // `dmb oshld` orders earlier loads against the later doorbell store.
        barrier::load_after_completion();
        registers.write32(self.doorbell_offset_bytes, self.head);
        self.unreleased = 0;
        true
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::status::Status;
    use super::*;
    use core::cell::RefCell;
    use hal::barrier::BarrierKind;
    use hal::testing::{ArenaPlatform, ByteRange, PlatformEvent};
    use std::vec::Vec;

    /// Register writes, kept for the assertions (and logged like a simulator's).
    #[derive(Default)]
    struct Doorbells(RefCell<Vec<(usize, u32)>>);

    impl RegisterIo for Doorbells {
        fn read32(&self, _offset_bytes: usize) -> u32 {
            0
        }
        fn write32(&self, offset_bytes: usize, value: u32) {
            hal::testing::record(PlatformEvent::MmioWrite { block: "test", offset_bytes, value });
            self.0.borrow_mut().push((offset_bytes, value));
        }
    }

    const SQ_DOORBELL: usize = 0x1000;
    const CQ_DOORBELL: usize = 0x1004;

    fn region(platform: &ArenaPlatform, bytes: usize) -> DmaRegion<'_> {
        DmaRegion::allocate(platform, bytes, 4096).unwrap()
    }

    fn submission_ring(platform: &ArenaPlatform, entries: u32) -> SubmissionRing<'_> {
        SubmissionRing::new(region(platform, entries as usize * 64), entries, SQ_DOORBELL)
    }

    fn completion_ring(platform: &ArenaPlatform, entries: u32) -> (CompletionRing<'_>, DmaRegion<'_>) {
        let memory = region(platform, entries as usize * 16);
        (CompletionRing::new(memory, entries, CQ_DOORBELL), memory)
    }

    /// Posts a completion as a controller does (a logged DMA write).
    fn post(platform: &ArenaPlatform, memory: &DmaRegion, slot: u32, command_id: u16, phase: bool) {
        let entry = CompletionEntry::new(0, 0, 1, command_id, phase, Status::SUCCESS);
        let mut bytes = [0u8; 16];
        for (index, word) in entry.dwords.iter().enumerate() {
            bytes[4 * index..4 * index + 4].copy_from_slice(&word.to_le_bytes());
        }
        assert!(platform.device_write(memory.physical_address() + u64::from(slot) * 16, &bytes));
    }

    fn read(command_id: u16) -> SubmissionEntry {
        let mut entry = SubmissionEntry::read(1, 0, 1, 0x1000, 0);
        entry.set_command_id(command_id);
        entry
    }

    #[test]
    fn submission_ring_fills_to_entries_minus_one_and_wraps() {
        let platform = ArenaPlatform::new(1 << 16);
        let mut ring = submission_ring(&platform, 4);
        assert_eq!(ring.free(), 3);
        assert_eq!(ring.push(&read(0)), Some(0));
        assert_eq!(ring.push(&read(1)), Some(1));
        assert_eq!(ring.push(&read(2)), Some(2));
        assert!(ring.is_full());
        assert_eq!(ring.push(&read(3)), None, "one slot stays empty");
        assert_eq!(ring.tail(), 3);
        assert_eq!(ring.accept_head(2, 1), Ok(()));
        assert_eq!(ring.free(), 2);
        assert_eq!(ring.push(&read(3)), Some(3));
        assert_eq!(ring.push(&read(4)), Some(4), "slot 0 again");
        assert_eq!(ring.tail(), 1, "the tail wrapped");
        assert!(ring.is_full());
        assert_eq!(ring.used(), 3);
        assert_eq!(ring.accept_head(1, 4), Ok(()));
        assert_eq!(ring.used(), 0);
        assert_eq!(ring.free(), 3);
    }

    #[test]
    fn possible_heads_lie_between_the_command_and_the_tail() {
        let platform = ArenaPlatform::new(1 << 16);
        let check = |head: u16, sequence: u64| {
            let mut ring = submission_ring(&platform, 8);
            for id in 0..5 {
                ring.push(&read(id));
            }
            ring.accept_head(2, 1).unwrap(); // commands 2, 3, 4 (slots 2-4) outstanding; tail 5
            let outcome = ring.accept_head(head, sequence);
            (outcome, ring.head())
        };
        assert_eq!(check(2, 1), (Ok(()), 2), "an earlier command proves nothing new");
        assert_eq!(check(5, 2), (Ok(()), 5));
        assert_eq!(check(4, 3), (Ok(()), 4), "command 3 fetched: head at least 4");
        let known = ImpossibleHead { known_head: 2, tail: 5 };
        assert_eq!(check(3, 3), (Err(known), 4), "before the command: keep what it proves");
        assert_eq!(check(6, 2), (Err(known), 3), "past the tail");
        assert_eq!(check(1, 1), (Err(known), 2), "behind the head");
        assert_eq!(check(8, 1), (Err(known), 2), "outside the ring");
        assert_eq!(check(0xffff, 4), (Err(known), 5));
    }

    #[test]
    fn a_head_equal_to_the_ring_size_is_impossible_even_after_a_lap() {
        let platform = ArenaPlatform::new(1 << 16);
        let mut ring = submission_ring(&platform, 8);
        for id in 0..7 {
            ring.push(&read(id));
        }
        ring.accept_head(7, 6).unwrap();
        ring.push(&read(7));
        ring.accept_head(0, 7).unwrap(); // a whole lap fetched: head back at 0
        ring.push(&read(8));
        ring.push(&read(9));
        assert_eq!(ring.accept_head(8, 7), Err(ImpossibleHead { known_head: 0, tail: 2 }));
    }

    #[test]
    fn a_late_completion_after_its_slot_was_reused_is_possible() {
        // Commands 0-2 in slots 0-2; the controller fetches all three and completes command 2
        // first (SQHD 3); the host reuses slots 3, 0 and 1; then command 0 completes, still
        // reporting SQHD 3. Its slot 0 now holds command 4, not yet fetched: the report is
        // possible and must not be taken for command 4's.
        let platform = ArenaPlatform::new(1 << 16);
        let mut ring = submission_ring(&platform, 4);
        for id in 0..3 {
            ring.push(&read(id));
        }
        assert_eq!(ring.accept_head(3, 2), Ok(()));
        assert_eq!(ring.push(&read(3)), Some(3));
        assert_eq!(ring.push(&read(4)), Some(4));
        assert_eq!(ring.push(&read(5)), Some(5));
        assert_eq!(ring.accept_head(3, 0), Ok(()));
        assert_eq!(ring.head(), 3);
        assert_eq!(ring.accept_head(1, 4), Ok(()), "command 4 (slot 0) fetched: head 1");
        assert_eq!(ring.accept_head(0, 3), Err(ImpossibleHead { known_head: 1, tail: 2 }), "behind");
    }

    #[test]
    fn notify_cleans_what_was_pushed_then_orders_it_then_rings_once() {
        let platform = ArenaPlatform::new(1 << 16);
        let registers = Doorbells::default();
        let mut ring = submission_ring(&platform, 4);
        let base = ring.memory.physical_address();
        assert!(!ring.notify(&registers, &platform), "nothing pushed, nothing written");
        for id in 0..3 {
            ring.push(&read(id));
        }
        assert!(ring.notify(&registers, &platform));
        ring.accept_head(3, 2).unwrap();
        let start = platform.log().len();
        ring.push(&read(3));
        ring.push(&read(4)); // slot 3, then slot 0 across the wrap
        assert!(ring.notify(&registers, &platform));
        let entry = |slot: u64| ByteRange::new(base + slot * 64, 64);
        assert_eq!(
            platform.log().since(start),
            [
                PlatformEvent::CpuWrite(entry(3)),
                PlatformEvent::CpuWrite(entry(0)),
                PlatformEvent::Clean(entry(3)),
                PlatformEvent::Clean(entry(0)),
                PlatformEvent::Barrier(BarrierKind::Store),
                PlatformEvent::MmioWrite { block: "test", offset_bytes: SQ_DOORBELL, value: 1 },
            ]
        );
        assert!(!ring.notify(&registers, &platform), "told once");
        assert_eq!(*registers.0.borrow(), [(SQ_DOORBELL, 3), (SQ_DOORBELL, 1)]);
    }

    #[test]
    fn notify_cleans_exactly_the_new_entries() {
        let platform = ArenaPlatform::new(1 << 16);
        let registers = Doorbells::default();
        let mut ring = submission_ring(&platform, 4);
        let base = ring.memory.physical_address();
        let cleans_of_next_notify = |ring: &mut SubmissionRing, pushes: u16| {
            for id in 0..pushes {
                ring.push(&read(id));
            }
            let start = platform.log().len();
            assert!(ring.notify(&registers, &platform));
            let cleans: Vec<ByteRange> = platform
                .log()
                .since(start)
                .iter()
                .filter_map(|event| match event {
                    PlatformEvent::Clean(range) => Some(*range),
                    _ => None,
                })
                .collect();
            cleans
        };
        let slots = |first: u64, count: u64| ByteRange::new(base + first * 64, count * 64);
        assert_eq!(cleans_of_next_notify(&mut ring, 2), [slots(0, 2)], "no wrap: the new entries only");
        ring.accept_head(2, 1).unwrap();
        assert_eq!(cleans_of_next_notify(&mut ring, 2), [slots(2, 2)], "the tail lands on 0: one clean");
        assert_eq!(ring.tail(), 0);
    }

    #[test]
    fn pop_reads_the_phase_then_orders_then_reads_the_rest() {
        let platform = ArenaPlatform::new(1 << 16);
        let registers = Doorbells::default();
        let (mut ring, memory) = completion_ring(&platform, 2);
        let base = memory.physical_address();
        let start = platform.log().len();
        assert_eq!(ring.pop(&platform), None, "nothing posted");
        assert!(!ring.release(&registers), "nothing to release");
        post(&platform, &memory, 0, 7, true);
        assert_eq!(ring.pop(&platform).map(|entry| entry.command_id()), Some(7));
        assert!(ring.release(&registers));
        let phase = ByteRange::new(base + 12, 4);
        assert_eq!(
            platform.log().since(start),
            [
                // An empty peek costs an invalidate and one load: no barrier.
                PlatformEvent::Invalidate(ByteRange::new(base, 16)),
                PlatformEvent::CpuRead(phase),
                PlatformEvent::DeviceWrite(ByteRange::new(base, 16)),
                PlatformEvent::Invalidate(ByteRange::new(base, 16)),
                PlatformEvent::CpuRead(phase),
                PlatformEvent::Barrier(BarrierKind::Load),
                PlatformEvent::CpuRead(ByteRange::new(base, 12)),
                PlatformEvent::Barrier(BarrierKind::Load),
                PlatformEvent::MmioWrite { block: "test", offset_bytes: CQ_DOORBELL, value: 1 },
            ]
        );
        assert_eq!(platform.log().violations(), Vec::<std::string::String>::new());
    }

    #[test]
    fn rings_in_uncached_memory_leave_out_the_cache_maintenance_but_keep_the_order() {
        let platform = ArenaPlatform::new(1 << 16);
        platform.uncached.set(true);
        let registers = Doorbells::default();
        let mut submission = submission_ring(&platform, 4);
        let (mut completion, memory) = completion_ring(&platform, 2);
        let (sq, cq) = (submission.memory.physical_address(), memory.physical_address());
        let start = platform.log().len();
        submission.push(&read(1));
        assert!(submission.notify(&registers, &platform));
        post(&platform, &memory, 0, 1, true);
        assert_eq!(completion.pop(&platform).map(|entry| entry.command_id()), Some(1));
        assert!(completion.release(&registers));
        assert_eq!(
            platform.log().since(start),
            [
                PlatformEvent::CpuWrite(ByteRange::new(sq, 64)),
                PlatformEvent::Barrier(BarrierKind::Store),
                PlatformEvent::MmioWrite { block: "test", offset_bytes: SQ_DOORBELL, value: 1 },
                PlatformEvent::DeviceWrite(ByteRange::new(cq, 16)),
                PlatformEvent::CpuRead(ByteRange::new(cq + 12, 4)),
                PlatformEvent::Barrier(BarrierKind::Load),
                PlatformEvent::CpuRead(ByteRange::new(cq, 12)),
                PlatformEvent::Barrier(BarrierKind::Load),
                PlatformEvent::MmioWrite { block: "test", offset_bytes: CQ_DOORBELL, value: 1 },
            ]
        );
    }

    #[test]
    fn completion_ring_flips_phase_on_each_wrap_and_releases_each_batch_once() {
        let platform = ArenaPlatform::new(1 << 16);
        let registers = Doorbells::default();
        let (mut ring, memory) = completion_ring(&platform, 3);
        let mut command_id = 0;
        for pass in 0..3 {
            let phase = pass % 2 == 0;
            assert_eq!(ring.expected_phase(), phase);
            for slot in 0..3 {
                post(&platform, &memory, slot, command_id, phase);
                assert_eq!(ring.pop(&platform).unwrap().command_id(), command_id);
                command_id += 1;
            }
            assert_eq!(ring.pop(&platform), None, "the old phase is not new");
            assert!(ring.release(&registers));
        }
        assert_eq!(*registers.0.borrow(), [(CQ_DOORBELL, 0); 3]);
        assert!(!ring.expected_phase(), "fourth pass expects phase 0");
        assert_eq!(platform.log().violations(), Vec::<std::string::String>::new());
    }
}
