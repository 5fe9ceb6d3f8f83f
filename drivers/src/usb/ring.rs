//! The xHCI rings as the driver sees them (eXtensible Host Controller Interface 1.2, §4.9 "TRB
//! Ring": producer and consumer cycle state §4.9.2, Link TRBs and Toggle Cycle §4.11.5.1, the
//! event ring and its segment table §4.9.4 and §6.5; docs/usb-storage.md §1 steps 6, 8, 11 and
//! §2).
//!
//! [`ProducerRing`] is a one-segment ring the driver writes (the command ring and every transfer
//! ring): a Link TRB with Toggle Cycle closes the segment, each TD is written with its first
//! TRB's cycle bit last so that a running controller never starts a half-written TD, a Link TRB
//! inside a TD carries the chain bit (§4.11.5.1), and the space of a TD comes back only when its
//! completion event names one of its TRBs. [`EventRing`] is the one-segment event ring the
//! driver consumes by cycle bit.

use super::trb::{Trb, TRB_BYTES};
use alloc::collections::VecDeque;
use hal::barrier;
use hal::dma::{DmaAllocation, DmaRegion};
use hal::platform::Platform;

/// Where a TD sits on its ring: four words and no padding, so that keeping and comparing one
/// on every command moves registers (a `u64` and a `bool` in it had every copy go through
/// `memcpy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Index of the TD's first TRB.
    pub first_index: u32,
    /// Index of its last TRB.
    pub last_index: u32,
    /// TRBs of the TD (Link TRBs not counted).
    pub trb_count: u32,
    /// The enqueue position (bits 30:0) and producer cycle (bit 31) right after the TD.
    next: u32,
}

impl Placement {
    const NEXT_CYCLE: u32 = 1 << 31;

    /// The enqueue position right after the TD: where a Set TR Dequeue Pointer that skips it
    /// points (never a Link TRB).
    pub fn next_index(&self) -> u32 {
        self.next & !Self::NEXT_CYCLE
    }

    /// The producer cycle state at [`Self::next_index`].
    pub fn next_cycle(&self) -> bool {
        self.next & Self::NEXT_CYCLE != 0
    }
}

/// The ring has no room for the TD now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingFull {
    pub needed: u32,
    pub free: u32,
}

/// A one-segment ring the driver produces into.
pub struct ProducerRing<'p> {
    memory: DmaRegion<'p>,
    bus_base: u64,
    /// TRB slots in the segment, the Link TRB in the last one.
    slots: u32,
    enqueue: u32,
    cycle: bool,
    outstanding: VecDeque<Placement>,
    used: u32,
    /// Whether the platform's cache maintenance does anything for this ring (asked once).
    maintained: Option<bool>,
}

impl<'p> ProducerRing<'p> {
    /// A ring over `memory` (zeroed, 64-byte aligned, not crossing 64 KiB: §6 Table 6-1, with the
    /// bus address the controller uses for it), with `slots` TRBs (at least 4, the last the Link
    /// TRB). The producer cycle state starts at 1 (§4.9.2).
    pub fn new(memory: DmaAllocation<'p>, slots: u32) -> Self {
        let DmaAllocation { region: memory, bus_address: bus_base } = memory;
        assert!(slots >= 4, "a ring needs room for a TD and its Link TRB");
        assert!(memory.length_bytes() >= slots as usize * TRB_BYTES, "ring memory too small");
        assert!(bus_base.is_multiple_of(64), "rings are 64-byte aligned");
        let ring = ProducerRing {
            memory,
            bus_base,
            slots,
            enqueue: 0,
            cycle: true,
            outstanding: VecDeque::new(),
            used: 0,
            maintained: None,
        };
        ring.write_trb(slots - 1, &Trb::link(bus_base));
        ring
    }

    /// The ring's dequeue pointer for a context or CRCR: its base with the cycle state.
    pub fn initial_dequeue(&self) -> u64 {
        self.bus_base | 1
    }

