//! The VideoCore mailbox property interface (channel 8): board revision, memory split, clock
//! rates, power, the firmware's copy of the command line (docs/hardware.md §4.6, after circle's
//! `bcmmailbox.cpp`/`bcmpropertytags.h` and the Raspberry Pi firmware wiki's tag list).

use crate::barrier;
use crate::mmio::RegisterIo;
use crate::platform::wait_until;
use blockdev::Clock;
use core::fmt;

/// Register offsets from the mailbox base (docs/hardware.md §4.6).
pub mod offsets {
    pub const READ: usize = 0x00;
    pub const READ_STATUS: usize = 0x18;
    pub const WRITE: usize = 0x20;
    pub const WRITE_STATUS: usize = 0x38;
}

const STATUS_EMPTY: u32 = 1 << 30;
const STATUS_FULL: u32 = 1 << 31;
pub const PROPERTY_CHANNEL: u32 = 8;
const REQUEST_CODE: u32 = 0;
const RESPONSE_SUCCESS: u32 = 0x8000_0000;
const TAG_RESPONSE_BIT: u32 = 0x8000_0000;

/// Property tags used by the kernel (docs/hardware.md §4.6; docs/qemu.md §1 for what QEMU answers).
pub mod tags {
    pub const GET_BOARD_REVISION: u32 = 0x0001_0002;
    pub const GET_ARM_MEMORY: u32 = 0x0001_0005;
    pub const SET_POWER_STATE: u32 = 0x0002_8001;
    pub const GET_CLOCK_RATE: u32 = 0x0003_0002;
    pub const SET_GPIO_STATE: u32 = 0x0003_8041;
    pub const GET_COMMAND_LINE: u32 = 0x0005_0001;
    /// Reload the VL805 USB 3 controller's firmware after a PCIe reset; the request word is
    /// the function's bus << 20 | device << 15 | function << 12 (Linux
    /// `drivers/reset/reset-raspberrypi.c`, docs/usb-storage.md §7).
    pub const NOTIFY_XHCI_RESET: u32 = 0x0003_0058;
}

/// Clock identifiers for GET_CLOCK_RATE (docs/hardware.md §2.2).
pub mod clocks {
    pub const EMMC: u32 = 1;
    pub const UART: u32 = 2;
    pub const ARM: u32 = 3;
    pub const CORE: u32 = 4;
    pub const EMMC2: u32 = 12;
}

/// Words in a property buffer: enough for a 2 KiB command line plus headers.
pub const BUFFER_WORDS: usize = 540;

/// The memory the firmware reads the request from and writes the answer into.
#[repr(C, align(16))]
#[derive(Clone)]
pub struct PropertyBuffer {
    pub words: [u32; BUFFER_WORDS],
}

impl Default for PropertyBuffer {
    fn default() -> Self {
        PropertyBuffer { words: [0; BUFFER_WORDS] }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MailboxError {
    /// The write mailbox stayed full.
    WriteTimeout { status: u32 },
    /// No answer arrived in time.
    ReadTimeout { status: u32 },
    /// The firmware answered with something other than success in the buffer header.
    RequestFailed { response_code: u32 },
    /// The firmware did not mark the tag as answered.
    TagNotAnswered { tag: u32 },
    /// The request does not fit in a [`PropertyBuffer`].
    BufferTooSmall,
}

impl fmt::Display for MailboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MailboxError::WriteTimeout { status } => {
                write!(f, "mailbox write stayed full (status {status:#010x})")
            }
            MailboxError::ReadTimeout { status } => {
                write!(f, "no mailbox answer (status {status:#010x})")
            }
            MailboxError::RequestFailed { response_code } => {
                write!(f, "firmware refused the request (code {response_code:#010x})")
            }
            MailboxError::TagNotAnswered { tag } => {
                write!(f, "firmware did not answer tag {tag:#010x}")
            }
            MailboxError::BufferTooSmall => write!(f, "property request too large"),
        }
    }
}

impl PropertyBuffer {
    /// Lays out one tag: header, `request` words, room for `response_words` words, end tag.
    /// Returns the index of the tag's first value word.
    pub fn prepare_single_tag(
        &mut self,
        tag: u32,
        request: &[u32],
        response_words: usize,
    ) -> Result<usize, MailboxError> {
        let value_words = request.len().max(response_words);
        let total_words = 2 + 3 + value_words + 1;
        if total_words > BUFFER_WORDS {
            return Err(MailboxError::BufferTooSmall);
        }
        self.words = [0; BUFFER_WORDS];
        self.words[0] = (total_words * 4) as u32;
        self.words[1] = REQUEST_CODE;
        self.words[2] = tag;
        self.words[3] = (value_words * 4) as u32;
        self.words[4] = (request.len() * 4) as u32;
        self.words[5..5 + request.len()].copy_from_slice(request);
        self.words[total_words - 1] = 0;
        Ok(5)
    }

