//! Faults `barebench qemu --fault KIND` injects into the emulated devices, so that a user sees
//! what the kernel does when a device fails (docs/qemu.md §12): media errors from a `blkdebug`
//! layer under the NVMe drive (QEMU's docs/devel/blkdebug.rst, `[inject-error]` rules), and a
//! drive slower than the NVMe command timeout (QEMU's `null-co` driver with `latency-ns`), the
//! NVMe device unrealized and the SD card's medium ejected mid-run through QEMU's monitor.
#![forbid(unsafe_code)]

use std::fmt::Write as _;

/// One fault a QEMU run can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    /// Every read of the NVMe drive's second MiB fails with EIO, which QEMU's NVMe model
    /// answers with Unrecovered Read Error (02/81).
    NvmeMedia,
    /// The NVMe drive answers every read after 2 s (reads zeros); the kernel's command timeout
    /// is set to 500 ms unless `nvme.timeout-ms=` is given.
    NvmeSlow,
    /// The NVMe device is removed 0.5 s into its first run, without the guest's cooperation
    /// (QEMU monitor: `qom-set .../nv0 realized false`); its registers then read as all ones.
    NvmeGone,
    /// The SD card's medium is ejected 0.5 s into its first run (QEMU monitor: `eject -f sdc`):
    /// QEMU's sdhci clears Card Inserted and raises Card Removal, the card answers nothing.
    SdEject,
    /// The whole board stops 0.5 s into the first run (QEMU monitor: `stop`, every CPU and
    /// device frozen): its console goes silent mid-run, as a hung board's does, and QEMU keeps
    /// running until it is killed. For the board farm's timeout handling (docs/farm.md).
    Hang,
}

/// First sector of the band of media errors: the drive's second MiB.
pub const MEDIA_ERROR_FIRST_SECTOR: u64 = 2048;
/// Sectors in the band (1 MiB of 512-byte sectors).
pub const MEDIA_ERROR_SECTORS: u64 = 2048;
/// One rule every this many sectors: every 4 KiB-aligned 4 KiB read in the band meets one.
pub const MEDIA_ERROR_STEP_SECTORS: u64 = 8;
/// How long the slow drive takes for every read.
pub const SLOW_DRIVE_LATENCY_NS: u64 = 2_000_000_000;
/// The command timeout the slow drive's run uses unless the settings name one.
pub const SLOW_DRIVE_TIMEOUT_SETTING: &str = "nvme.timeout-ms=500";
/// `nvme-gone` removes the device once the console shows this (the first run on nvme0 began)...
pub const GONE_AFTER_CONSOLE_TEXT: &str = " on nvme0, region ";
/// ... `sd-eject` the card once its first run began ...
pub const EJECT_AFTER_CONSOLE_TEXT: &str = " on sd0, region ";
/// ... `hang` stops the board once the first run on any device began ...
pub const HANG_AFTER_CONSOLE_TEXT: &str = "run 1/";
/// ... and this much later.
pub const GONE_DELAY: std::time::Duration = std::time::Duration::from_millis(500);
/// The QEMU monitor command that removes the NVMe device at once. `device_del` would only ask
/// the guest (PCIe native hot-plug waits for the guest to power the slot off), which a
/// benchmark kernel never does (docs/qemu.md §12).
pub const GONE_MONITOR_COMMAND: &str = "qom-set /machine/peripheral/nv0 realized false\n";
/// The QEMU monitor command that ejects the SD card's medium (`-f`: the guest cannot lock the
/// tray of an SD card anyway); the drive id is the SD card's `-drive id=` on virt.
pub const EJECT_MONITOR_COMMAND: &str = "eject -f sdc\n";
/// The QEMU monitor command that stops the emulated machine (QEMU's `stop`: the VM pauses until
/// `cont`, which never comes).
pub const HANG_MONITOR_COMMAND: &str = "stop\n";
/// The NVMe device's `-device` id, and the root port it sits in for `nvme-gone`.
pub const NVME_DEVICE_ID: &str = "nv0";
pub const NVME_ROOT_PORT: &str = "pcie-root-port,id=rp1,chassis=1,slot=1";