    /// TRBs a TD may still use (one slot always stays empty).
    pub fn free(&self) -> u32 {
        self.slots - 2 - self.used
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    pub fn bus_of(&self, index: u32) -> u64 {
        self.bus_base + u64::from(index) * TRB_BYTES as u64
    }

    /// The index of the TRB at bus address `pointer`, if it is one of this ring's.
    pub fn index_of(&self, pointer: u64) -> Option<u32> {
        let offset = pointer.checked_sub(self.bus_base)?;
        let index = offset / TRB_BYTES as u64;
        (offset.is_multiple_of(TRB_BYTES as u64) && index < u64::from(self.slots)).then_some(index as u32)
    }

    /// The current enqueue position and producer cycle state.
    pub fn enqueue_position(&self) -> (u64, bool) {
        (self.bus_of(self.enqueue), self.cycle)
    }

    fn write_trb(&self, index: u32, trb: &Trb) {
        self.memory.write_words(index as usize * TRB_BYTES, &trb.dwords);
    }

    /// Passes the Link TRB: hands it to the controller with the current cycle (and the chain
    /// bit when a TD continues after it), then toggles the producer cycle state.
    fn pass_link(&mut self, inside_td: bool) {
        let mut link = Trb::link(self.bus_base);
        link.set_cycle(self.cycle);
        link.set_chain(inside_td);
        self.write_trb(self.slots - 1, &link);
        self.cycle = !self.cycle;
        self.enqueue = 0;
    }

    /// Writes one TD (`trbs` chained as the caller built them) and makes the cache see it.
    /// The first TRB's cycle bit is written last, after a barrier (§4.11.1 "the first TRB of a
    /// TD shall be written last"), so a running controller sees all of the TD or none of it.
    pub fn enqueue_td<P: Platform>(&mut self, platform: &P, trbs: &[Trb]) -> Result<Placement, RingFull> {
        let needed = trbs.len() as u32;
        assert!(needed > 0, "a TD has at least one TRB");
        if needed > self.free() {
            return Err(RingFull { needed, free: self.free() });
        }
        let first_index = self.enqueue;
        let first_cycle = self.cycle;
        let mut last_index = first_index;
        for (position, trb) in trbs.iter().enumerate() {
            let mut placed = *trb;
            placed.set_cycle(if position == 0 { !self.cycle } else { self.cycle });
            self.write_trb(self.enqueue, &placed);
            last_index = self.enqueue;
            self.enqueue += 1;
            if self.enqueue == self.slots - 1 {
                let continues = position + 1 < trbs.len();
                self.pass_link(continues);
            }
        }
        // Everything but the first TRB's ownership is in memory; now give the TD away.
        let memory = self.memory.buffer();
        let maintained = *self.maintained.get_or_insert_with(|| platform.needs_cache_maintenance(&memory));
        if maintained {
            platform.clean_for_device(&self.memory.slice(0, self.slots as usize * TRB_BYTES));
        }
        barrier::store_before_doorbell();
        let mut first = trbs[0];
        first.set_cycle(first_cycle);
        self.memory.write_words(first_index as usize * TRB_BYTES + 12, &[first.dwords[3]]);
        if maintained {
            platform.clean_for_device(&self.memory.slice(first_index as usize * TRB_BYTES, TRB_BYTES));
        }
        let placement = Placement {
            first_index,
            last_index,
            trb_count: needed,
            next: self.enqueue | if self.cycle { Placement::NEXT_CYCLE } else { 0 },
        };
        self.outstanding.push_back(placement);
        self.used += needed;
        Ok(placement)
    }

    /// Distance from `from` to `to` going forward over the usable slots (the Link TRB skipped).
    fn forward_distance(&self, from: u32, to: u32) -> u32 {
        let usable = self.slots - 1;
        (to + usable - from) % usable
    }

    fn td_contains(&self, placement: &Placement, index: u32) -> bool {
        index < self.slots - 1 && self.forward_distance(placement.first_index, index) < placement.trb_count
    }

    /// Which TRB of `placement` (0 = its first) the TRB at `pointer` is.
    pub fn position_in(&self, placement: &Placement, pointer: u64) -> Option<u32> {
        let index = self.index_of(pointer)?;
        self.td_contains(placement, index).then(|| self.forward_distance(placement.first_index, index))
    }

    /// The outstanding TD that holds the TRB at `pointer`, without retiring it.
    pub fn find(&self, pointer: u64) -> Option<Placement> {
        let index = self.index_of(pointer)?;
        self.outstanding.iter().copied().find(|placement| self.td_contains(placement, index))
    }

    /// Retires the outstanding TD holding the TRB at `pointer` and every older one (the
    /// controller works through a ring in order). Returns it and how many older TDs went with
    /// it; `None` when no outstanding TD holds that TRB.
    pub fn retire(&mut self, pointer: u64) -> Option<(Placement, usize)> {
        let index = self.index_of(pointer)?;
        let position = self.outstanding.iter().position(|placement| self.td_contains(placement, index))?;
        let mut retired = None;
        for _ in 0..=position {
            let placement = self.outstanding.pop_front()?;
            self.used -= placement.trb_count;
            retired = Some(placement);
        }
        retired.map(|placement| (placement, position))
    }

    /// Retires every outstanding TD (after a Set TR Dequeue Pointer to [`Self::enqueue_position`]).
    pub fn retire_all(&mut self) -> usize {
        let count = self.outstanding.len();
        self.outstanding.clear();
        self.used = 0;
        count
    }

    /// The TRB at `index` as the controller would read it (host tests).
    #[cfg(test)]
    pub fn read_trb_for_test(&self, index: u32, trb: &mut Trb) {
        self.memory.read_words(index as usize * TRB_BYTES, &mut trb.dwords);
    }

    /// The oldest outstanding TD.
    pub fn oldest(&self) -> Option<Placement> {
        self.outstanding.front().copied()
    }
}

/// One event ring segment table entry (§6.5): base, size in TRBs, reserved.
pub fn segment_table_entry(segment_bus: u64, trbs: u32) -> [u32; 4] {
    [segment_bus as u32, (segment_bus >> 32) as u32, trbs, 0]
}

/// A one-segment event ring the driver consumes (§4.9.4): an entry is new while its cycle bit
/// equals the consumer cycle state, which starts at 1 and flips on every wrap.
pub struct EventRing<'p> {
    memory: DmaRegion<'p>,
    bus_base: u64,
    entries: u32,
    dequeue: u32,
    cycle: bool,
    /// Whether the platform's cache maintenance does anything for this ring (asked once).
    maintained: Option<bool>,
}