    /// The answer to the tag laid out by [`PropertyBuffer::prepare_single_tag`]: its value words
    /// (as many as the firmware says it wrote, up to the room there was).
    pub fn single_tag_response(&self) -> Result<&[u32], MailboxError> {
        if self.words[1] != RESPONSE_SUCCESS {
            return Err(MailboxError::RequestFailed { response_code: self.words[1] });
        }
        let length_word = self.words[4];
        if length_word & TAG_RESPONSE_BIT == 0 {
            return Err(MailboxError::TagNotAnswered { tag: self.words[2] });
        }
        let room_words = (self.words[3] / 4) as usize;
        let answered_words = ((length_word & !TAG_RESPONSE_BIT) as usize).div_ceil(4).min(room_words);
        Ok(&self.words[5..5 + answered_words])
    }
}

/// The mailbox registers.
pub struct Mailbox<R: RegisterIo> {
    registers: R,
}

/// How long one property call may take; the firmware answers in microseconds.
pub const CALL_TIMEOUT_US: u64 = 100_000;

impl<R: RegisterIo> Mailbox<R> {
    pub fn new(registers: R) -> Self {
        Mailbox { registers }
    }

    /// Sends the buffer at `buffer_bus_address` (as the VideoCore sees it; 16-byte aligned) on
    /// the property channel and waits for the answer. The caller makes the buffer visible to the
    /// VideoCore before (cache clean) and to the CPU after (cache invalidate).
    pub fn call<C: Clock + ?Sized>(&self, clock: &C, buffer_bus_address: u32) -> Result<(), MailboxError> {
        barrier::full();
        // Drop stale answers left by the firmware or an earlier stage.
        let mut stale = 0;
        while self.registers.read32(offsets::READ_STATUS) & STATUS_EMPTY == 0 && stale < 64 {
            self.registers.read32(offsets::READ);
            stale += 1;
        }
        if !wait_until(clock, CALL_TIMEOUT_US, || {
            self.registers.read32(offsets::WRITE_STATUS) & STATUS_FULL == 0
        }) {
            return Err(MailboxError::WriteTimeout { status: self.registers.read32(offsets::WRITE_STATUS) });
        }
        let message = (buffer_bus_address & !0xf) | PROPERTY_CHANNEL;
        self.registers.write32(offsets::WRITE, message);
        let answered = wait_until(clock, CALL_TIMEOUT_US, || {
            self.registers.read32(offsets::READ_STATUS) & STATUS_EMPTY == 0
                && self.registers.read32(offsets::READ) == message
        });
        barrier::full();
        if answered {
            Ok(())
        } else {
            Err(MailboxError::ReadTimeout { status: self.registers.read32(offsets::READ_STATUS) })
        }
    }
}

/// The revision code's fields (Raspberry Pi documentation, "Raspberry Pi revision codes", new
/// style with bit 23 set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoardRevision(pub u32);

impl BoardRevision {
    pub fn is_new_style(self) -> bool {
        self.0 & (1 << 23) != 0
    }

