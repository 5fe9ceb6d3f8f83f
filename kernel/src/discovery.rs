//! Board discovery: the device tree when one is passed, else the ATAGS QEMU's raspi
//! machines pass, else the board table chosen by the CPU (MIDR) and refined by the VideoCore
//! mailbox. The portable part lives here; `runtime` adds the mailbox queries.
#![forbid(unsafe_code)]

use crate::atags::BootTags;
use crate::board::{self, BoardFamily, BoardProfile, Span};
use crate::devicetree::{string_list, DeviceTree};
use boot::cpu::MainId;
use core::fmt::Write;

pub const MAX_MEMORY_BANKS: usize = 8;
pub const MAX_WARNINGS: usize = 8;
pub const COMMAND_LINE_BYTES: usize = 2048;

/// Where the configuration (memory, command line, devices) came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    DeviceTree {
        address: u64,
        total_bytes: usize,
    },
    Atags {
        address: u64,
    },
    /// No boot parameters: the board table plus what the VideoCore firmware answers.
    Firmware,
}

impl core::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigSource::DeviceTree { address, total_bytes } => {
                write!(f, "device tree at {address:#x} ({total_bytes} bytes)")
            }
            ConfigSource::Atags { address } => write!(f, "ATAGS at {address:#x} (no device tree)"),
            ConfigSource::Firmware => {
                write!(f, "board table and VideoCore mailbox (no device tree or ATAGS)")
            }
        }
    }
}

pub type Warning = heapless::String<192>;

/// What the kernel knows about the machine it runs on.
#[derive(Clone)]
pub struct BoardInfo {
    pub profile: &'static BoardProfile,
    pub model: heapless::String<96>,
    pub compatible: heapless::String<64>,
    pub source: ConfigSource,
    pub memory: heapless::Vec<Span, MAX_MEMORY_BANKS>,
    pub command_line: heapless::String<COMMAND_LINE_BYTES>,
    pub core_count: u32,
    pub board_revision: Option<u32>,
    /// The VideoCore firmware's GET_FIRMWARE_REVISION answer.
    pub firmware_revision: Option<u32>,
    pub device_tree: Option<DeviceTree<'static>>,
    pub warnings: heapless::Vec<Warning, MAX_WARNINGS>,
}

impl BoardInfo {
    fn new(profile: &'static BoardProfile, source: ConfigSource) -> Self {
        let mut info = BoardInfo {
            profile,
            model: heapless::String::new(),
            compatible: heapless::String::new(),
            source,
            memory: heapless::Vec::new(),
            command_line: heapless::String::new(),
            core_count: profile.core_count,
            board_revision: None,
            firmware_revision: None,
            device_tree: None,
            warnings: heapless::Vec::new(),
        };
        copy_truncated(&mut info.model, profile.name);
        info
    }

    pub fn warn(&mut self, args: core::fmt::Arguments<'_>) {
        let mut text = Warning::new();
        // A warning longer than the buffer is cut; the start says what matters.
        let _ = text.write_fmt(args);
        let _ = self.warnings.push(text);
    }

    pub fn set_command_line(&mut self, line: &str) {
        if !copy_truncated(&mut self.command_line, line) {
            self.warn(format_args!(
                "command line longer than {COMMAND_LINE_BYTES} bytes; the rest is ignored"
            ));
        }
    }

    pub fn total_memory_bytes(&self) -> u64 {
        self.memory.iter().map(|bank| bank.size_bytes).sum()
    }

    /// Whether the firmware is QEMU's model (a raspi machine), not a Pi's.
    pub fn is_qemu(&self) -> bool {
        self.firmware_revision
            .is_some_and(|revision| drivers::mailbox::FirmwareRevision(revision).is_qemu_model())
    }

    /// The device tree's span in memory, when there is one.
    pub fn device_tree_span(&self) -> Option<Span> {
        match self.source {
            ConfigSource::DeviceTree { address, total_bytes } => Some(Span::new(address, total_bytes as u64)),
            _ => None,
        }
    }
}

