//! A simulated block device with a latency model, for host tests of the runner.
//!
//! The clock ([`SteppingClock`]) advances by a fixed step at every reading, and the device jumps
//! it forward to the next completion when a poll would otherwise find nothing, so runs are
//! deterministic and fast.

use core::cell::RefCell;
use std::string::String;
use std::vec::Vec;

use blockdev::testing::SteppingClock;
use blockdev::{
    check_request, BlockDevice, Clock, Completion, DataPath, DmaBuffer, FlushSupport, Geometry, IoError,
    IoErrorKind, Operation, Request, SubmitError,
};

use crate::buffers::BufferMemory;
use crate::cpu_cost::tests::ModelCounters;
use crate::offsets::RandomGenerator;

/// A buffer area in host memory: DMA addresses from `base` map to bytes of the vector.
pub struct TestMemory {
    pub base: usize,
    pub bytes: RefCell<Vec<u8>>,
}

impl TestMemory {
    pub fn new(base: usize, length_bytes: usize) -> TestMemory {
        TestMemory { base, bytes: RefCell::new(std::vec![0; length_bytes]) }
    }

    pub fn area(&self) -> DmaBuffer {
        let length_bytes = self.bytes.borrow().len();
        DmaBuffer { cpu_address: self.base, physical_address: self.base as u64, length_bytes }
    }

    fn range(&self, buffer: &DmaBuffer) -> core::ops::Range<usize> {
        let start = buffer.cpu_address - self.base;
        start..start + buffer.length_bytes
    }
}

impl BufferMemory for TestMemory {
    fn with_bytes(&self, buffer: &DmaBuffer, access: &mut dyn FnMut(&mut [u8])) {
        let range = self.range(buffer);
        access(&mut self.bytes.borrow_mut()[range]);
    }
}

/// A simulated medium: the device's bytes, moved to and from a [`TestMemory`] at completion.
pub struct SimMedium<'c> {
    pub memory: &'c TestMemory,
    pub disk: RefCell<Vec<u8>>,
    /// A write to this LBA stores one wrong byte (a device that corrupts data).
    pub corrupt_lba: Option<u64>,
}

/// How the simulated device behaves.
#[derive(Clone)]
pub struct SimBehaviour {
    pub geometry: Geometry,
    /// Every request takes `fixed + uniform(0..=random)` ticks from the kick.
    pub fixed_latency_ticks: u64,
    pub random_latency_ticks: u64,
    /// Every n-th completion fails with this kind.
    pub error_every: Option<(u64, IoErrorKind)>,
    /// After this many accepted submits, every submit is refused with this error.
    pub refuse_after: Option<(u64, SubmitError)>,
    /// After this many accepted submits, requests never complete.
    pub stall_after: Option<u64>,
    /// Answer "queue full" below the geometry's `max_in_flight` (a driver with fewer slots).
    pub real_slots: Option<usize>,
    /// Data moves over one channel at this many ticks per KiB, one request after another, so
    /// large or deep jobs are limited by bandwidth (0: no limit).
    pub transfer_ticks_per_kib: u64,
    /// Multiplies `transfer_ticks_per_kib` per request, given the bytes written before it (a
    /// slow zone at some offsets, a write cache that runs out).
    pub transfer_factor: Option<fn(&Request, u64) -> u64>,
    /// Polls that find nothing before the device jumps the clock to the next completion (a
    /// device that keeps the CPU waiting).
    pub empty_polls_before_completion: u64,
    /// Every poll that completes something also hands back its first completion a second time
    /// (a confused driver), when there is room.
    pub echo_completions: bool,
    /// What the device says about flushes.
    pub flush_support: FlushSupport,
    /// Report a data path (`BlockDevice::data_path`) with this mode, one command per request,
    /// every n-th of them (n > 0) a PIO fallback.
    pub data_path: Option<(&'static str, Option<u64>)>,
}

/// Instructions the simulated driver runs per call, charged to a model of the CPU counters.
#[derive(Clone, Copy)]
pub struct SimDriverCost<'c> {
    pub counters: &'c ModelCounters,
    pub submit: u64,
    pub kick: u64,
    /// A poll that returns completions.
    pub productive_poll: u64,
    /// A poll that finds nothing.
    pub empty_poll: u64,
}

