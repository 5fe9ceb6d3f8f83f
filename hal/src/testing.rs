//! Test doubles shared by the drivers' host tests: an arena of host memory standing in for the
//! kernel's DMA pool (physical addresses from [`PHYSICAL_BASE`], handed out by a bump allocator
//! like `KernelPlatform`'s), a 1 GHz [`SteppingClock`] that moves a set step on every read,
//! counters of the cache-maintenance calls a driver makes, an optional [`BusView`] (how a bus
//! model, the PCIe root complex's inbound windows, turns a device's DMA address into a physical
//! one), and one ordered [`EventLog`] of everything that decides whether a device sees what the
//! CPU meant: MMIO writes, barriers, cache maintenance, CPU accesses to DMA memory and the
//! simulated devices' DMA.
//!
//! The log models the strictest machine the drivers run on (docs/hardware.md §2.4 and
//! docs/pcie-brcmstb.md §6: no DMA path of the Pi is cache-coherent; Arm ARM DDI 0487 B2.3):
//! memory is cacheable, so a device sees CPU writes only after a clean, the CPU sees device
//! writes only after an invalidate, and a device that starts work on a doorbell sees only the
//! writes that a store barrier put ahead of it. The log itself checks every CPU read (an
//! invalidate must lie between the device's write and the read); simulators check what the
//! device reads and writes with [`EventLog::check_device_access`].

extern crate std;

use crate::barrier::BarrierKind;
use crate::mmio::RegisterIo;
use crate::platform::{DmaAllocationError, Platform};
use blockdev::testing::SteppingClock;
use blockdev::{Clock, DmaBuffer};
use core::cell::{Cell, RefCell};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::format;
use std::rc::{Rc, Weak};
use std::string::String;
use std::vec::Vec;

/// How a bus between a simulated device and memory decodes the device's DMA addresses.
pub trait BusView {
    /// The physical address behind `length_bytes` at bus address `bus_address`, or `None` when
    /// the bus does not forward it (the model records why).
    fn to_physical(&self, bus_address: u64, length_bytes: usize) -> Option<u64>;
}

/// Where the arena's physical addresses start (inside QEMU virt's RAM, for realism).
pub const PHYSICAL_BASE: u64 = 0x4000_0000;
const ARENA_ALIGNMENT: usize = 65536;

/// `length_bytes` bytes of physical address space from `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    pub length_bytes: u64,
}

impl ByteRange {
    pub fn new(start: u64, length_bytes: u64) -> Self {
        ByteRange { start, length_bytes }
    }

    pub fn of(buffer: &DmaBuffer) -> Self {
        ByteRange::new(buffer.physical_address, buffer.length_bytes as u64)
    }

    pub fn end(&self) -> u64 {
        self.start + self.length_bytes
    }

    /// The bytes both ranges hold, if any.
    pub fn overlap(&self, other: &ByteRange) -> Option<ByteRange> {
        let start = self.start.max(other.start);
        let end = self.end().min(other.end());
        (start < end).then(|| ByteRange::new(start, end - start))
    }
}

/// One entry of the event log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlatformEvent {
    /// A simulated register block (`block` names it) was written.
    MmioWrite {
        block: &'static str,
        offset_bytes: usize,
        value: u32,
    },
    Barrier(BarrierKind),
    /// `Platform::clean_for_device`.
    Clean(ByteRange),
    /// `Platform::invalidate_for_cpu`.
    Invalidate(ByteRange),
    /// The CPU stored to DMA memory (the driver's queue entries, lists, allocation's zeroing).
    CpuWrite(ByteRange),
    /// The CPU loaded from DMA memory.
    CpuRead(ByteRange),
    /// A simulated device read memory by DMA.
    DeviceRead(ByteRange),
    /// A simulated device wrote memory by DMA.
    DeviceWrite(ByteRange),
}

/// Which bytes of a range a scan has found covered.
#[derive(Default)]
struct Coverage {
    /// Disjoint `[start, end)` pieces.
    pieces: Vec<(u64, u64)>,
}

impl Coverage {
    fn add(&mut self, range: ByteRange) {
        let (mut start, mut end) = (range.start, range.end());
        self.pieces.retain(|&(piece_start, piece_end)| {
            let touches = piece_start <= end && start <= piece_end;
            if touches {
                start = start.min(piece_start);
                end = end.max(piece_end);
            }
            !touches
        });
        self.pieces.push((start, end));
    }

