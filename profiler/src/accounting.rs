//! The profile's bookkeeping, apart from QEMU: which code each executed translation block belongs
//! to (its function and the calls that led there, from a shadow call stack), and which account of
//! the kernel's CPU meter (`bench::cpu_cost`) its instructions end up in.
//!
//! The kernel's meter charges the instructions retired between two of its laps to the account the
//! second lap names, less what one lap costs (measured when each run starts). The profiler sees
//! the same laps: QEMU tells it when `CpuMeter::lap` starts (the account in `x1`; a lap that ends a
//! pass of the loop says whether the pass did I/O) and returns (the instructions it charged in
//! `x0`), and when the run's metering ends (`bench::cpu_cost::run_metered`, the run's completions
//! in `x0`). Between
//! two laps it counts instructions per code location; at the lap it charges them to the lap's
//! account, and puts the difference between what the meter charged and what it counted (the lap's
//! own call-site instructions, which the meter's calibration removes) on the location that called
//! the lap. So each account's per-location counts add up to exactly what the meter charged.
#![forbid(unsafe_code)]

use std::collections::HashMap;

use bench::cpu_cost::Account;

use crate::format::{NodeRecord, RunRecord, SlotRecord};

/// How a translation block ends: the shadow call stack follows calls and returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockEnd {
    /// `BL` or `BLR`: the next block runs in a new frame.
    Call,
    /// `RET`: the next block runs in the caller's frame.
    Return,
    Other,
}

/// A translation block as QEMU translated it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockShape {
    /// Guest virtual address of its first instruction.
    pub start: u64,
    pub instructions: u32,
    pub end: BlockEnd,
}

/// Deeper call stacks than this are counted in the deepest frame.
const MAX_STACK_DEPTH: usize = 256;

/// One place in the call tree: a function entered from its parent's frame.
#[derive(Clone, Copy, Debug)]
struct Node {
    parent: u32,
    function: u64,
}

/// The root of the call tree (code running before any call was seen).
const ROOT: u32 = 0;

/// Instructions of one block run in one call-tree place.
#[derive(Clone, Debug)]
struct Slot {
    node: u32,
    block_start: u64,
    block_instructions: u32,
    /// Counted since the last lap.
    segment: i64,
    /// Charged to `Account::Pending`, its pass not yet ended.
    pending: i64,
    /// Per account of the meter, this run.
    totals: [i64; ACCOUNT_COUNT],
    in_segment: bool,
    in_pending: bool,
    in_run: bool,
}

/// The meter's accounts ([`Account`] as index).
pub const ACCOUNT_COUNT: usize = 5;

/// The accounts a profile reports: the ones the `cpu per I/O` line and the trace cost show.
pub const REPORTED_ACCOUNTS: [Account; 3] = [Account::Driver, Account::Bookkeeping, Account::Recording];

/// The [`Account`] a lap's argument names.
pub fn account_from_register(value: u64) -> Option<Account> {
    [
        Account::Driver,
        Account::Bookkeeping,
        Account::Pending,
        Account::Excluded,
        Account::Recording,
        Account::PassDidIo,
        Account::PassWaited,
    ]
    .into_iter()
    .find(|account| *account as u64 == value)
}

/// Where a lap naming `account` charges what ran since the previous lap, as the meter does:
/// a pass-ending lap charges bookkeeping or nothing.
fn charged_account(account: Account) -> Account {
    match account {
        Account::PassDidIo => Account::Bookkeeping,
        Account::PassWaited => Account::Excluded,
        other => other,
    }
}

/// Where the instructions of the block that ran last go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// Inside the meter's own lap: never charged (the meter removes its cost).
    Meter,
    Slot(u32),
}

struct Block {
    shape: BlockShape,
    /// The slot this block used last time, for the node it ran in then.
    cached: Option<(u32, u32)>,
}

/// Follows the guest through blocks and laps and keeps per-run counts.
pub struct Profiler {
    lap_function: u64,
    nodes: Vec<Node>,
    children: HashMap<(u32, u64), u32>,
    stack: Vec<u32>,
    /// Calls beyond [`MAX_STACK_DEPTH`] still to be returned from.
    overflow: u32,
    /// The stack depth of the lap's frame while the lap runs.
    meter_depth: Option<usize>,
    blocks: Vec<Block>,
    block_ids: HashMap<(u64, u32, u8), u32>,
    slots: Vec<Slot>,
    slot_ids: HashMap<(u32, u32), u32>,
    /// The block that ran last and where its instructions go.
    previous: Option<(u32, Place)>,
    segment: Vec<u32>,
    pending: Vec<u32>,
    in_run: Vec<u32>,
    lap_account: Option<Account>,
    /// The slot whose block called the running lap.
    lap_call_site: Option<u32>,
    /// Instructions that ran inside the meter's laps this run.
    meter_instructions: u64,
    laps: u64,
    nodes_reported: usize,
}