impl SimBehaviour {
    pub fn new(geometry: Geometry, fixed_latency_ticks: u64) -> SimBehaviour {
        SimBehaviour {
            geometry,
            fixed_latency_ticks,
            random_latency_ticks: 0,
            error_every: None,
            refuse_after: None,
            stall_after: None,
            real_slots: None,
            transfer_ticks_per_kib: 0,
            transfer_factor: None,
            empty_polls_before_completion: 0,
            echo_completions: false,
            flush_support: FlushSupport::NoCache("simulated"),
            data_path: None,
        }
    }
}

struct InFlight {
    complete_at: u64,
    request: Request,
    result: Result<(), IoError>,
}

pub struct SimDevice<'c> {
    name: String,
    behaviour: SimBehaviour,
    clock: &'c SteppingClock,
    random: RandomGenerator,
    pending: Vec<Request>,
    in_flight: Vec<InFlight>,
    accepted_submits: u64,
    finished: u64,
    channel_busy_until: u64,
    /// Bytes of the writes started so far.
    written_bytes: u64,
    /// (clock time, requests in flight) at every poll.
    pub polls: Vec<(u64, usize)>,
    pub max_in_flight_seen: usize,
    /// Every accepted request.
    pub accepted: Vec<Request>,
    pub kicks: u64,
    order_log: Option<&'c RefCell<Vec<String>>>,
    empty_polls: u64,
    cpu: Option<SimDriverCost<'c>>,
    /// Completions handed back a second time (`echo_completions`).
    pub echoed: u64,
    /// Failed completions since the last `take_unreported_failures` (this device describes
    /// none of them).
    unreported_failures: u64,
    medium: Option<&'c SimMedium<'c>>,
}