    fn covers(&self, range: ByteRange) -> bool {
        self.pieces.iter().any(|&(start, end)| start <= range.start && range.end() <= end)
    }
}

/// The ordered log, with the ordering mistakes it found in CPU reads.
#[derive(Default)]
pub struct EventLog {
    events: RefCell<Vec<PlatformEvent>>,
    violations: RefCell<Vec<String>>,
}

impl EventLog {
    /// The index the next event gets.
    pub fn len(&self) -> usize {
        self.events.borrow().len()
    }

    /// Whether nothing happened yet.
    pub fn is_empty(&self) -> bool {
        self.events.borrow().is_empty()
    }

    /// Every event from index `start` on.
    pub fn since(&self, start: usize) -> Vec<PlatformEvent> {
        self.events.borrow()[start..].to_vec()
    }

    /// The events from index `start` up to, not including, `end`.
    pub fn between(&self, start: usize, end: usize) -> Vec<PlatformEvent> {
        let events = self.events.borrow();
        let end = end.min(events.len());
        events[start.min(end)..end].to_vec()
    }

    /// Ordering mistakes found so far (by the log itself and by simulators).
    pub fn violations(&self) -> Vec<String> {
        self.violations.borrow().clone()
    }

    pub fn add_violation(&self, violation: String) {
        self.violations.borrow_mut().push(violation);
    }

    /// Appends `event` and returns its index. A CPU read is checked at once.
    pub fn push(&self, event: PlatformEvent) -> usize {
        let index = {
            let mut events = self.events.borrow_mut();
            events.push(event);
            events.len() - 1
        };
        if let PlatformEvent::CpuRead(range) = event {
            if let Err(violation) = self.check_cpu_read(range, index) {
                self.add_violation(violation);
            }
        }
        index
    }

    /// A CPU read at `index` of bytes a device wrote must come after an invalidate of them that
    /// itself came after the device's write (else the cache may return older data). The scan
    /// stops at an earlier read of the same bytes, which was checked for what lies before it.
    pub fn check_cpu_read(&self, range: ByteRange, index: usize) -> Result<(), String> {
        let events = self.events.borrow();
        let mut invalidated = Coverage::default();
        for event in events[..index].iter().rev() {
            match *event {
                PlatformEvent::CpuRead(earlier) if earlier.overlap(&range) == Some(range) => break,
                PlatformEvent::Invalidate(done) => {
                    if let Some(part) = done.overlap(&range) {
                        invalidated.add(part);
                    }
                }
                PlatformEvent::DeviceWrite(written) => {
                    if let Some(part) = written.overlap(&range) {
                        if !invalidated.covers(part) {
                            return Err(format!(
                                "CPU read of {:#x}+{:#x} (event {index}) sees a device write of {:#x}+{:#x} \
                                 that no invalidate followed",
                                range.start, range.length_bytes, part.start, part.length_bytes
                            ));
                        }
                    }
                }
                _ => {}
            }
            if invalidated.covers(range) {
                break;
            }
        }
        Ok(())
    }

