//! How long the board took to boot (docs/hardware.md §4.7): the firmware's part, read from a
//! counter that ran before the kernel, and the kernel's own, from its first instruction to the
//! banner and to the first measured I/O on its own timer.
#![forbid(unsafe_code)]

use crate::board::BoardFamily;

/// Which counter gives the firmware's part on this machine, and what its zero is.
pub fn firmware_counter(family: BoardFamily, qemu: bool) -> &'static str {
    match (family, qemu) {
        (BoardFamily::QemuVirt, _) => {
            "QEMU virt's generic counter (CNTPCT) at the kernel's entry; it counts QEMU's virtual clock from the emulator's start"
        }
        (_, true) => {
            "the system timer of QEMU's BCM283x model at the kernel's entry; it counts QEMU's virtual clock from the emulator's start"
        }
        (BoardFamily::RaspberryPi5, false) => {
            "the BCM2712 system timer (1 MHz) at the kernel's entry; free-running from the SoC's reset, so it covers the EEPROM bootloader with its built-in firmware and TF-A"
        }
        (BoardFamily::RaspberryPi4, false) => {
            "the BCM2711 system timer (1 MHz) at the kernel's entry; free-running from the SoC's reset, so it covers the EEPROM bootloader and start4.elf"
        }
        (_, false) => {
            "the BCM2835 system timer (1 MHz) at the kernel's entry; free-running from the SoC's reset, so it covers the VideoCore's boot ROM, bootcode.bin and start.elf"
        }
    }
}

/// The firmware's part in ns: the system timer at entry, worked back from a reading taken later
/// (`system_timer_us` when `since_entry_ns` had passed on the kernel's timer).
pub fn system_timer_at_entry_ns(system_timer_us: u64, since_entry_ns: u64) -> u64 {
    (system_timer_us * 1000).saturating_sub(since_entry_ns)
}

/// A short name of the counter for the banner.
pub fn counter_name(family: BoardFamily, qemu: bool) -> &'static str {
    match (family, qemu) {
        (BoardFamily::QemuVirt, _) => "QEMU's CNTPCT, from the emulator's start",
        (_, true) => "QEMU's system timer, from the emulator's start",
        _ => "system timer at entry, from the SoC's reset",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_machine_names_its_counter_and_zero() {
        assert!(firmware_counter(BoardFamily::QemuVirt, true).contains("emulator's start"));
        assert!(firmware_counter(BoardFamily::RaspberryPi4, true).contains("QEMU's BCM283x model"));
        assert!(firmware_counter(BoardFamily::RaspberryPi4, false).contains("BCM2711 system timer"));
        assert!(firmware_counter(BoardFamily::RaspberryPi5, false).contains("BCM2712"));
        assert!(firmware_counter(BoardFamily::RaspberryPi1, false).contains("bootcode.bin"));
        // 2 s on the system timer, read 3 ms after entry: 1.997 s before the kernel.
        assert_eq!(system_timer_at_entry_ns(2_000_000, 3_000_000), 1_997_000_000);
        assert_eq!(system_timer_at_entry_ns(1, 5_000), 0);
    }
}