impl Profiler {
    /// `lap_function`: the address of `CpuMeter::lap`, whose frames are the meter's own work.
    pub fn new(lap_function: u64) -> Profiler {
        Profiler {
            lap_function,
            nodes: vec![Node { parent: ROOT, function: 0 }],
            children: HashMap::new(),
            stack: Vec::new(),
            overflow: 0,
            meter_depth: None,
            blocks: Vec::new(),
            block_ids: HashMap::new(),
            slots: Vec::new(),
            slot_ids: HashMap::new(),
            previous: None,
            segment: Vec::new(),
            pending: Vec::new(),
            in_run: Vec::new(),
            lap_account: None,
            lap_call_site: None,
            meter_instructions: 0,
            laps: 0,
            nodes_reported: 1,
        }
    }

    /// The id the execution callbacks of a newly translated block carry (one per shape).
    pub fn block_id(&mut self, shape: BlockShape) -> u32 {
        let key = (shape.start, shape.instructions, shape.end as u8);
        if let Some(&id) = self.block_ids.get(&key) {
            return id;
        }
        let id = self.blocks.len() as u32;
        self.blocks.push(Block { shape, cached: None });
        self.block_ids.insert(key, id);
        id
    }

    /// Block `id` starts; the block before it ran `executed_before` of its instructions (fewer
    /// than all when QEMU left it early, e.g. to redo a device access as the last instruction).
    pub fn block_started(&mut self, id: u32, executed_before: u64) {
        let mut called_from = None;
        let mut returned = false;
        if let Some((previous, place)) = self.previous.take() {
            let shape = self.blocks[previous as usize].shape;
            let executed = executed_before.min(u64::from(shape.instructions));
            match place {
                Place::Meter => self.meter_instructions += executed,
                Place::Slot(slot) => self.add_to_segment(slot, executed as i64),
            }
            if executed == u64::from(shape.instructions) {
                match shape.end {
                    BlockEnd::Call => called_from = Some(place),
                    BlockEnd::Return => returned = true,
                    BlockEnd::Other => {}
                }
            }
        }
        let start = self.blocks[id as usize].shape.start;
        if let Some(call_site) = called_from {
            self.push(start, call_site);
        } else if returned {
            self.pop();
        }
        let place = if self.meter_depth.is_some() { Place::Meter } else { Place::Slot(self.slot_for(id)) };
        self.previous = Some((id, place));
    }

    fn push(&mut self, function: u64, call_site: Place) {
        if self.stack.len() >= MAX_STACK_DEPTH {
            self.overflow += 1;
            return;
        }
        let parent = self.stack.last().copied().unwrap_or(ROOT);
        let next_id = self.nodes.len() as u32;
        let node = *self.children.entry((parent, function)).or_insert(next_id);
        if node == next_id {
            self.nodes.push(Node { parent, function });
        }
        self.stack.push(node);
        if function == self.lap_function && self.meter_depth.is_none() {
            self.meter_depth = Some(self.stack.len());
            self.lap_call_site = match call_site {
                Place::Slot(slot) => Some(slot),
                Place::Meter => None,
            };
        }
    }

    fn pop(&mut self) {
        if self.overflow > 0 {
            self.overflow -= 1;
            return;
        }
        self.stack.pop();
        if self.meter_depth.is_some_and(|depth| self.stack.len() < depth) {
            self.meter_depth = None;
        }
    }

    fn slot_for(&mut self, block: u32) -> u32 {
        let node = self.stack.last().copied().unwrap_or(ROOT);
        if let Some((cached_node, slot)) = self.blocks[block as usize].cached {
            if cached_node == node {
                return slot;
            }
        }
        let next_id = self.slots.len() as u32;
        let slot = *self.slot_ids.entry((node, block)).or_insert(next_id);
        if slot == next_id {
            let shape = self.blocks[block as usize].shape;
            self.slots.push(Slot {
                node,
                block_start: shape.start,
                block_instructions: shape.instructions,
                segment: 0,
                pending: 0,
                totals: [0; ACCOUNT_COUNT],
                in_segment: false,
                in_pending: false,
                in_run: false,
            });
        }
        self.blocks[block as usize].cached = Some((node, slot));
        slot
    }

    fn add_to_segment(&mut self, slot: u32, instructions: i64) {
        let entry = &mut self.slots[slot as usize];
        entry.segment += instructions;
        if !entry.in_segment {
            entry.in_segment = true;
            self.segment.push(slot);
        }
    }