    /// A device access at `now` to `range`, started by the MMIO write at index `handover` (a
    /// doorbell, a queue's creation): every CPU write to those bytes must lie before `handover`
    /// and be followed by a clean of them and then by a store barrier, all before `handover`;
    /// and no CPU write may touch them between `handover` and `now`. With `require_written`
    /// (queue entries, PRP lists: memory the driver must have prepared), bytes that were never
    /// cleaned are a mistake too. The scan stops at an earlier device access to the same bytes,
    /// which was checked for the CPU writes before it.
    pub fn check_device_access(
        &self,
        range: ByteRange,
        handover: usize,
        now: usize,
        require_written: bool,
    ) -> Result<(), String> {
        let events = self.events.borrow();
        let now = now.min(events.len());
        let handover = handover.min(now);
        let describe = |what: &str| {
            format!(
                "device access to {:#x}+{:#x} (event {now}, handed over at event {handover}): {what}",
                range.start, range.length_bytes
            )
        };
        let late_write = events[handover..now].iter().any(
            |event| matches!(event, PlatformEvent::CpuWrite(written) if written.overlap(&range).is_some()),
        );
        if late_write {
            return Err(describe("the CPU wrote those bytes after handing them to the device"));
        }
        let mut barrier_seen = false;
        let mut cleaned = Coverage::default();
        for event in events[..handover].iter().rev() {
            match *event {
                PlatformEvent::DeviceRead(earlier) | PlatformEvent::DeviceWrite(earlier)
                    if earlier.overlap(&range) == Some(range) =>
                {
                    return Ok(())
                }
                PlatformEvent::Barrier(kind) if kind.orders_stores() => barrier_seen = true,
                PlatformEvent::Clean(done) if barrier_seen => {
                    if let Some(part) = done.overlap(&range) {
                        cleaned.add(part);
                    }
                }
                PlatformEvent::CpuWrite(written) => {
                    if let Some(part) = written.overlap(&range) {
                        if !cleaned.covers(part) {
                            return Err(describe(if barrier_seen {
                                "a CPU write to them was not cleaned before the last store barrier"
                            } else {
                                "no store barrier between the CPU's writes and the handover"
                            }));
                        }
                    }
                }
                _ => {}
            }
            if cleaned.covers(range) {
                return Ok(());
            }
        }
        if require_written {
            return Err(describe("the bytes were never cleaned and ordered by a store barrier"));
        }
        Ok(())
    }
}

std::thread_local! {
    /// The log of the newest live `ArenaPlatform` on this thread (barriers and CPU accesses
    /// have no platform at hand, so they find the log here). One platform per test thread.
    static CURRENT_LOG: RefCell<Option<Rc<EventLog>>> = const { RefCell::new(None) };
}

/// Appends `event` to this thread's platform log, if there is one; returns its index.
pub fn record(event: PlatformEvent) -> Option<usize> {
    let log = CURRENT_LOG.with(|current| current.borrow().clone())?;
    Some(log.push(event))
}

/// Any register block with its writes logged (for simulators that do not log their own).
pub struct LoggedRegisters<R> {
    pub block: &'static str,
    pub inner: R,
}

impl<R: RegisterIo> RegisterIo for LoggedRegisters<R> {
    fn read32(&self, offset_bytes: usize) -> u32 {
        self.inner.read32(offset_bytes)
    }

    fn write32(&self, offset_bytes: usize, value: u32) {
        record(PlatformEvent::MmioWrite { block: self.block, offset_bytes, value });
        self.inner.write32(offset_bytes, value);
    }
}

/// A simulated device that works while time passes: the platform calls it on every clock read.
pub trait Background {
    fn advance(&self, platform: &ArenaPlatform);
}

pub struct ArenaPlatform {
    arena: *mut u8,
    arena_bytes: usize,
    next_free: Cell<usize>,
    clock: SteppingClock,
    pub clean_calls: Cell<u64>,
    pub invalidate_calls: Cell<u64>,
    /// The arena is mapped non-cacheable, as the kernel's DMA pool: `needs_cache_maintenance`
    /// then says no for every buffer (the calls are still logged if a driver makes them).
    pub uncached: Cell<bool>,
    log: Rc<EventLog>,
    background: RefCell<Vec<Weak<dyn Background>>>,
    bus_view: RefCell<Option<Rc<dyn BusView>>>,
    clean_observer: RefCell<Option<Rc<CleanObserver>>>,
}

/// Called on every `clean_for_device`, after it was logged (a test's look at what a device could
/// see at that moment).
pub type CleanObserver = dyn Fn(&ArenaPlatform, &DmaBuffer);

impl ArenaPlatform {
    /// An arena of `arena_bytes` zeroed bytes; the clock steps 1 µs per read. Its event log
    /// becomes this thread's.
    pub fn new(arena_bytes: usize) -> Self {
        let layout = Layout::from_size_align(arena_bytes, ARENA_ALIGNMENT).expect("layout");
        // SAFETY: the layout has a non-zero size; the memory is freed in `drop`.
        let arena = unsafe { alloc_zeroed(layout) };
        assert!(!arena.is_null(), "test arena allocation");
        let log = Rc::new(EventLog::default());
        CURRENT_LOG.with(|current| *current.borrow_mut() = Some(log.clone()));
        ArenaPlatform {
            arena,
            arena_bytes,
            next_free: Cell::new(0),
            clock: SteppingClock::new(1_000_000_000, 1_000),
            clean_calls: Cell::new(0),
            invalidate_calls: Cell::new(0),
            uncached: Cell::new(false),
            log,
            background: RefCell::new(Vec::new()),
            bus_view: RefCell::new(None),
            clean_observer: RefCell::new(None),
        }
    }