    pub fn model_name(self) -> Option<&'static str> {
        if !self.is_new_style() {
            return None;
        }
        Some(match (self.0 >> 4) & 0xff {
            0x04 => "Raspberry Pi 2 Model B",
            0x08 => "Raspberry Pi 3 Model B",
            0x0a => "Raspberry Pi Compute Module 3",
            0x0d => "Raspberry Pi 3 Model B+",
            0x0e => "Raspberry Pi 3 Model A+",
            0x10 => "Raspberry Pi Compute Module 3+",
            0x11 => "Raspberry Pi 4 Model B",
            0x12 => "Raspberry Pi Zero 2 W",
            0x13 => "Raspberry Pi 400",
            0x14 => "Raspberry Pi Compute Module 4",
            0x15 => "Raspberry Pi Compute Module 4S",
            0x17 => "Raspberry Pi 5",
            0x18 => "Raspberry Pi Compute Module 5",
            0x19 => "Raspberry Pi 500",
            0x1a => "Raspberry Pi Compute Module 5 Lite",
            _ => return None,
        })
    }

    pub fn processor_name(self) -> Option<&'static str> {
        if !self.is_new_style() {
            return None;
        }
        Some(match (self.0 >> 12) & 0xf {
            0 => "BCM2835",
            1 => "BCM2836",
            2 => "BCM2837",
            3 => "BCM2711",
            4 => "BCM2712",
            _ => return None,
        })
    }

    pub fn memory_bytes(self) -> Option<u64> {
        if !self.is_new_style() {
            return None;
        }
        let code = (self.0 >> 20) & 0x7;
        Some((256u64 << 20) << code)
    }

    /// PCB revision 1.x (Pi 4B boards from 1.4 on carry the C0 stepping: docs/hardware.md §1.4).
    pub fn pcb_revision(self) -> u32 {
        self.0 & 0xf
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::cell::{Cell, RefCell};
    use std::collections::VecDeque;

    #[test]
    fn qemu_board_revisions_decode() {
        // QEMU raspi3b and raspi4b answer 0xa02082 and 0xb03115 (docs/qemu.md §1).
        let pi3 = BoardRevision(0x00a0_2082);
        assert_eq!(pi3.model_name(), Some("Raspberry Pi 3 Model B"));
        assert_eq!(pi3.processor_name(), Some("BCM2837"));
        assert_eq!(pi3.memory_bytes(), Some(1 << 30));
        let pi4 = BoardRevision(0x00b0_3115);
        assert_eq!(pi4.model_name(), Some("Raspberry Pi 4 Model B"));
        assert_eq!(pi4.processor_name(), Some("BCM2711"));
        assert_eq!(pi4.memory_bytes(), Some(2 << 30));
        assert_eq!(pi4.pcb_revision(), 5);
        // Pi 5 8 GB: c04170.
        assert_eq!(BoardRevision(0x00d0_4170).model_name(), Some("Raspberry Pi 5"));
        assert_eq!(BoardRevision(0x00d0_4170).memory_bytes(), Some(8 << 30));
        assert_eq!(BoardRevision(0x000e).model_name(), None);
    }

    #[test]
    fn buffer_layout_and_answer() {
        let mut buffer = PropertyBuffer::default();
        let value_index = buffer.prepare_single_tag(tags::GET_CLOCK_RATE, &[clocks::EMMC2], 2).unwrap();
        assert_eq!(value_index, 5);
        assert_eq!(&buffer.words[..8], &[32, 0, tags::GET_CLOCK_RATE, 8, 4, 12, 0, 0]);
        assert_eq!(buffer.single_tag_response(), Err(MailboxError::RequestFailed { response_code: 0 }));
        buffer.words[1] = RESPONSE_SUCCESS;
        assert_eq!(
            buffer.single_tag_response(),
            Err(MailboxError::TagNotAnswered { tag: tags::GET_CLOCK_RATE })
        );
        buffer.words[4] = TAG_RESPONSE_BIT | 8;
        buffer.words[6] = 100_000_000;
        assert_eq!(buffer.single_tag_response().unwrap(), &[12, 100_000_000]);
        assert_eq!(
            buffer.prepare_single_tag(tags::GET_COMMAND_LINE, &[], BUFFER_WORDS),
            Err(MailboxError::BufferTooSmall)
        );
    }

    struct FakeClock(Cell<u64>);
    impl Clock for FakeClock {
        fn now_ticks(&self) -> u64 {
            self.0.set(self.0.get() + 1_000);
            self.0.get()
        }
        fn ticks_per_second(&self) -> u64 {
            1_000_000_000
        }
    }

    /// A mailbox that answers every write after `delay_reads` status reads.
    struct FakeMailbox {
        answers: RefCell<VecDeque<u32>>,
        answer_after_reads: Cell<u32>,
        respond: bool,
    }
    impl RegisterIo for FakeMailbox {
        fn read32(&self, offset_bytes: usize) -> u32 {
            match offset_bytes {
                offsets::READ_STATUS => {
                    let remaining = self.answer_after_reads.get();
                    if remaining > 0 {
                        self.answer_after_reads.set(remaining - 1);
                        return STATUS_EMPTY;
                    }
                    if self.answers.borrow().is_empty() {
                        STATUS_EMPTY
                    } else {
                        0
                    }
                }
                offsets::READ => self.answers.borrow_mut().pop_front().unwrap_or(0),
                _ => 0,
            }
        }
        fn write32(&self, offset_bytes: usize, value: u32) {
            if offset_bytes == offsets::WRITE && self.respond {
                self.answers.borrow_mut().push_back(value);
            }
        }
    }

    #[test]
    fn call_skips_stale_answers_and_times_out_without_one() {
        let clock = FakeClock(Cell::new(0));
        let mailbox = Mailbox::new(FakeMailbox {
            answers: RefCell::new(VecDeque::from([0x1234_5678])),
            answer_after_reads: Cell::new(0),
            respond: true,
        });
        assert_eq!(mailbox.call(&clock, 0xc000_1000), Ok(()));
        let silent = Mailbox::new(FakeMailbox {
            answers: RefCell::new(VecDeque::new()),
            answer_after_reads: Cell::new(3),
            respond: false,
        });
        assert!(matches!(silent.call(&clock, 0xc000_1000), Err(MailboxError::ReadTimeout { .. })));
    }
}
