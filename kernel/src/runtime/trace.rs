//! The trace channel (`trace=DEV[:N]`): after each traced run the records leave through
//! `defmt` (docs/ecosystem.md §2.2): one frame per record, each frame written to the console as
//! one line of base64 (`bench::trace::text`) between the benchmark's `==== barebench trace
//! begin DEV RUN ====` and `==== barebench trace end ====` lines. A terminal shows harmless
//! text, the rest of the console stays plain text, and `barebench report --trace` decodes the
//! frames with `defmt-decoder` and the kernel ELF that carries the format strings.
//!
//! This is the kernel's `#[defmt::global_logger]`: nothing else logs through defmt.

use super::sync::SingleCoreCell;
use crate::println;
use bench::console::Console;
use bench::trace::{text, RunTrace, TraceOutput, WireRecord};
use core::fmt;

/// The longest frame: a record is 11 integers of at most 8 bytes plus the format index, and
/// rzcobs adds one byte in seven at worst.
const FRAME_BYTES: usize = 256;

/// The frame being encoded.
struct Channel {
    encoder: defmt::Encoder,
    frame: heapless::Vec<u8, FRAME_BYTES>,
    overflowed: bool,
}

impl Channel {
    /// The encoder and a sink for its bytes, borrowed apart.
    fn parts(&mut self) -> (&mut defmt::Encoder, impl FnMut(&[u8]) + '_) {
        let Channel { encoder, frame, overflowed } = self;
        let sink = move |bytes: &[u8]| {
            if frame.extend_from_slice(bytes).is_err() {
                *overflowed = true;
            }
        };
        (encoder, sink)
    }
}

static CHANNEL: SingleCoreCell<Channel> = SingleCoreCell::new(Channel {
    encoder: defmt::Encoder::new(),
    frame: heapless::Vec::new(),
    overflowed: false,
});

#[defmt::global_logger]
struct Frames;

// SAFETY: one core, no interrupts (runtime::sync): frames never interleave; `acquire` and
// `release` bracket every frame as defmt's contract asks.
unsafe impl defmt::Logger for Frames {
    fn acquire() {
        CHANNEL.with(|channel| {
            channel.frame.clear();
            channel.overflowed = false;
            let (encoder, sink) = channel.parts();
            encoder.start_frame(sink);
        });
    }

    unsafe fn flush() {}

    unsafe fn release() {
        CHANNEL.with(|channel| {
            let (encoder, sink) = channel.parts();
            encoder.end_frame(sink);
            if channel.overflowed {
                println!("(a trace frame longer than {FRAME_BYTES} bytes was dropped)");
            } else {
                println!("{}", Base64(&channel.frame));
            }
        });
    }

    unsafe fn write(bytes: &[u8]) {
        CHANNEL.with(|channel| {
            let (encoder, sink) = channel.parts();
            encoder.write(bytes, sink);
        });
    }
}

struct Base64<'a>(&'a [u8]);

impl fmt::Display for Base64<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        text::encode(self.0, f)
    }
}

/// Writes each run's records as defmt frames: first `trace DEV RUN TICKS_PER_SECOND START_TICKS
/// RECORDS NOT_KEPT`, then `cmd` and the [`WireRecord`] fields in their order.
pub struct DefmtTraces;

impl TraceOutput for DefmtTraces {
    fn write_records(&self, _console: &mut dyn Console, trace: &RunTrace<'_>) {
        let ring = trace.ring;
        defmt::println!(
            "trace {=str} {=str} {=u64} {=u64} {=u64} {=u64}",
            trace.device,
            trace.run_name,
            trace.ticks_per_second,
            ring.start_ticks(),
            ring.records().len() as u64,
            ring.not_kept()
        );
        for record in ring.records() {
            let w = WireRecord::from_record(record);
            defmt::println!(
                "cmd {=u64} {=u64} {=u64} {=u64} {=u32} {=u16} {=u16} {=u32} {=u8} {=u8} {=u32}",
                w.submitted_ticks,
                w.kicked_ticks,
                w.completed_ticks,
                w.lba,
                w.block_count,
                w.queue_id,
                w.command_id,
                w.sq_head,
                w.operation,
                w.status,
                w.status_code
            );
        }
    }
}