    /// Sets how far the clock moves on each read.
    pub fn set_step_ticks(&self, ticks: u64) {
        self.clock.set_step_ticks(ticks);
    }

    /// The clock's time in nanoseconds without moving it (a simulator's own look at the time).
    pub fn peek_ns(&self) -> u64 {
        blockdev::ticks_to_ns(self.clock.peek(), self.clock.ticks_per_second())
    }

    /// Microseconds the clock advances per read.
    pub fn set_step_us(&self, microseconds: u64) {
        self.set_step_ticks(microseconds * 1000);
    }

    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// Puts a bus model between the simulated devices and the arena.
    pub fn set_bus_view(&self, view: Rc<dyn BusView>) {
        *self.bus_view.borrow_mut() = Some(view);
    }

    /// The bus model set with [`ArenaPlatform::set_bus_view`], if any.
    pub fn bus_view(&self) -> Option<Rc<dyn BusView>> {
        self.bus_view.borrow().clone()
    }

    /// Calls `observer` on every later `clean_for_device`.
    pub fn on_clean(&self, observer: impl Fn(&ArenaPlatform, &DmaBuffer) + 'static) {
        *self.clean_observer.borrow_mut() = Some(Rc::new(observer));
    }

    /// The host pointer behind `length_bytes` at `physical_address`, if inside the arena.
    fn cpu_pointer(&self, physical_address: u64, length_bytes: usize) -> Option<*mut u8> {
        let offset = physical_address.checked_sub(PHYSICAL_BASE)? as usize;
        (offset.checked_add(length_bytes)? <= self.arena_bytes).then(|| self.arena.wrapping_add(offset))
    }

    /// The ordered event log.
    pub fn log(&self) -> &EventLog {
        &self.log
    }

    /// Lets `device` work on every clock read from now on (until it is dropped).
    pub fn add_background(&self, device: Weak<dyn Background>) {
        self.background.borrow_mut().push(device);
    }

    /// A device's DMA read of `out.len()` bytes at `physical_address` (logged); false when
    /// outside the arena.
    pub fn device_read(&self, physical_address: u64, out: &mut [u8]) -> bool {
        let Some(source) = self.cpu_pointer(physical_address, out.len()) else {
            return false;
        };
        self.log.push(PlatformEvent::DeviceRead(ByteRange::new(physical_address, out.len() as u64)));
        // SAFETY: `cpu_pointer` checked the range lies inside the arena, which lives as long as
        // `self`; the driver under test is not running concurrently.
        unsafe { core::ptr::copy_nonoverlapping(source, out.as_mut_ptr(), out.len()) };
        true
    }

    /// The bytes at `physical_address` as a device's address walker sees them, without logging a
    /// DMA read (a simulator that logs what it read as whole runs); false when outside.
    pub fn peek(&self, physical_address: u64, out: &mut [u8]) -> bool {
        let Some(source) = self.cpu_pointer(physical_address, out.len()) else {
            return false;
        };
        // SAFETY: `cpu_pointer` checked the range lies inside the arena, which lives as long as
        // `self`; the driver under test is not running concurrently.
        unsafe { core::ptr::copy_nonoverlapping(source, out.as_mut_ptr(), out.len()) };
        true
    }

    /// A device's DMA write of `data` at `physical_address` (logged); false when outside.
    pub fn device_write(&self, physical_address: u64, data: &[u8]) -> bool {
        let Some(target) = self.cpu_pointer(physical_address, data.len()) else {
            return false;
        };
        self.log.push(PlatformEvent::DeviceWrite(ByteRange::new(physical_address, data.len() as u64)));
        // SAFETY: as for `device_read`.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), target, data.len()) };
        true
    }

    /// The CPU fills `buffer` with `byte` (logged), as a benchmark poisoning a read buffer does.
    pub fn cpu_fill(&self, buffer: &DmaBuffer, byte: u8) {
        let target = self.cpu_pointer(buffer.physical_address, buffer.length_bytes).expect("arena buffer");
        self.log.push(PlatformEvent::CpuWrite(ByteRange::of(buffer)));
        // SAFETY: `cpu_pointer` checked the range lies inside the arena.
        unsafe { core::ptr::write_bytes(target, byte, buffer.length_bytes) };
    }

