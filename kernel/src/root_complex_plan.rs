//! Which Broadcom STB PCIe root complex the kernel brings up on a Pi, and how: the board table's
//! description (docs/hardware.md §1.4), refined by the device tree the firmware passes when it has
//! the node (matched by compatible string *and* register base, so BCM2712's pcie2, which carries
//! RP1, is never picked): `ranges`, `dma-ranges` (the firmware rewrites them on CM4 and C0 Pi 4s,
//! docs/pcie-brcmstb.md §3), `max-link-speed` (`dtparam=pciex1_gen`), `brcm,tperst-clk-ms`
//! (`dtparam=pciex1_tperst_clk_ms`); then the command line's `pcie.gen=` and `pcie.perst-ms=`.
#![forbid(unsafe_code)]

use crate::board::PcieHost;
use crate::devicetree::{read_cells, DeviceNode, DeviceTree};
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;
use drivers::pci::brcmstb::options::PcieOptions;
use drivers::pci::brcmstb::Soc;
use drivers::pci::ranges;

/// Where the windows came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WindowSource {
    /// The named device tree node.
    DeviceTree(String),
    BoardTable,
}

/// What the kernel will do with the root complex.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPlan {
    /// The board's root complex with the device tree's windows and DMA view.
    pub host: PcieHost,
    pub source: WindowSource,
    pub gen: u8,
    pub perst_extra_ms: u32,
    /// Things worth telling the user (the chosen speed's caveats, ignored properties).
    pub notes: Vec<String>,
}

/// The board's node in the tree: its compatible string at its register base.
fn find_node<'a>(tree: &DeviceTree<'a>, host: &PcieHost) -> Option<DeviceNode<'a>> {
    let mut found = None;
    tree.walk(|node| {
        if node.is_compatible(host.compatible)
            && node.first_reg.map(|(base, _)| base) == Some(host.registers.base)
        {
            found = Some(*node);
            return false;
        }
        true
    });
    found
}

fn cell_property(tree: &DeviceTree<'_>, node: &DeviceNode<'_>, name: &str) -> Option<u32> {
    tree.property(node.offset, name).and_then(|value| read_cells(value, 1)).map(|value| value as u32)
}

/// The board's host with the node's `ranges` and `dma-ranges` (each window's CPU side translated
/// through the ancestors' `ranges`); notes what could not be used.
fn refine(
    tree: &DeviceTree<'_>,
    node: &DeviceNode<'_>,
    board: &PcieHost,
    notes: &mut Vec<String>,
) -> PcieHost {
    let mut host = *board;
    if let Some(value) = tree.property(node.offset, "ranges") {
        let mut windows = ranges::host_windows(value, node.parent_address_cells, node.size_cells);
        let mut translated = true;
        for window in [&mut windows.memory32, &mut windows.memory64].into_iter().flatten() {
            match tree.to_cpu_address(node, window.cpu_base) {
                Some(cpu_base) => window.cpu_base = cpu_base,
                None => {
                    translated = false;
                    notes.push(alloc::format!(
                        "ranges: window at {:#x} is outside its parent bus; using the board table's windows",
                        window.cpu_base
                    ));
                }
            }
        }
        if windows.memory32.is_none() && windows.memory64.is_none() {
            notes.push(String::from("ranges has no memory window; using the board table's windows"));
        } else if translated {
            host.windows = windows;
        }
    }
    if let Some(value) = tree.property(node.offset, "dma-ranges") {
        host.dma = ranges::dma_translation(Some(value), node.parent_address_cells, node.size_cells);
    }
    host
}

/// The speed limit: the command line, else the device tree, else the board's default; clamped to
/// what the root complex trains to.
fn choose_gen(
    board: &PcieHost,
    options: &PcieOptions,
    from_tree: Option<u32>,
    notes: &mut Vec<String>,
) -> u8 {
    let asked = options.gen.map(u32::from).or(from_tree).unwrap_or(u32::from(board.default_gen));
    let fastest = board.soc.fastest_gen();
    let gen = asked.clamp(1, u32::from(fastest)) as u8;
    if asked != u32::from(gen) {
        let mut note = String::new();
        let _ = write!(
            note,
            "Gen{asked} asked for; {} trains up to Gen{fastest}: using Gen{gen}",
            board.soc.name()
        );
        notes.push(note);
    }
    if gen == 3 && board.soc == Soc::Bcm2712 {
        notes.push(String::from(
            "Gen3 is not certified on the Pi 5 (Raspberry Pi documentation): it works with many drives, not all",
        ));
    }
    gen
}