impl<'p> EventRing<'p> {
    /// An event ring over zeroed `memory` (QEMU accepts 16 to 4096 entries: docs/usb-storage.md
    /// §1 step 8).
    pub fn new(memory: DmaAllocation<'p>, entries: u32) -> Self {
        let DmaAllocation { region: memory, bus_address: bus_base } = memory;
        assert!((16..=4096).contains(&entries), "event ring segments hold 16 to 4096 TRBs");
        assert!(memory.length_bytes() >= entries as usize * TRB_BYTES, "event ring memory too small");
        EventRing { memory, bus_base, entries, dequeue: 0, cycle: true, maintained: None }
    }

    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// The dequeue pointer to write to ERDP.
    pub fn dequeue_bus(&self) -> u64 {
        self.bus_base + u64::from(self.dequeue) * TRB_BYTES as u64
    }

    /// Takes the next event, if the controller has written one.
    pub fn pop<P: Platform>(&mut self, platform: &P) -> Option<Trb> {
        let offset = self.dequeue as usize * TRB_BYTES;
        let memory = self.memory.buffer();
        if *self.maintained.get_or_insert_with(|| platform.needs_cache_maintenance(&memory)) {
            platform.invalidate_for_cpu(&self.memory.slice(offset, TRB_BYTES));
        }
        let control = self.memory.read_u32(offset + 12);
        if (control & 1 != 0) != self.cycle {
            return None;
        }
        barrier::load_after_completion();
        let mut trb = Trb { dwords: [0, 0, 0, control] };
        self.memory.read_words(offset, &mut trb.dwords[..3]);
        self.dequeue += 1;
        if self.dequeue == self.entries {
            self.dequeue = 0;
            self.cycle = !self.cycle;
        }
        Some(trb)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::trb::{flags, trb_type};
    use super::*;
    use core::cell::RefCell;
    use hal::testing::ArenaPlatform;
    use std::rc::Rc;
    use std::vec::Vec;

    fn region(platform: &ArenaPlatform, bytes: usize) -> DmaRegion<'_> {
        DmaRegion::allocate(platform, bytes, 4096).unwrap()
    }