    /// The CPU writes `data` at the start of `buffer` (logged), as a benchmark filling a write
    /// buffer does.
    pub fn cpu_write(&self, buffer: &DmaBuffer, data: &[u8]) {
        assert!(data.len() <= buffer.length_bytes, "data longer than the buffer");
        let target = self.cpu_pointer(buffer.physical_address, data.len()).expect("arena buffer");
        self.log.push(PlatformEvent::CpuWrite(ByteRange::new(buffer.physical_address, data.len() as u64)));
        // SAFETY: `cpu_pointer` checked the range lies inside the arena.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), target, data.len()) };
    }

    /// The bytes of `buffer` as the CPU reads them (logged, and so checked for a missing
    /// invalidate).
    pub fn cpu_read(&self, buffer: &DmaBuffer) -> Vec<u8> {
        let source = self.cpu_pointer(buffer.physical_address, buffer.length_bytes).expect("arena buffer");
        self.log.push(PlatformEvent::CpuRead(ByteRange::of(buffer)));
        let mut out = std::vec![0u8; buffer.length_bytes];
        // SAFETY: `cpu_pointer` checked the range lies inside the arena.
        unsafe { core::ptr::copy_nonoverlapping(source, out.as_mut_ptr(), out.len()) };
        out
    }
}

impl Drop for ArenaPlatform {
    fn drop(&mut self) {
        CURRENT_LOG.with(|current| {
            let mut current = current.borrow_mut();
            if current.as_ref().is_some_and(|log| Rc::ptr_eq(log, &self.log)) {
                *current = None;
            }
        });
        let layout = Layout::from_size_align(self.arena_bytes, ARENA_ALIGNMENT).expect("layout");
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { dealloc(self.arena, layout) };
    }
}

impl Clock for ArenaPlatform {
    /// Time passes: the clock moves on and every background device works once.
    fn now_ticks(&self) -> u64 {
        let now = self.clock.now_ticks();
        let devices: Vec<_> = self.background.borrow().iter().filter_map(Weak::upgrade).collect();
        for device in devices {
            device.advance(self);
        }
        now
    }

    fn ticks_per_second(&self) -> u64 {
        self.clock.ticks_per_second()
    }
}

// SAFETY: buffers are disjoint, aligned pieces of the zeroed arena, which lives (and stays in
// place) until the platform is dropped; `physical_address` and `cpu_pointer` translate with the
// same offset, and `is_dma_memory` accepts only buffers inside the arena at that translation.
// There is no cache to maintain on the host: the calls are only logged.
unsafe impl Platform for ArenaPlatform {
    /// Zeroed by the CPU, as the kernel's allocator does: logged as a CPU write.
    fn allocate_dma(
        &self,
        length_bytes: usize,
        alignment_bytes: usize,
    ) -> Result<DmaBuffer, DmaAllocationError> {
        let start = self.next_free.get().div_ceil(alignment_bytes) * alignment_bytes;
        if start + length_bytes > self.arena_bytes {
            return Err(DmaAllocationError {
                requested_bytes: length_bytes,
                alignment_bytes,
                remaining_bytes: self.arena_bytes - self.next_free.get(),
            });
        }
        self.next_free.set(start + length_bytes);
        let buffer = DmaBuffer {
            cpu_address: self.arena as usize + start,
            physical_address: PHYSICAL_BASE + start as u64,
            length_bytes,
        };
        self.log.push(PlatformEvent::CpuWrite(ByteRange::of(&buffer)));
        Ok(buffer)
    }

    fn dma_remaining_bytes(&self) -> u64 {
        (self.arena_bytes - self.next_free.get()) as u64
    }

    fn clean_for_device(&self, buffer: &DmaBuffer) {
        self.clean_calls.set(self.clean_calls.get() + 1);
        self.log.push(PlatformEvent::Clean(ByteRange::of(buffer)));
        let observer = self.clean_observer.borrow().clone();
        if let Some(observer) = observer {
            observer(self, buffer);
        }
    }