impl Fault {
    /// The name `--fault` takes.
    pub fn name(self) -> &'static str {
        match self {
            Fault::NvmeMedia => "nvme-media",
            Fault::NvmeSlow => "nvme-slow",
            Fault::NvmeGone => "nvme-gone",
            Fault::SdEject => "sd-eject",
            Fault::Hang => "hang",
        }
    }

    /// What the user should know before the run.
    pub fn note(self) -> String {
        match self {
            Fault::NvmeMedia => format!(
                "fault nvme-media: reads of NVMe sectors {}..{} fail (blkdebug EIO: Unrecovered Read Error)",
                MEDIA_ERROR_FIRST_SECTOR,
                MEDIA_ERROR_FIRST_SECTOR + MEDIA_ERROR_SECTORS
            ),
            Fault::NvmeSlow => format!(
                "fault nvme-slow: the NVMe drive answers every read after {} ms (null-co, zeros); \
                 {SLOW_DRIVE_TIMEOUT_SETTING} unless the settings name a timeout",
                SLOW_DRIVE_LATENCY_NS / 1_000_000
            ),
            Fault::NvmeGone => format!(
                "fault nvme-gone: the NVMe device is removed {} ms into its first run (QEMU monitor: {})",
                GONE_DELAY.as_millis(),
                GONE_MONITOR_COMMAND.trim_end()
            ),
            Fault::SdEject => format!(
                "fault sd-eject: the SD card is ejected {} ms into its first run (QEMU monitor: {})",
                GONE_DELAY.as_millis(),
                EJECT_MONITOR_COMMAND.trim_end()
            ),
            Fault::Hang => format!(
                "fault hang: the board stops {} ms into its first run (QEMU monitor: {}) and prints nothing more",
                GONE_DELAY.as_millis(),
                HANG_MONITOR_COMMAND.trim_end()
            ),
        }
    }

    /// The monitor command the fault sends mid-run, and the console text after which it is due
    /// ([`GONE_DELAY`] later); `None` for faults set up before QEMU starts.
    pub fn mid_run_command(self) -> Option<(&'static str, &'static str)> {
        match self {
            Fault::NvmeMedia | Fault::NvmeSlow => None,
            Fault::NvmeGone => Some((GONE_MONITOR_COMMAND, GONE_AFTER_CONSOLE_TEXT)),
            Fault::SdEject => Some((EJECT_MONITOR_COMMAND, EJECT_AFTER_CONSOLE_TEXT)),
            Fault::Hang => Some((HANG_MONITOR_COMMAND, HANG_AFTER_CONSOLE_TEXT)),
        }
    }

    /// Whether the fault concerns the NVMe drive.
    pub fn needs_nvme(self) -> bool {
        matches!(self, Fault::NvmeMedia | Fault::NvmeSlow | Fault::NvmeGone)
    }

    /// A kernel setting the fault adds unless `settings` already has its key.
    pub fn setting(self, settings: &str) -> Option<&'static str> {
        match self {
            Fault::NvmeMedia | Fault::NvmeGone | Fault::SdEject | Fault::Hang => None,
            Fault::NvmeSlow => {
                let given = settings.split_whitespace().any(|word| word.starts_with("nvme.timeout-ms="));
                (!given).then_some(SLOW_DRIVE_TIMEOUT_SETTING)
            }
        }
    }
}

/// The blkdebug configuration of `nvme-media`: one `[inject-error]` rule per 4 KiB of the band,
/// every read (`read_aio`) meeting one fails with EIO (errno 5), every time (`once = "off"`).
pub fn media_error_rules() -> String {
    let mut rules = String::new();
    let end = MEDIA_ERROR_FIRST_SECTOR + MEDIA_ERROR_SECTORS;
    for sector in (MEDIA_ERROR_FIRST_SECTOR..end).step_by(MEDIA_ERROR_STEP_SECTORS as usize) {
        let _ = write!(
            rules,
            "[inject-error]\nevent = \"read_aio\"\nerrno = \"5\"\nsector = \"{sector}\"\nonce = \"off\"\n\n"
        );
    }
    rules
}

/// The `-drive` value of the NVMe drive with `faults` applied: `plain` (the usual raw file) when
/// none concerns it, a raw format over blkdebug over the file for `nvme-media`, and a null-co
/// drive of `size_bytes` for `nvme-slow`.
pub fn nvme_drive(
    faults: &[Fault],
    plain: &str,
    (image, aio, size_bytes): (&str, &str, u64),
    blkdebug_config: &str,
) -> String {
    if faults.contains(&Fault::NvmeSlow) {
        return format!(
            "if=none,id=nv,driver=null-co,size={size_bytes},latency-ns={SLOW_DRIVE_LATENCY_NS},read-zeroes=on"
        );
    }
    if faults.contains(&Fault::NvmeMedia) {
        return format!(
            "if=none,id=nv,driver=raw,file.driver=blkdebug,file.config={blkdebug_config},\
             file.image.filename={image},file.image.aio={aio},snapshot=on"
        );
    }
    plain.to_string()
}

/// When `nvme-gone` removes the device (`sd-eject` ejects the card): once the console has shown
/// that the first run on the device began, [`GONE_DELAY`] later.
#[derive(Debug)]
pub struct RemovalTimer {
    after_console_text: &'static str,
    due: Option<std::time::Instant>,
    done: bool,
}

impl RemovalTimer {
    /// A timer waiting for `after_console_text` on the console.
    pub fn new(after_console_text: &'static str) -> RemovalTimer {
        RemovalTimer { after_console_text, due: None, done: false }
    }