    /// A ring's memory as the controller sees it, at a made-up bus address.
    fn at_bus(region: DmaRegion<'_>, bus_address: u64) -> DmaAllocation<'_> {
        DmaAllocation { region, bus_address }
    }

    fn read_trb(memory: &DmaRegion, index: u32) -> Trb {
        let offset = index as usize * TRB_BYTES;
        Trb { dwords: core::array::from_fn(|w| memory.read_u32(offset + 4 * w)) }
    }

    /// A consumer as the controller runs one (§4.9.2): fetch at the dequeue pointer while the
    /// cycle bit matches, follow Link TRBs and toggle on TC. Returns the TDs it found (each a
    /// list of (index, TRB)), stopping at the first TRB it does not own.
    struct Consumer {
        dequeue: u32,
        cycle: bool,
    }

    impl Consumer {
        fn run(&mut self, memory: &DmaRegion, slots: u32) -> Vec<Vec<(u32, Trb)>> {
            let mut tds = Vec::new();
            let mut current = Vec::new();
            for _ in 0..4 * slots {
                let trb = read_trb(memory, self.dequeue);
                if trb.cycle() != self.cycle {
                    break;
                }
                if trb.trb_type() == trb_type::LINK {
                    assert_eq!(trb.parameter(), 0x8000_0000, "link back to the segment");
                    assert_eq!(trb.is_chained(), !current.is_empty(), "CH on a link inside a TD only");
                    self.dequeue = 0;
                    if trb.dwords[3] & flags::TOGGLE_CYCLE != 0 {
                        self.cycle = !self.cycle;
                    }
                    continue;
                }
                current.push((self.dequeue, trb));
                self.dequeue += 1;
                if !trb.is_chained() {
                    tds.push(core::mem::take(&mut current));
                }
            }
            assert!(current.is_empty(), "a TD was visible only in part");
            tds
        }
    }

    fn td(length: u32, pieces: usize) -> Vec<Trb> {
        (0..pieces)
            .map(|i| {
                let last = i + 1 == pieces;
                Trb::normal(
                    0x10_0000 * (i as u64 + 1),
                    length,
                    0,
                    if last { flags::IOC } else { flags::CHAIN },
                )
            })
            .collect()
    }

    #[test]
    fn tds_wrap_with_the_cycle_bit_and_chained_links() {
        let platform = ArenaPlatform::new(1 << 20);
        let memory = region(&platform, 4096);
        let mut ring = ProducerRing::new(at_bus(memory, 0x8000_0000), 8);
        let mut consumer = Consumer { dequeue: 0, cycle: true };
        assert_eq!(ring.free(), 6);
        let mut seen = 0;
        // TDs of 1, 2 and 3 TRBs, many times round an 8-slot ring (7 usable).
        for round in 0..40u32 {
            let pieces = (round % 3 + 1) as usize;
            let placement = ring.enqueue_td(&platform, &td(512 + round, pieces)).unwrap();
            let tds = consumer.run(&ring.memory, 8);
            assert_eq!(tds.len(), 1, "round {round}");
            assert_eq!(tds[0].len(), pieces);
            assert_eq!(tds[0][0].0, placement.first_index);
            assert_eq!(tds[0][pieces - 1].0, placement.last_index);
            assert_eq!(tds[0][0].1.transfer_length(), 512 + round);
            assert_ne!(placement.next_index(), 7, "the dequeue after a TD is never the Link TRB");
            if placement.last_index < placement.first_index {
                assert_eq!(ring.find(ring.bus_of(7)), None, "a TD across the Link TRB does not own it");
                assert_eq!(ring.position_in(&placement, ring.bus_of(7)), None);
                assert_eq!(ring.position_in(&placement, ring.bus_of(0)), Some(7 - placement.first_index));
            }
            let (retired, older) = ring.retire(ring.bus_of(placement.last_index)).unwrap();
            assert_eq!((retired, older), (placement, 0));
            assert_eq!(ring.free(), 6);
            seen += 1;
        }
        assert_eq!(seen, 40);
        assert!(platform.clean_calls.get() >= 80, "every TD is cleaned for the device");
    }

    /// Every clean the arena sees, as (CPU address, bytes).
    type Cleans = Rc<RefCell<Vec<(usize, usize)>>>;

    fn record_cleans(platform: &ArenaPlatform) -> Cleans {
        let cleans: Cleans = Rc::default();
        let record = cleans.clone();
        platform
            .on_clean(move |_, buffer| record.borrow_mut().push((buffer.cpu_address, buffer.length_bytes)));
        cleans
    }

    #[test]
    fn the_first_trb_is_handed_over_last() {
        let platform = ArenaPlatform::new(1 << 20);
        let memory = region(&platform, 4096);
        // Whenever the ring cleans its whole segment (all TRBs but the first's ownership
        // written), count the TDs a controller could see at that moment.
        let visible_at_clean: Rc<RefCell<Vec<usize>>> = Rc::default();
        let (record, watched) = (visible_at_clean.clone(), memory.buffer());
        platform.on_clean(move |platform, buffer| {
            if buffer.length_bytes > TRB_BYTES {
                let memory = DmaRegion::of_buffer(platform, watched).unwrap();
                record.borrow_mut().push(Consumer { dequeue: 0, cycle: true }.run(&memory, 16).len());
            }
        });
        let mut ring = ProducerRing::new(at_bus(memory, 0x8000_0000), 16);
        let placement = ring.enqueue_td(&platform, &td(100, 3)).unwrap();
        // While the rest of the TD was written, a controller could see none of it.
        assert_eq!(*visible_at_clean.borrow(), [0]);
        // Afterwards all of it.
        let tds = Consumer { dequeue: 0, cycle: true }.run(&memory, 16);
        assert_eq!(tds.len(), 1);
        assert_eq!(tds[0].len(), 3);
        assert_eq!(placement.trb_count, 3);
    }

    #[test]
    fn every_trb_written_is_cleaned_for_the_controller_after_it_is_written() {
        let platform = ArenaPlatform::new(1 << 20);
        let cleans = record_cleans(&platform);
        let memory = region(&platform, 4096);
        let mut ring = ProducerRing::new(at_bus(memory, 0x8000_0000), 16);
        for round in 0..20 {
            cleans.borrow_mut().clear();
            let placement = ring.enqueue_td(&platform, &td(64, 1 + round % 3)).unwrap();
            let cleaned = cleans.borrow();
            let covers = |(address, bytes): &(usize, usize), index: u32| {
                let trb = memory.buffer().cpu_address + index as usize * TRB_BYTES;
                *address <= trb && trb + TRB_BYTES <= address + bytes
            };
            // Every TRB of the TD (and the Link TRB) is in a clean of the whole TD write...
            for index in 0..16 {
                assert!(cleaned.iter().any(|c| covers(c, index)), "TRB {index} never cleaned");
            }
            // ...and the last clean covers the first TRB, whose control word is written last.
            assert!(covers(cleaned.last().unwrap(), placement.first_index), "round {round}");
            ring.retire(ring.bus_of(placement.first_index)).unwrap();
        }
    }

    #[test]
    fn full_rings_refuse_and_space_returns_in_order() {
        let platform = ArenaPlatform::new(1 << 20);
        let mut ring = ProducerRing::new(at_bus(region(&platform, 4096), 0x8000_0000), 8);
        let a = ring.enqueue_td(&platform, &td(1, 2)).unwrap();
        let b = ring.enqueue_td(&platform, &td(1, 3)).unwrap();
        assert_eq!(ring.enqueue_td(&platform, &td(1, 2)), Err(RingFull { needed: 2, free: 1 }));
        let c = ring.enqueue_td(&platform, &td(1, 1)).unwrap();
        assert_eq!(ring.free(), 0);
        assert_eq!(ring.outstanding(), 3);
        // B's event retires A as well (the controller finished A first).
        let (retired, older) = ring.retire(ring.bus_of(b.first_index) + 16).unwrap();
        assert_eq!((retired, older), (b, 1));
        assert_eq!(ring.oldest(), Some(c));
        assert_eq!(ring.find(ring.bus_of(a.first_index)), None, "A is gone");
        assert_eq!(ring.retire(0x1234), None, "not this ring's TRB");
        assert_eq!(ring.retire(ring.bus_of(7)), None, "the Link TRB belongs to no TD");
        assert_eq!(ring.index_of(ring.bus_of(7)), Some(7));
        assert_eq!(ring.index_of(ring.bus_of(8)), None, "one past the segment");
        assert_eq!(ring.index_of(0x8000_0008), None, "not on a TRB boundary");
        assert_eq!(ring.index_of(0x7fff_fff0), None, "below the segment");
        assert_eq!(ring.find(ring.bus_of(c.first_index)), Some(c));
        assert_eq!(ring.retire_all(), 1);
        assert_eq!(ring.free(), 6);
        let (enqueue, cycle) = ring.enqueue_position();
        assert_eq!((enqueue, cycle), (ring.bus_of(c.next_index()), c.next_cycle()));
    }

    #[test]
    fn a_td_that_ends_before_the_link_passes_it_at_once() {
        let platform = ArenaPlatform::new(1 << 20);
        let mut ring = ProducerRing::new(at_bus(region(&platform, 4096), 0x8000_0000), 5);
        let warm_up = ring.enqueue_td(&platform, &td(1, 1)).unwrap();
        ring.retire(ring.bus_of(warm_up.first_index)).unwrap();
        let first = ring.enqueue_td(&platform, &td(1, 3)).unwrap();
        assert_eq!((first.first_index, first.last_index), (1, 3));
        assert_eq!((first.next_index(), first.next_cycle()), (0, false), "link passed, cycle toggled");
        let link = read_trb(&ring.memory, 4);
        assert!(link.cycle() && !link.is_chained(), "the link between TDs carries no chain bit");
        ring.retire(ring.bus_of(first.first_index)).unwrap();
        let second = ring.enqueue_td(&platform, &td(1, 2)).unwrap();
        assert_eq!(second.first_index, 0);
        assert!(!read_trb(&ring.memory, 0).cycle(), "second pass writes cycle 0");
    }

    #[test]
    fn events_are_taken_by_cycle_bit_across_wraps() {
        let platform = ArenaPlatform::new(1 << 20);
        let memory = region(&platform, 4096);
        let mut ring = EventRing::new(at_bus(memory, 0x9000_0000), 16);
        assert_eq!(ring.entries(), 16);
        assert_eq!(ring.pop(&platform), None);
        let mut producer_cycle = true;
        let mut slot = 0u32;
        for n in 0..40u32 {
            let offset = slot as usize * TRB_BYTES;
            memory.write_words(offset, &[n]);
            memory.write_words(offset + 12, &[(33 << 10) | u32::from(producer_cycle)]);
            slot += 1;
            if slot == 16 {
                slot = 0;
                producer_cycle = !producer_cycle;
            }
            let event = ring.pop(&platform).expect("a new event");
            assert_eq!(event.dwords[0], n);
            assert_eq!(ring.pop(&platform), None, "the next slot is old");
        }
        assert_eq!(ring.dequeue_bus(), 0x9000_0000 + 8 * 16);
        assert!(platform.invalidate_calls.get() >= 80);
        assert_eq!(segment_table_entry(0x1_2345_6780, 256), [0x2345_6780, 1, 256, 0]);
    }
}