    fn invalidate_for_cpu(&self, buffer: &DmaBuffer) {
        self.invalidate_calls.set(self.invalidate_calls.get() + 1);
        self.log.push(PlatformEvent::Invalidate(ByteRange::of(buffer)));
    }

    fn needs_cache_maintenance(&self, _buffer: &DmaBuffer) -> bool {
        !self.uncached.get()
    }

    /// Every part of the arena is memory `allocate_dma` hands out.
    fn is_dma_memory(&self, buffer: &DmaBuffer) -> bool {
        let inside = self.cpu_pointer(buffer.physical_address, buffer.length_bytes);
        inside.is_some_and(|pointer| pointer as usize == buffer.cpu_address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::barrier;

    fn buffer(platform: &ArenaPlatform, bytes: usize) -> DmaBuffer {
        platform.allocate_dma(bytes, 64).unwrap()
    }

    #[test]
    fn a_cpu_read_needs_an_invalidate_after_the_device_wrote() {
        let platform = ArenaPlatform::new(1 << 16);
        let data = buffer(&platform, 128);
        platform.invalidate_for_cpu(&data);
        platform.device_write(data.physical_address, &[1; 128]);
        platform.cpu_read(&data);
        assert_eq!(platform.log().violations().len(), 1, "invalidate before the device wrote");
        let other = buffer(&platform, 128);
        platform.device_write(other.physical_address, &[2; 128]);
        platform.invalidate_for_cpu(&other.slice(0, 64).unwrap());
        platform.cpu_read(&other.slice(0, 64).unwrap());
        assert_eq!(platform.log().violations().len(), 1, "the invalidated half reads fine");
        platform.cpu_read(&other.slice(60, 8).unwrap());
        assert_eq!(platform.log().violations().len(), 2, "a read reaching past it does not");
        platform.cpu_read(&other.slice(60, 8).unwrap());
        assert_eq!(platform.log().violations().len(), 2, "each stale read is reported once");
    }

    #[test]
    fn a_device_read_needs_write_clean_barrier_before_the_handover() {
        let platform = ArenaPlatform::new(1 << 16);
        let data = buffer(&platform, 64);
        let range = ByteRange::of(&data);
        let check = |handover: usize| platform.log().check_device_access(range, handover, handover + 1, true);
        platform.cpu_fill(&data, 7);
        barrier::store_before_doorbell();
        platform.clean_for_device(&data);
        let doorbell = platform.log().len();
        assert!(check(doorbell).unwrap_err().contains("not cleaned before the last store barrier"));
        barrier::store_before_doorbell();
        assert_eq!(check(platform.log().len()), Ok(()));
        barrier::load_after_completion();
        assert_eq!(check(platform.log().len()), Ok(()), "a later load barrier changes nothing");
        platform.cpu_fill(&data.slice(8, 8).unwrap(), 1);
        platform.clean_for_device(&data);
        assert!(check(platform.log().len()).unwrap_err().contains("no store barrier"));
        let handover = platform.log().len();
        platform.cpu_fill(&data, 2);
        let late = platform.log().check_device_access(range, handover, platform.log().len(), false);
        assert!(late.unwrap_err().contains("after handing them to the device"));
    }

    #[test]
    fn never_prepared_memory_is_refused_only_where_it_must_be_prepared() {
        let platform = ArenaPlatform::new(1 << 16);
        let range = ByteRange::new(PHYSICAL_BASE + 0x8000, 64);
        let now = platform.log().len();
        assert!(platform.log().check_device_access(range, now, now, true).is_err());
        assert_eq!(platform.log().check_device_access(range, now, now, false), Ok(()));
    }

    #[test]
    fn coverage_merges_touching_pieces() {
        let mut coverage = Coverage::default();
        coverage.add(ByteRange::new(0, 8));
        coverage.add(ByteRange::new(16, 8));
        assert!(!coverage.covers(ByteRange::new(0, 24)));
        coverage.add(ByteRange::new(8, 8));
        assert!(coverage.covers(ByteRange::new(0, 24)));
        assert!(!coverage.covers(ByteRange::new(20, 8)));
        assert_eq!(ByteRange::new(0, 8).overlap(&ByteRange::new(8, 8)), None);
        assert_eq!(ByteRange::new(0, 10).overlap(&ByteRange::new(8, 8)), Some(ByteRange::new(8, 2)));
    }
}
