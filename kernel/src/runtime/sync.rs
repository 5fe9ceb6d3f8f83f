//! Shared state for a kernel that runs on one core without interrupts.
//!
//! Before the MMU is on every access is Device memory, where exclusive loads and stores (and so
//! `spin::Mutex`) are not dependable (docs/ecosystem.md §2.1, `spin`); the console and the mailbox are
//! used then. [`SingleCoreCell`] needs no atomic read-modify-write: only core 0 runs Rust code
//! and nothing preempts it, so a plain flag catches the one way to re-enter (an exception taken
//! inside the closure), and the exception path uses its own console writer.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

pub struct SingleCoreCell<T> {
    value: UnsafeCell<T>,
    in_use: AtomicBool,
}

// SAFETY: only core 0 executes Rust code (boot parks the others before Rust runs) and no
// interrupts are enabled, so accesses never overlap; `with` refuses re-entry.
unsafe impl<T: Send> Sync for SingleCoreCell<T> {}

impl<T> SingleCoreCell<T> {
    pub const fn new(value: T) -> Self {
        SingleCoreCell { value: UnsafeCell::new(value), in_use: AtomicBool::new(false) }
    }

    /// Runs `f` with exclusive access; `None` if the cell is already in use (re-entry).
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        if self.in_use.load(Ordering::Acquire) {
            return None;
        }
        self.in_use.store(true, Ordering::Release);
        // SAFETY: single core, no interrupts, and the flag above rules out re-entry, so this is
        // the only reference to the value while `f` runs.
        let result = f(unsafe { &mut *self.value.get() });
        self.in_use.store(false, Ordering::Release);
        Some(result)
    }
}