/// Copies as much of `text` as fits, cutting at a character boundary; false if it was cut.
pub fn copy_truncated<const N: usize>(target: &mut heapless::String<N>, text: &str) -> bool {
    target.clear();
    let mut end = text.len().min(N);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let _ = target.push_str(&text[..end]);
    end == text.len()
}

/// Why no board profile could be chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownBoard {
    pub main_id: MainId,
    pub root_compatible: Option<&'static str>,
}

/// Builds the board description from a device tree.
pub fn from_device_tree(
    tree: DeviceTree<'static>,
    address: u64,
    main_id: MainId,
) -> Result<BoardInfo, UnknownBoard> {
    let root = tree.root();
    let compatible = root.and_then(|r| r.compatible);
    let family = compatible
        .and_then(|c| string_list(c).find_map(board::family_from_compatible))
        .or_else(|| main_id.core_model().and_then(board::family_from_core));
    let Some(family) = family else {
        return Err(UnknownBoard {
            main_id,
            root_compatible: compatible.and_then(|c| string_list(c).next()),
        });
    };
    let source = ConfigSource::DeviceTree { address, total_bytes: tree.total_bytes() };
    let mut info = BoardInfo::new(board::profile(family), source);
    if let Some(root) = root {
        if let Some(model) = tree.string_property(root.offset, "model") {
            copy_truncated(&mut info.model, model);
        }
        if let Some(first) = compatible.and_then(|c| string_list(c).next()) {
            copy_truncated(&mut info.compatible, first);
        }
    }
    tree.for_each_memory_node(|node| {
        for (base, size_bytes) in tree.reg_entries(node) {
            if size_bytes > 0 {
                let _ = info.memory.push(Span::new(base, size_bytes));
            }
        }
    });
    if info.memory.is_empty() {
        info.warn(format_args!("device tree has no memory node; assuming the board table's RAM"));
        let _ = info.memory.push(info.profile.default_ram);
    }
    if let Some(chosen) = tree.find_path("/chosen") {
        if let Some(line) = tree.string_property(chosen.offset, "bootargs") {
            info.set_command_line(line);
        }
    }
    let mut cores = 0u32;
    tree.walk(|node| {
        if tree.string_property(node.offset, "device_type") == Some("cpu") {
            cores += 1;
        }
        true
    });
    if cores > 0 {
        info.core_count = cores;
    }
    info.device_tree = Some(tree);
    Ok(info)
}

/// Builds the board description from QEMU's ATAGS and the CPU.
pub fn from_atags(tags: &BootTags<'_>, address: u64, main_id: MainId) -> Result<BoardInfo, UnknownBoard> {
    let mut info = from_core(main_id, ConfigSource::Atags { address })?;
    if let Some((base, size_bytes)) = tags.memory {
        info.memory.clear();
        let _ = info.memory.push(Span::new(base, size_bytes));
    }
    if let Some(line) = tags.command_line {
        info.set_command_line(line);
    }
    Ok(info)
}