/// The plan for `board`'s root complex given the tree and the command line.
pub fn plan(board: &PcieHost, tree: Option<&DeviceTree<'_>>, options: &PcieOptions) -> HostPlan {
    let mut notes = Vec::new();
    let node = tree.and_then(|tree| find_node(tree, board).map(|node| (tree, node)));
    let (host, source, tree_gen, tree_perst_ms) = match node {
        Some((tree, node)) => (
            refine(tree, &node, board, &mut notes),
            WindowSource::DeviceTree(String::from(node.name)),
            cell_property(tree, &node, "max-link-speed"),
            cell_property(tree, &node, "brcm,tperst-clk-ms"),
        ),
        None => (*board, WindowSource::BoardTable, None, None),
    };
    let gen = choose_gen(board, options, tree_gen, &mut notes);
    let perst_extra_ms = options.perst_extra_ms.or(tree_perst_ms).unwrap_or(0);
    HostPlan { host, source, gen, perst_extra_ms, notes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::{RASPBERRY_PI_4, RASPBERRY_PI_5};
    use crate::devicetree::builder::Builder;
    use hal::platform::BusTranslation;

    fn leak(blob: std::vec::Vec<u8>) -> &'static [u8] {
        std::boxed::Box::leak(blob.into_boxed_slice())
    }

    /// A Pi 4 / CM4 tree: the node under scb (0x7c00_0000 -> 0xfc00_0000, 0x6_0000_0000 1:1), as
    /// Debian's bcm2711-rpi-cm4-io.dtb has it, with the dma-ranges a C0 firmware writes.
    fn cm4_tree(dma_ranges: &[u32]) -> DeviceTree<'static> {
        let mut b = Builder::new();
        b.begin("").cells("#address-cells", &[2]).cells("#size-cells", &[1]);
        b.begin("scb")
            .strings("compatible", &["simple-bus"])
            .cells("#address-cells", &[2])
            .cells("#size-cells", &[1])
            .cells("ranges", &[0, 0x7c00_0000, 0, 0xfc00_0000, 0x0380_0000, 6, 0, 6, 0, 0x4000_0000]);
        b.begin("pcie@7d500000")
            .strings("compatible", &["brcm,bcm2711-pcie"])
            .cells("reg", &[0, 0x7d50_0000, 0x9310])
            .cells("#address-cells", &[3])
            .cells("#size-cells", &[2])
            .cells("ranges", &[0x0200_0000, 0, 0xc000_0000, 6, 0, 0, 0x4000_0000])
            .cells("dma-ranges", dma_ranges)
            .end();
        b.end().end();
        DeviceTree::parse(leak(b.finish())).unwrap()
    }

    #[test]
    fn the_device_tree_node_overrides_windows_and_dma_view() {
        // rpi-eeprom#505: "IB MEM 0x0..0x1ffffffff -> 0x400000000" on an 8 GB CM4.
        let tree = cm4_tree(&[0x0200_0000, 4, 0, 0, 0, 2, 0]);
        let host = RASPBERRY_PI_4.pcie.unwrap();
        let plan = plan(&host, Some(&tree), &PcieOptions::default());
        assert_eq!(plan.source, WindowSource::DeviceTree(String::from("pcie@7d500000")));
        let window = plan.host.windows.memory32.unwrap();
        assert_eq!(
            (window.cpu_base, window.pci_base, window.size_bytes),
            (0x6_0000_0000, 0xc000_0000, 1 << 30)
        );
        assert_eq!(
            plan.host.dma,
            BusTranslation { cpu_base: 0, bus_base: 0x4_0000_0000, size_bytes: 8 << 30 }
        );
        assert_eq!((plan.gen, plan.perst_extra_ms), (2, 0));
        assert!(plan.notes.is_empty(), "{:?}", plan.notes);
    }

    #[test]
    fn without_the_node_the_board_table_is_used() {
        let host = RASPBERRY_PI_5.pcie.unwrap();
        let tree = cm4_tree(&[0x0200_0000, 0, 0, 0, 0, 0, 0xc000_0000]);
        for tree in [None, Some(&tree)] {
            let plan = plan(&host, tree, &PcieOptions::default());
            assert_eq!(plan.source, WindowSource::BoardTable);
            assert_eq!(plan.host, host);
            assert_eq!(plan.gen, 2);
            assert!(plan.notes.is_empty(), "Gen2 needs no caveat: {:?}", plan.notes);
        }
    }

    #[test]
    fn pcie2_is_never_taken_for_pcie1() {
        let mut b = Builder::new();
        b.begin("").cells("#address-cells", &[2]).cells("#size-cells", &[2]);
        for (name, base) in [("pcie@1000120000", 0x12_0000u32), ("pcie@1000110000", 0x11_0000)] {
            b.begin(name)
                .strings("compatible", &["brcm,bcm2712-pcie"])
                .cells("reg", &[0x10, base, 0, 0x9310])
                .cells("#address-cells", &[3])
                .cells("#size-cells", &[2])
                .cells("max-link-speed", &[if base == 0x12_0000 { 1 } else { 3 }])
                .cells("brcm,tperst-clk-ms", &[250])
                .end();
        }
        b.end();
        let tree = DeviceTree::parse(leak(b.finish())).unwrap();
        let plan = plan(&RASPBERRY_PI_5.pcie.unwrap(), Some(&tree), &PcieOptions::default());
        assert_eq!(plan.source, WindowSource::DeviceTree(String::from("pcie@1000110000")));
        assert_eq!(
            (plan.gen, plan.perst_extra_ms),
            (3, 250),
            "dtparam pciex1_gen=3 and pciex1_tperst_clk_ms"
        );
        assert!(plan.notes[0].contains("not certified"), "{:?}", plan.notes);
        // No ranges in the node: the board table's windows stay.
        assert_eq!(plan.host.windows, RASPBERRY_PI_5.pcie.unwrap().windows);
    }

    #[test]
    fn the_command_line_wins_and_is_clamped_to_the_soc() {
        let pi5 = RASPBERRY_PI_5.pcie.unwrap();
        let options = PcieOptions { gen: Some(1), perst_extra_ms: Some(100) };
        let plan_pi5 = plan(&pi5, None, &options);
        assert_eq!((plan_pi5.gen, plan_pi5.perst_extra_ms), (1, 100));
        let pi4 = RASPBERRY_PI_4.pcie.unwrap();
        let plan_pi4 = plan(&pi4, None, &PcieOptions { gen: Some(3), perst_extra_ms: None });
        assert_eq!(plan_pi4.gen, 2);
        assert_eq!(plan_pi4.notes, [String::from("Gen3 asked for; BCM2711 trains up to Gen2: using Gen2")]);
    }
}