    /// `CpuMeter::lap` starts with `account` (its argument).
    pub fn lap_entered(&mut self, account: u64) {
        self.lap_account = account_from_register(account);
    }

    /// `CpuMeter::lap` returns, having charged `charged` instructions (its result).
    pub fn lap_returned(&mut self, charged: u64) {
        self.laps += 1;
        let counted: i64 = self.segment.iter().map(|&slot| self.slots[slot as usize].segment).sum();
        let difference = charged as i64 - counted;
        if difference != 0 {
            if let Some(site) = self.lap_call_site {
                self.add_to_segment(site, difference);
            }
        }
        let named = self.lap_account.take();
        let account = named.map(charged_account);
        for slot in core::mem::take(&mut self.segment) {
            let entry = &mut self.slots[slot as usize];
            let instructions = core::mem::take(&mut entry.segment);
            entry.in_segment = false;
            match account {
                Some(Account::Pending) => {
                    entry.pending += instructions;
                    if !entry.in_pending {
                        entry.in_pending = true;
                        self.pending.push(slot);
                    }
                }
                Some(account) => {
                    entry.totals[account as usize] += instructions;
                    if !entry.in_run {
                        entry.in_run = true;
                        self.in_run.push(slot);
                    }
                }
                None => {}
            }
        }
        match named {
            Some(Account::PassDidIo) => self.end_pass(true),
            Some(Account::PassWaited) => self.end_pass(false),
            _ => {}
        }
    }

    /// A pass of the loop ended: what was pending becomes bookkeeping when the pass did I/O, and
    /// is dropped when it only waited, as the meter does.
    fn end_pass(&mut self, did_io: bool) {
        for slot in core::mem::take(&mut self.pending) {
            let entry = &mut self.slots[slot as usize];
            let instructions = core::mem::take(&mut entry.pending);
            entry.in_pending = false;
            if did_io {
                entry.totals[Account::Bookkeeping as usize] += instructions;
                if !entry.in_run {
                    entry.in_run = true;
                    self.in_run.push(slot);
                }
            }
        }
    }