/// The board table's entry for this CPU (no boot parameters at all).
pub fn from_core(main_id: MainId, source: ConfigSource) -> Result<BoardInfo, UnknownBoard> {
    let family = main_id
        .core_model()
        .and_then(board::family_from_core)
        .filter(|family| *family != BoardFamily::QemuVirt)
        .ok_or(UnknownBoard { main_id, root_compatible: None })?;
    let mut info = BoardInfo::new(board::profile(family), source);
    let _ = info.memory.push(info.profile.default_ram);
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::RASPBERRY_PI_5;
    use crate::devicetree::builder::{pi4_like, Builder};

    fn leak(blob: std::vec::Vec<u8>) -> &'static [u8] {
        std::boxed::Box::leak(blob.into_boxed_slice())
    }

    #[test]
    fn pi4_tree_gives_model_memory_and_command_line() {
        let tree = DeviceTree::parse(leak(pi4_like("jobs=read:4k:1 exit=semihosting"))).unwrap();
        let info = from_device_tree(tree, 0x2eff_0000, MainId(0x410f_d083)).unwrap();
        assert_eq!(info.profile.family, BoardFamily::RaspberryPi4);
        assert_eq!(info.model.as_str(), "Raspberry Pi 4 Model B Rev 1.5");
        assert_eq!(info.compatible.as_str(), "raspberrypi,4-model-b");
        assert_eq!(info.memory.as_slice(), &[Span::new(0, 0x3b40_0000)]);
        assert_eq!(info.command_line.as_str(), "jobs=read:4k:1 exit=semihosting");
        assert!(matches!(info.source, ConfigSource::DeviceTree { address: 0x2eff_0000, .. }));
    }

    #[test]
    fn virt_tree_counts_cpus_and_unknown_boards_are_refused() {
        let mut b = Builder::new();
        b.begin("")
            .cells("#address-cells", &[2])
            .cells("#size-cells", &[2])
            .strings("compatible", &["linux,dummy-virt"]);
        b.begin("memory@40000000")
            .string("device_type", "memory")
            .cells("reg", &[0, 0x4000_0000, 0, 0x4000_0000])
            .end();
        b.begin("cpus").cells("#address-cells", &[1]).cells("#size-cells", &[0]);
        for index in 0..2 {
            b.begin(if index == 0 { "cpu@0" } else { "cpu@1" })
                .string("device_type", "cpu")
                .cells("reg", &[index])
                .end();
        }
        b.end().end();
        let tree = DeviceTree::parse(leak(b.finish())).unwrap();
        let info = from_device_tree(tree, 0x4800_0000, MainId(0x410f_d034)).unwrap();
        assert_eq!(info.profile.family, BoardFamily::QemuVirt);
        assert_eq!(info.core_count, 2);
        assert_eq!(info.total_memory_bytes(), 1 << 30);
        assert!(info.command_line.is_empty());

        let mut other = Builder::new();
        other.begin("").strings("compatible", &["acme,toaster"]).end();
        let tree = DeviceTree::parse(leak(other.finish())).unwrap();
        let error = from_device_tree(tree, 0, MainId(0x510f_8000)).err().unwrap();
        assert_eq!(error.root_compatible, Some("acme,toaster"));
    }

    #[test]
    fn atags_and_bare_cores() {
        let tags = BootTags { memory: Some((0, 0x3c00_0000)), command_line: Some("runs=1") };
        let info = from_atags(&tags, 0x100, MainId(0x410f_d034)).unwrap();
        assert_eq!(info.profile.family, BoardFamily::RaspberryPi3);
        assert_eq!(info.command_line.as_str(), "runs=1");
        assert_eq!(info.total_memory_bytes(), 0x3c00_0000);
        assert!(from_core(MainId(0x410f_d070), ConfigSource::Firmware).is_err());
        // A Pi 5 without a device tree (a D0 board whose tree is not on the card): the
        // Cortex-A76 picks the Pi 5 table, which holds for C1 and D0 alike.
        let pi5 = from_core(MainId(0x414f_d0b1), ConfigSource::Firmware).unwrap();
        assert_eq!(pi5.profile.family, BoardFamily::RaspberryPi5);
        assert_eq!(pi5.memory.as_slice(), &[RASPBERRY_PI_5.default_ram]);
        // QEMU's firmware model is known by its fixed revision (docs/qemu.md §8).
        let mut info = from_core(MainId(0x410f_d083), ConfigSource::Firmware).unwrap();
        assert!(!info.is_qemu());
        info.firmware_revision = Some(346_337);
        assert!(info.is_qemu());
        info.firmware_revision = Some(1_697_544_000);
        assert!(!info.is_qemu());
        let long = "x".repeat(COMMAND_LINE_BYTES + 10);
        let mut info = from_core(MainId(0x410f_d0b1), ConfigSource::Firmware).unwrap();
        info.set_command_line(&long);
        assert_eq!(info.command_line.len(), COMMAND_LINE_BYTES);
        assert_eq!(info.warnings.len(), 1);
    }
}
