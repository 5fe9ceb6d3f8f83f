//! The barebench kernel: board discovery, console, memory, devices and the benchmark run.
//! The modules below `runtime` only exist on the bare-metal target; the rest is portable and
//! tested on the host.
#![cfg_attr(target_os = "none", no_std)]

extern crate alloc;

pub mod atags;
pub mod block_checks;
pub mod board;
pub mod boot_time;
pub mod conditions;
pub mod devicetree;
pub mod discovery;
pub mod kernel_settings;
pub mod memory_plan;
pub mod queue_depth;
pub mod root_complex_plan;
pub mod sd_dma;

#[cfg(target_os = "none")]
pub mod runtime;
