//! `barebench qemu --boot-card IMAGE`: boots a QEMU raspi machine from a card image the way the Pi
//! firmware boots a Pi from its card, so that a QEMU place of a board farm (docs/farm.md) takes
//! the same card a real Pi does. QEMU's raspi machines have no GPU firmware and boot only a
//! `-kernel` (docs/qemu.md §1), so this plays the firmware's part: it reads `config.txt` from
//! the card's FAT partition, takes the `kernel=` file of the machine's board section (`[pi1]`,
//! `[pi0]`, `[pi2]`, `[pi3]`, `[pi4]`, as Raspberry Pi's config.txt documentation "Conditional
//! filters" defines them; a later model filter replaces an earlier one, `[all]` applies to every
//! board) and passes `cmdline.txt` as the command line. The card itself becomes the machine's SD
//! card, written in place as a real card is. QEMU's `virt` has no firmware files at all: it
//! takes its kernel from `--kernel` and only `cmdline.txt` from the card.
#![forbid(unsafe_code)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::image::fat::read_file_from_image;
use crate::qemu::Machine;

/// Errors reading a boot card.
#[derive(Debug, thiserror::Error)]
pub enum BootCardError {
    #[error("cannot read {file} from the card {card}: {source} (make the card with `barebench image`)")]
    ReadFile { card: PathBuf, file: &'static str, source: io::Error },
    #[error("the card {card} is {size_bytes} bytes, not a power of two, which QEMU's SD card model refuses (`barebench image` makes such sizes)")]
    NotPowerOfTwo { card: PathBuf, size_bytes: u64 },
    #[error("cannot read the card {card}: {source}")]
    Card { card: PathBuf, source: io::Error },
    #[error("config.txt on the card {card} names no kernel= for [{filter}]")]
    NoKernel { card: PathBuf, filter: &'static str },
    #[error("cannot read {kernel} from the card {card}: {source}")]
    ReadKernel { card: PathBuf, kernel: String, source: io::Error },
    #[error("cannot write the card's kernel to {path}: {source}")]
    WriteKernel { path: PathBuf, source: io::Error },
}

/// What the firmware would take from the card for one machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootCard {
    /// The card image, used in place as the machine's SD card.
    pub card: PathBuf,
    pub size_bytes: u64,
    /// The kernel copied out of the card (`None` on virt, which has no firmware).
    pub kernel: Option<PathBuf>,
    /// The file `kernel` was copied from, e.g. `kernel8.img`.
    pub kernel_name: Option<String>,
    /// cmdline.txt, as one line of settings.
    pub cmdline: String,
}

/// The config.txt model filter of the board each raspi machine emulates (`None` for virt).
pub fn board_filter(machine: Machine) -> Option<&'static str> {
    match machine {
        Machine::Raspi0 => Some("pi0"),
        Machine::Raspi1ap => Some("pi1"),
        Machine::Raspi2b => Some("pi2"),
        Machine::Raspi3b => Some("pi3"),
        Machine::Raspi4b => Some("pi4"),
        Machine::Virt => None,
    }
}

/// The `kernel=` that applies to boards matching `filter`: lines before any section and under
/// `[all]` apply to every board, lines under `[piN]` to that model only; the last one wins.
pub fn kernel_for(config_txt: &str, filter: &str) -> Option<String> {
    let mut applies = true;
    let mut kernel = None;
    for line in config_txt.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(section) = line.strip_prefix('[').and_then(|rest| rest.strip_suffix(']')) {
            // Only model filters and [all] change what applies; other filters ([none], [tryboot],
            // [board-type=...]) are not used on barebench cards and apply to no emulated board.
            applies = section == "all" || section == filter;
            continue;
        }
        if let Some(value) = line.strip_prefix("kernel=").filter(|_| applies) {
            kernel = Some(value.trim().to_string());
        }
    }
    kernel
}