    /// Whether the removal is due now, given the console so far; true once.
    pub fn due(&mut self, console_so_far: &[u8], now: std::time::Instant) -> bool {
        if self.done {
            return false;
        }
        if self.due.is_none() {
            let needle = self.after_console_text.as_bytes();
            if console_so_far.windows(needle.len()).any(|window| window == needle) {
                self.due = Some(now + GONE_DELAY);
            }
        }
        if self.due.is_some_and(|due| now >= due) {
            self.done = true;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_rules_cover_every_4k_of_the_band_and_fail_every_time() {
        let rules = media_error_rules();
        assert_eq!(rules.matches("[inject-error]").count(), 256);
        assert!(rules.starts_with(
            "[inject-error]\nevent = \"read_aio\"\nerrno = \"5\"\nsector = \"2048\"\nonce = \"off\"\n"
        ));
        assert!(rules.contains("sector = \"4088\"") && !rules.contains("sector = \"4096\""));
        assert!(!rules.contains("once = \"on\""));
    }

    #[test]
    fn each_fault_shapes_the_nvme_drive() {
        let plain = "if=none,id=nv,file=d.img,format=raw,snapshot=on,aio=io_uring";
        let shaped = |faults: &[Fault]| nvme_drive(faults, plain, ("d.img", "io_uring", 64 << 20), "b.conf");
        assert_eq!(shaped(&[]), plain);
        assert_eq!(
            shaped(&[Fault::NvmeMedia]),
            "if=none,id=nv,driver=raw,file.driver=blkdebug,file.config=b.conf,file.image.filename=d.img,\
             file.image.aio=io_uring,snapshot=on"
        );
        assert_eq!(
            shaped(&[Fault::NvmeSlow]),
            "if=none,id=nv,driver=null-co,size=67108864,latency-ns=2000000000,read-zeroes=on"
        );
    }

    #[test]
    fn the_removal_comes_once_half_a_second_after_the_first_nvme_run_begins() {
        let start = std::time::Instant::now();
        let mut timer = RemovalTimer::new(GONE_AFTER_CONSOLE_TEXT);
        assert!(!timer.due(b"run 1/2: randread 4k qd1 on sd0, region 4m", start));
        let console = b"run 1/2: randread 4k qd4 on nvme0, region 4m at offset 0";
        assert!(!timer.due(console, start));
        assert!(!timer.due(console, start + GONE_DELAY / 2));
        assert!(timer.due(console, start + GONE_DELAY));
        assert!(!timer.due(console, start + GONE_DELAY * 4), "once");
    }

    #[test]
    fn the_sd_eject_comes_after_the_first_sd_run_begins_through_the_monitor() {
        let (command, after) = Fault::SdEject.mid_run_command().unwrap();
        assert_eq!(command, "eject -f sdc\n");
        let start = std::time::Instant::now();
        let mut timer = RemovalTimer::new(after);
        assert!(!timer.due(b"run 1/2: randread 4k qd4 on nvme0, region 4m", start + GONE_DELAY));
        let console = b"run 1/2: randread 4k qd1 on sd0, region 4m at offset 0";
        assert!(!timer.due(console, start));
        assert!(timer.due(console, start + GONE_DELAY));
        assert!(!Fault::SdEject.needs_nvme() && Fault::NvmeGone.needs_nvme());
        assert_eq!(Fault::NvmeMedia.mid_run_command(), None);
        assert!(Fault::SdEject.note().contains("eject -f sdc"));
    }

    #[test]
    fn the_hang_stops_the_whole_board_once_the_first_run_of_any_device_began() {
        let (command, after) = Fault::Hang.mid_run_command().unwrap();
        assert_eq!(command, "stop\n");
        let start = std::time::Instant::now();
        let mut timer = RemovalTimer::new(after);
        assert!(!timer.due(b"job 1/12: read:4k:64\r\nsd0 has no command queueing", start + GONE_DELAY));
        let console = b"job 1/12: read:4k:64\r\nrun 1/1: read 4k qd1 on sd0, region 64m at offset 0";
        assert!(!timer.due(console, start));
        assert!(timer.due(console, start + GONE_DELAY));
        assert!(!Fault::Hang.needs_nvme());
        assert_eq!(Fault::Hang.setting("preset=matrix"), None);
    }

    #[test]
    fn the_slow_drive_brings_its_timeout_unless_one_is_set() {
        assert_eq!(Fault::NvmeSlow.setting("preset=quick"), Some("nvme.timeout-ms=500"));
        assert_eq!(Fault::NvmeSlow.setting("nvme.timeout-ms=900 preset=quick"), None);
        assert_eq!(Fault::NvmeMedia.setting(""), None);
        assert!(Fault::NvmeMedia.note().contains("sectors 2048..4096"));
    }
}
