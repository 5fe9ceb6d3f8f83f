//! Test doubles shared by the drivers' host tests: an arena of host memory standing in for the
//! kernel's DMA pool (physical addresses from [`PHYSICAL_BASE`], handed out by a bump allocator
//! like `KernelPlatform`'s), a 1 GHz [`SteppingClock`] that moves a set step on every read,
//! counters of the cache-maintenance calls a driver makes, and an optional [`BusView`]: how a bus
//! model (the PCIe root complex's inbound windows) turns a device's DMA address into a physical one.

extern crate std;

use crate::platform::{DmaAllocationError, Platform};
use blockdev::testing::SteppingClock;
use blockdev::{Clock, DmaBuffer};
use core::cell::{Cell, RefCell};
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::rc::Rc;

/// How a bus between a simulated device and memory decodes the device's DMA addresses.
pub trait BusView {
    /// The physical address behind `length_bytes` at bus address `bus_address`, or `None` when
    /// the bus does not forward it (the model records why).
    fn to_physical(&self, bus_address: u64, length_bytes: usize) -> Option<u64>;
}

/// Where the arena's physical addresses start (inside QEMU virt's RAM, for realism).
pub const PHYSICAL_BASE: u64 = 0x4000_0000;
const ARENA_ALIGNMENT: usize = 65536;

pub struct ArenaPlatform {
    arena: *mut u8,
    arena_bytes: usize,
    next_free: Cell<usize>,
    clock: SteppingClock,
    pub clean_calls: Cell<u64>,
    pub invalidate_calls: Cell<u64>,
    bus_view: RefCell<Option<Rc<dyn BusView>>>,
}

impl ArenaPlatform {
    /// An arena of `arena_bytes` zeroed bytes; the clock steps 1 µs per read.
    pub fn new(arena_bytes: usize) -> Self {
        let layout = Layout::from_size_align(arena_bytes, ARENA_ALIGNMENT).expect("layout");
        // SAFETY: the layout has a non-zero size; the memory is freed in `drop`.
        let arena = unsafe { alloc_zeroed(layout) };
        assert!(!arena.is_null(), "test arena allocation");
        ArenaPlatform {
            arena,
            arena_bytes,
            next_free: Cell::new(0),
            clock: SteppingClock::new(1_000_000_000, 1_000),
            clean_calls: Cell::new(0),
            invalidate_calls: Cell::new(0),
            bus_view: RefCell::new(None),
        }
    }

    /// Sets how far the clock moves on each read.
    pub fn set_step_ticks(&self, ticks: u64) {
        self.clock.set_step_ticks(ticks);
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

    /// The host pointer behind `length_bytes` at `physical_address`, if inside the arena.
    pub fn cpu_pointer(&self, physical_address: u64, length_bytes: usize) -> Option<*mut u8> {
        let offset = physical_address.checked_sub(PHYSICAL_BASE)? as usize;
        (offset.checked_add(length_bytes)? <= self.arena_bytes).then(|| self.arena.wrapping_add(offset))
    }
}

impl Drop for ArenaPlatform {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.arena_bytes, ARENA_ALIGNMENT).expect("layout");
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { dealloc(self.arena, layout) };
    }
}

impl Clock for ArenaPlatform {
    fn now_ticks(&self) -> u64 {
        self.clock.now_ticks()
    }

    fn ticks_per_second(&self) -> u64 {
        self.clock.ticks_per_second()
    }
}

impl Platform for ArenaPlatform {
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
        Ok(DmaBuffer {
            cpu_address: self.arena as usize + start,
            physical_address: PHYSICAL_BASE + start as u64,
            length_bytes,
        })
    }

    fn clean_for_device(&self, _buffer: &DmaBuffer) {
        self.clean_calls.set(self.clean_calls.get() + 1);
    }

    fn invalidate_for_cpu(&self, _buffer: &DmaBuffer) {
        self.invalidate_calls.set(self.invalidate_calls.get() + 1);
    }
}