    /// The run's metering ended (`run_metered`) after `ios` completions. Returns the run's
    /// counts (and the call-tree nodes not reported before) and starts the next run from zero.
    pub fn run_finished(&mut self, ios: u64) -> RunRecord {
        let nodes = self.nodes[self.nodes_reported..]
            .iter()
            .enumerate()
            .map(|(offset, node)| NodeRecord {
                id: (self.nodes_reported + offset) as u32,
                parent: node.parent,
                function: node.function,
            })
            .collect();
        self.nodes_reported = self.nodes.len();
        let mut slots = Vec::new();
        for slot in core::mem::take(&mut self.in_run) {
            let entry = &mut self.slots[slot as usize];
            entry.in_run = false;
            let counts = REPORTED_ACCOUNTS.map(|account| entry.totals[account as usize]);
            entry.totals = [0; ACCOUNT_COUNT];
            if counts.iter().any(|&count| count != 0) {
                slots.push(SlotRecord {
                    node: entry.node,
                    block_start: entry.block_start,
                    block_instructions: entry.block_instructions,
                    counts,
                });
            }
        }
        slots.sort_by_key(|slot| (slot.node, slot.block_start));
        for slot in core::mem::take(&mut self.segment).into_iter().chain(core::mem::take(&mut self.pending)) {
            let entry = &mut self.slots[slot as usize];
            (entry.segment, entry.pending, entry.in_segment, entry.in_pending) = (0, 0, false, false);
        }
        let record =
            RunRecord { ios, laps: self.laps, meter_instructions: self.meter_instructions, nodes, slots };
        self.laps = 0;
        self.meter_instructions = 0;
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAP: u64 = 0x1000;
    const LOOP: u64 = 0x2000;
    const SUBMIT: u64 = 0x3000;

    fn shape(start: u64, instructions: u32, end: BlockEnd) -> BlockShape {
        BlockShape { start, instructions, end }
    }

    /// Runs whole blocks one after another (each fully executed).
    struct Guest {
        profiler: Profiler,
        last_length: u64,
    }

    impl Guest {
        fn new() -> Guest {
            Guest { profiler: Profiler::new(LAP), last_length: 0 }
        }

        fn run(&mut self, block: BlockShape) {
            let id = self.profiler.block_id(block);
            self.profiler.block_started(id, self.last_length);
            self.last_length = u64::from(block.instructions);
        }

        /// A lap called from a block at `site` of `site_length` instructions: the lap's own
        /// blocks, and the meter's result `charged`.
        fn lap(&mut self, site: u64, site_length: u32, account: Account, charged: u64) {
            self.run(shape(site, site_length, BlockEnd::Call));
            self.run(shape(LAP, 6, BlockEnd::Other));
            self.profiler.lap_entered(account as u64);
            self.run(shape(LAP + 24, 5, BlockEnd::Return));
            self.profiler.lap_returned(charged);
        }
    }

    fn totals(record: &RunRecord, account: usize) -> Vec<(u64, i64)> {
        record.slots.iter().map(|slot| (slot.block_start, slot.counts[account])).collect()
    }

    #[test]
    fn each_account_adds_up_to_what_the_meter_charged_with_the_difference_on_the_call_site() {
        let mut guest = Guest::new();
        guest.lap(LOOP, 4, Account::Excluded, 0);
        // Driver work: a call into submit (10 + 3 instructions) and back.
        guest.run(shape(LOOP + 0x10, 2, BlockEnd::Call));
        guest.run(shape(SUBMIT, 10, BlockEnd::Other));
        guest.run(shape(SUBMIT + 40, 3, BlockEnd::Return));
        // The lap's call site (4 instructions) and the meter's figure: 2 + 13 + 4 - 3 calibrated.
        guest.lap(LOOP + 0x20, 4, Account::Driver, 16);
        let record = guest.profiler.run_finished(1);
        assert_eq!(record.ios, 1);
        assert_eq!(record.laps, 2);
        // The first lap's two blocks and the second's first (its last is counted when the next block starts).
        assert_eq!(record.meter_instructions, 17);
        let driver: i64 = record.slots.iter().map(|slot| slot.counts[0]).sum();
        assert_eq!(driver, 16);
        assert_eq!(
            totals(&record, 0),
            vec![(LOOP + 0x10, 2), (LOOP + 0x20, 1), (SUBMIT, 10), (SUBMIT + 40, 3)]
        );
        // submit's blocks sit below a node for SUBMIT, the loop's at the root.
        let submit_node = record.nodes.iter().find(|node| node.function == SUBMIT).unwrap();
        assert_eq!(submit_node.parent, ROOT);
        assert!(record
            .slots
            .iter()
            .all(|slot| (slot.block_start >= SUBMIT) == (slot.node == submit_node.id)));
    }

    #[test]
    fn pending_work_becomes_bookkeeping_only_when_the_pass_did_io() {
        let mut guest = Guest::new();
        guest.lap(LOOP, 3, Account::Pending, 3);
        guest.lap(LOOP + 0x20, 1, Account::PassWaited, 1);
        guest.lap(LOOP + 0x40, 5, Account::Pending, 5);
        guest.lap(LOOP + 0x80, 2, Account::PassDidIo, 2);
        // Nothing is left pending for a later pass.
        guest.lap(LOOP + 0x90, 1, Account::PassDidIo, 1);
        let record = guest.profiler.run_finished(1);
        assert_eq!(totals(&record, 1), vec![(LOOP + 0x40, 5), (LOOP + 0x80, 2), (LOOP + 0x90, 1)]);
        // The next run starts from zero.
        guest.lap(LOOP + 0x80, 2, Account::Driver, 2);
        let next = guest.profiler.run_finished(1);
        assert_eq!(totals(&next, 0), vec![(LOOP + 0x80, 2)]);
        assert!(next.nodes.is_empty(), "nodes are reported once");
    }

    #[test]
    fn a_block_left_early_counts_only_what_ran_and_does_not_call() {
        let mut guest = Guest::new();
        guest.lap(LOOP, 1, Account::Excluded, 0);
        // 8 instructions, left after 3 (a device access redone as the last of a block of its own).
        let id = guest.profiler.block_id(shape(SUBMIT, 8, BlockEnd::Call));
        guest.profiler.block_started(id, guest.last_length);
        guest.last_length = 3;
        // The rest of it runs as a block of 5 that makes the call.
        guest.run(shape(SUBMIT + 12, 5, BlockEnd::Call));
        guest.run(shape(0x5000, 1, BlockEnd::Return));
        guest.lap(LOOP + 4, 1, Account::Driver, 10);
        let record = guest.profiler.run_finished(1);
        assert_eq!(totals(&record, 0), vec![(LOOP + 4, 1), (SUBMIT, 3), (SUBMIT + 12, 5), (0x5000, 1)]);
        let callee = record.nodes.iter().find(|node| node.function == 0x5000).unwrap();
        assert_eq!(callee.parent, ROOT, "called from the loop's frame, once");
    }

    #[test]
    fn lap_arguments_name_the_meters_accounts() {
        assert_eq!(account_from_register(0), Some(Account::Driver));
        assert_eq!(account_from_register(4), Some(Account::Recording));
        assert_eq!(account_from_register(5), Some(Account::PassDidIo));
        assert_eq!(account_from_register(6), Some(Account::PassWaited));
        assert_eq!(account_from_register(7), None);
    }
}