impl<'c> SimDevice<'c> {
    pub fn new(name: &str, behaviour: SimBehaviour, clock: &'c SteppingClock) -> SimDevice<'c> {
        SimDevice {
            name: name.into(),
            behaviour,
            clock,
            random: RandomGenerator::new(0x51_u64),
            pending: Vec::new(),
            in_flight: Vec::new(),
            accepted_submits: 0,
            finished: 0,
            channel_busy_until: 0,
            written_bytes: 0,
            polls: Vec::new(),
            max_in_flight_seen: 0,
            accepted: Vec::new(),
            kicks: 0,
            order_log: None,
            empty_polls: 0,
            cpu: None,
            echoed: 0,
            unreported_failures: 0,
            medium: None,
        }
    }

    /// Moves data between `medium` and its memory when requests complete.
    pub fn with_medium(mut self, medium: &'c SimMedium<'c>) -> Self {
        self.medium = Some(medium);
        self
    }

    fn move_data(&self, request: &Request) {
        let Some(medium) = self.medium else { return };
        let block_bytes = self.behaviour.geometry.logical_block_bytes as usize;
        let start = request.lba as usize * block_bytes;
        let range = start..start + request.block_count as usize * block_bytes;
        let buffer = DmaBuffer { length_bytes: range.len(), ..request.buffer };
        let mut disk = medium.disk.borrow_mut();
        match request.operation {
            Operation::Read => {
                medium.memory.with_bytes(&buffer, &mut |bytes| bytes.copy_from_slice(&disk[range.clone()]))
            }
            Operation::Write => {
                medium.memory.with_bytes(&buffer, &mut |bytes| disk[range.clone()].copy_from_slice(bytes));
                if let Some(lba) = medium
                    .corrupt_lba
                    .filter(|lba| (request.lba..request.lba + u64::from(request.block_count)).contains(lba))
                {
                    disk[lba as usize * block_bytes + 100] ^= 0xFF;
                }
            }
            Operation::Flush => {}
        }
    }

    /// Charges every driver call to `cost.counters`.
    pub fn with_cpu_cost(mut self, cost: SimDriverCost<'c>) -> Self {
        self.cpu = Some(cost);
        self
    }

    fn charge(&self, instructions: impl Fn(&SimDriverCost<'c>) -> u64) {
        if let Some(cost) = &self.cpu {
            cost.counters.run(instructions(cost));
        }
    }

    /// Appends this device's name to `log` whenever it accepts a request right after another
    /// device did (so the log reads as the order in which devices ran).
    pub fn with_order_log(mut self, log: &'c RefCell<Vec<String>>) -> Self {
        self.order_log = Some(log);
        self
    }

    fn outstanding(&self) -> usize {
        self.pending.len() + self.in_flight.len()
    }
}

impl BlockDevice for SimDevice<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn geometry(&self) -> Geometry {
        self.behaviour.geometry
    }

    fn take_unreported_failures(&mut self) -> u64 {
        core::mem::take(&mut self.unreported_failures)
    }

    fn submit(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
        self.charge(|cost| cost.submit);
        let slots = self.behaviour.real_slots.unwrap_or(self.behaviour.geometry.max_in_flight as usize);
        if self.outstanding() >= slots {
            return Err((request, SubmitError::QueueFull));
        }
        if let Some((after, error)) = self.behaviour.refuse_after {
            if self.accepted_submits >= after {
                return Err((request, error));
            }
        }
        check_request(&self.behaviour.geometry, &request).map_err(|e| (request, e))?;
        if let Some(log) = self.order_log {
            let mut log = log.borrow_mut();
            if log.last() != Some(&self.name) {
                log.push(self.name.clone());
            }
        }
        self.accepted_submits += 1;
        self.accepted.push(request);
        self.pending.push(request);
        Ok(())
    }

    fn kick(&mut self) {
        self.charge(|cost| cost.kick);
        self.kicks += 1;
        let now = self.clock.peek();
        for request in self.pending.drain(..) {
            let stalled = self.behaviour.stall_after.is_some_and(|after| self.accepted_submits > after);
            let jitter = if self.behaviour.random_latency_ticks > 0 {
                self.random.below(self.behaviour.random_latency_ticks + 1)
            } else {
                0
            };
            let bytes =
                u64::from(request.block_count) * u64::from(self.behaviour.geometry.logical_block_bytes);
            let factor =
                self.behaviour.transfer_factor.map_or(1, |factor| factor(&request, self.written_bytes));
            let transfer = bytes / 1024 * self.behaviour.transfer_ticks_per_kib * factor;
            if request.operation == Operation::Write {
                self.written_bytes += bytes;
            }
            let ready = now + self.behaviour.fixed_latency_ticks + jitter;
            let complete_at = if stalled {
                u64::MAX
            } else if transfer > 0 {
                // The data moves once the channel is free, and not before the kick.
                let done = ready.max(self.channel_busy_until.max(now) + transfer);
                self.channel_busy_until = done;
                done
            } else {
                ready
            };
            self.in_flight.push(InFlight { complete_at, request, result: Ok(()) });
        }
        self.max_in_flight_seen = self.max_in_flight_seen.max(self.in_flight.len());
    }

    fn flush_support(&self) -> FlushSupport {
        self.behaviour.flush_support
    }

    fn poll(&mut self, completions: &mut [Completion]) -> usize {
        self.polls.push((self.clock.peek(), self.in_flight.len()));
        let mut now = self.clock.peek();
        if !self.in_flight.iter().any(|r| r.complete_at <= now) {
            if self.empty_polls < self.behaviour.empty_polls_before_completion {
                self.empty_polls += 1;
                self.charge(|cost| cost.empty_poll);
                return 0;
            }
            self.empty_polls = 0;
            match self.in_flight.iter().map(|r| r.complete_at).min() {
                Some(next) if next != u64::MAX => {
                    self.clock.advance_to(next);
                    now = next;
                }
                // Nothing will ever complete: let a millisecond of simulated time pass.
                Some(_) => self.clock.advance_to(now + self.clock.ticks_per_second() / 1000),
                None => {}
            }
        }
        let mut delivered = 0;
        while delivered < completions.len() {
            let Some(position) = self.in_flight.iter().position(|r| r.complete_at <= now) else {
                break;
            };
            let finished = self.in_flight.swap_remove(position);
            self.finished += 1;
            let result = match self.behaviour.error_every {
                Some((every, kind)) if self.finished.is_multiple_of(every) => {
                    self.unreported_failures += 1;
                    Err(IoError { kind, code: self.finished as u32 })
                }
                _ => finished.result,
            };
            if result.is_ok() {
                self.move_data(&finished.request);
            }
            completions[delivered] = Completion { tag: finished.request.tag, result };
            delivered += 1;
        }
        if self.behaviour.echo_completions && delivered > 0 && delivered < completions.len() {
            completions[delivered] = completions[0];
            delivered += 1;
            self.echoed += 1;
        }
        self.charge(|cost| if delivered > 0 { cost.productive_poll } else { cost.empty_poll });
        delivered
    }

    fn data_path(&self) -> Option<DataPath> {
        let (mode, fallback_every) = self.behaviour.data_path?;
        let commands = self.accepted_submits;
        let pio_fallbacks = fallback_every.map_or(0, |every| commands / every);
        Some(DataPath { mode, commands, pio_fallbacks })
    }
}
