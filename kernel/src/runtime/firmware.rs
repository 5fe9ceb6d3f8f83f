//! Property calls to the VideoCore firmware through the mailbox (docs/hardware.md §4.6), with the
//! buffer's cache maintenance and bus address handled here.
#![forbid(unsafe_code)]

use super::sync::SingleCoreCell;
use super::timer::KernelTimer;
use crate::board::MmioBlock;
use drivers::mailbox::{tags, Mailbox, MailboxError, PropertyBuffer, PropertyTags};
use hal::mmio::Mmio;
use hal::platform::BusTranslation;

static BUFFER: SingleCoreCell<PropertyBuffer> =
    SingleCoreCell::new(PropertyBuffer { words: [0; drivers::mailbox::BUFFER_WORDS] });

/// Longest answer [`property`] hands back.
pub const MAX_RESPONSE_WORDS: usize = 512;

/// The mailbox of one board.
#[derive(Clone, Copy)]
pub struct Firmware {
    mailbox: Mmio,
    videocore_bus: BusTranslation,
    timer: KernelTimer,
}

impl Firmware {
    /// The firmware behind the board's VideoCore `mailbox` block; `videocore_bus` is how the
    /// VideoCore sees the buffer (the board's alias).
    pub fn new(
        mailbox: MmioBlock,
        videocore_bus: BusTranslation,
        timer: KernelTimer,
    ) -> Result<Self, super::windows::OutsideDevices> {
        let mailbox = super::windows::open(mailbox)?;
        Ok(Firmware { mailbox, videocore_bus, timer })
    }

    /// Sends one tag and returns its answer words, waited for and judged by the tag's rules
    /// (`drivers::mailbox::rules_for`).
    pub fn property(
        &self,
        tag: u32,
        request: &[u32],
        response_words: usize,
    ) -> Result<heapless::Vec<u32, MAX_RESPONSE_WORDS>, MailboxError> {
        let mailbox = Mailbox::new(self.mailbox);
        let rules = drivers::mailbox::rules_for(tag);
        BUFFER
            .with(|buffer| {
                buffer.prepare_single_tag(tag, request, response_words)?;
                let address = buffer as *mut PropertyBuffer as usize;
                let bytes = core::mem::size_of::<PropertyBuffer>();
                hal::cache::clean_data_cache_range(address, bytes);
                let bus_address = self
                    .videocore_bus
                    .to_bus(address as u64, bytes as u64)
                    .map_err(|_| MailboxError::BufferTooSmall)?;
                mailbox.call(&self.timer, bus_address as u32, rules.timeout_us)?;
                hal::cache::invalidate_data_cache_range(address, bytes);
                // The firmware wrote the buffer behind the compiler's back.
                let answer = buffer.single_tag_response(rules)?;
                Ok(answer.iter().copied().take(MAX_RESPONSE_WORDS).collect())
            })
            .unwrap_or(Err(MailboxError::BufferTooSmall))
    }

    pub fn board_revision(&self) -> Result<u32, MailboxError> {
        let answer = self.property(drivers::mailbox::tags::GET_BOARD_REVISION, &[], 1)?;
        answer
            .first()
            .copied()
            .ok_or(MailboxError::TagNotAnswered { tag: drivers::mailbox::tags::GET_BOARD_REVISION })
    }

    /// The ARM's share of RAM: (base, size).
    pub fn arm_memory(&self) -> Result<(u64, u64), MailboxError> {
        let answer = self.property(drivers::mailbox::tags::GET_ARM_MEMORY, &[], 2)?;
        match answer.as_slice() {
            [base, size, ..] => Ok((u64::from(*base), u64::from(*size))),
            _ => Err(MailboxError::TagNotAnswered { tag: drivers::mailbox::tags::GET_ARM_MEMORY }),
        }
    }

    pub fn clock_rate_hz(&self, clock_id: u32) -> Result<u32, MailboxError> {
        drivers::mailbox::clock_rate_hz(self, tags::GET_CLOCK_RATE, clock_id)
    }

    /// The firmware's build (a Unix time), or QEMU's fixed number.
    pub fn firmware_revision(&self) -> Result<u32, MailboxError> {
        let answer = self.property(tags::GET_FIRMWARE_REVISION, &[], 1)?;
        answer.first().copied().ok_or(MailboxError::TagNotAnswered { tag: tags::GET_FIRMWARE_REVISION })
    }

    /// Asks the VideoCore to load the VL805's firmware into the function at `device_address`
    /// (bus << 20 | device << 15 | function << 12) after a PCIe reset (up to a second; whether it
    /// worked is read from the VL805: `drivers::pci::vl805`).
    pub fn notify_xhci_reset(&self, device_address: u32) -> Result<(), MailboxError> {
        self.property(drivers::mailbox::tags::NOTIFY_XHCI_RESET, &[device_address], 1).map(|_| ())
    }

    /// The command line the firmware holds (cmdline.txt, or QEMU's -append).
    pub fn command_line(
        &self,
        out: &mut heapless::String<{ crate::discovery::COMMAND_LINE_BYTES }>,
    ) -> Result<(), MailboxError> {
        let answer = self.property(drivers::mailbox::tags::GET_COMMAND_LINE, &[], MAX_RESPONSE_WORDS)?;
        out.clear();
        for word in answer {
            for byte in word.to_le_bytes() {
                if byte == 0 {
                    return Ok(());
                }
                let _ = out.push(byte as char);
            }
        }
        Ok(())
    }
}

impl PropertyTags for Firmware {
    fn call_tag(&self, tag: u32, request: &[u32], response: &mut [u32]) -> Result<usize, MailboxError> {
        let answer = self.property(tag, request, response.len())?;
        let count = answer.len().min(response.len());
        response[..count].copy_from_slice(&answer[..count]);
        Ok(count)
    }
}