/// Reads what the firmware would take from `card` for `machine`, copying the kernel into
/// `workdir` (raspi machines only).
pub fn load(card: &Path, machine: Machine, workdir: &Path) -> Result<BootCard, BootCardError> {
    let size_bytes =
        fs::metadata(card).map_err(|source| BootCardError::Card { card: card.to_path_buf(), source })?.len();
    if !size_bytes.is_power_of_two() {
        return Err(BootCardError::NotPowerOfTwo { card: card.to_path_buf(), size_bytes });
    }
    let read_text = |file: &'static str| {
        read_file_from_image(card, file)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .map_err(|source| BootCardError::ReadFile { card: card.to_path_buf(), file, source })
    };
    let cmdline = read_text("cmdline.txt")?.lines().next().unwrap_or("").trim().to_string();
    let (kernel, kernel_name) =
        match board_filter(machine) {
            None => (None, None),
            Some(filter) => {
                let config = read_text("config.txt")?;
                let name = kernel_for(&config, filter)
                    .ok_or(BootCardError::NoKernel { card: card.to_path_buf(), filter })?;
                let bytes = read_file_from_image(card, &name).map_err(|source| {
                    BootCardError::ReadKernel { card: card.to_path_buf(), kernel: name.clone(), source }
                })?;
                let path = workdir.join(format!("boot-card-{}-{name}", machine.qemu_name()));
                let write_error = |source| BootCardError::WriteKernel { path: path.clone(), source };
                fs::create_dir_all(workdir).map_err(write_error)?;
                fs::write(&path, bytes).map_err(write_error)?;
                (Some(path), Some(name))
            }
        };
    Ok(BootCard { card: card.to_path_buf(), size_bytes, kernel, kernel_name, cmdline })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::config::{config_txt, ConfigOptions};

    #[test]
    fn each_raspi_machine_boots_the_kernel_its_board_section_names() {
        let config = config_txt(&ConfigOptions::default());
        let chosen: Vec<(Machine, Option<String>)> =
            [Machine::Raspi0, Machine::Raspi1ap, Machine::Raspi2b, Machine::Raspi3b, Machine::Raspi4b]
                .into_iter()
                .map(|machine| (machine, kernel_for(&config, board_filter(machine).unwrap())))
                .collect();
        let expected = ["kernel.img", "kernel.img", "kernel7.img", "kernel8.img", "kernel8.img"];
        for ((machine, kernel), expected) in chosen.iter().zip(expected) {
            assert_eq!(kernel.as_deref(), Some(expected), "{machine:?}");
        }
        assert_eq!(board_filter(Machine::Virt), None);
    }

    #[test]
    fn all_applies_to_every_board_and_a_model_section_only_to_its_own() {
        let config = "kernel=a.img\n[pi4]\nkernel=b.img # the Pi 4's\n[pi3]\n[all]\n";
        assert_eq!(kernel_for(config, "pi4").as_deref(), Some("b.img"));
        assert_eq!(kernel_for(config, "pi3").as_deref(), Some("a.img"));
        assert_eq!(kernel_for("[pi4]\nkernel=b.img\n", "pi2"), None);
        assert_eq!(
            kernel_for("[all]\nkernel=c.img\n[pi2]\nkernel=d.img\n[all]\n", "pi2").as_deref(),
            Some("d.img")
        );
    }

    #[test]
    fn a_card_from_barebench_image_gives_its_settings_and_the_board_s_kernel() {
        let dir = tempfile::tempdir().unwrap();
        let firmware = dir.path().join("firmware");
        fs::create_dir(&firmware).unwrap();
        fs::write(firmware.join("start.elf"), b"placeholder").unwrap();
        let (kernel, kernel32) = (dir.path().join("k8.img"), dir.path().join("k.img"));
        fs::write(&kernel, b"64-bit kernel").unwrap();
        fs::write(&kernel32, b"32-bit kernel").unwrap();
        let card = dir.path().join("card.img");
        let request = crate::image::ImageRequest {
            output: card.clone(),
            kernel,
            kernel32,
            settings: vec!["preset=matrix".into(), "write=sd0".into()],
            size_bytes: Some(64 << 20),
            firmware: crate::image::FirmwareSource::Directory(firmware),
            firmware_boot_log: false,
            pi5_console: crate::image::config::Pi5Console::Debug,
        };
        crate::image::create_image(&request, &mut |_| {}).unwrap();
        let work = dir.path().join("work");
        let boot = load(&card, Machine::Raspi2b, &work).unwrap();
        assert_eq!(boot.cmdline, "preset=matrix write=sd0");
        assert_eq!(boot.kernel_name.as_deref(), Some("kernel7.img"));
        assert_eq!(fs::read(boot.kernel.unwrap()).unwrap(), b"32-bit kernel");
        assert_eq!(boot.size_bytes, 64 << 20);
        let boot = load(&card, Machine::Raspi4b, &work).unwrap();
        assert_eq!(fs::read(boot.kernel.unwrap()).unwrap(), b"64-bit kernel");
        let virt = load(&card, Machine::Virt, &work).unwrap();
        assert_eq!((virt.kernel, virt.cmdline.as_str()), (None, "preset=matrix write=sd0"));
    }

    #[test]
    fn a_card_that_is_not_a_power_of_two_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let card = dir.path().join("card.img");
        fs::write(&card, vec![0u8; 3 * 512]).unwrap();
        let error = load(&card, Machine::Raspi3b, dir.path()).unwrap_err();
        assert!(matches!(error, BootCardError::NotPowerOfTwo { size_bytes: 1536, .. }), "{error}");
        fs::write(&card, vec![0u8; 4096]).unwrap();
        let error = load(&card, Machine::Raspi3b, dir.path()).unwrap_err();
        assert!(error.to_string().contains("cmdline.txt"), "{error}");
    }
}
