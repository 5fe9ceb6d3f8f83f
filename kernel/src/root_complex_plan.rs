//! Which Broadcom STB PCIe root complex the kernel brings up on a Pi, and how: the board table's
//! description (docs/hardware.md §1.4), refined by the device tree the firmware passes when it has
//! the node (matched by compatible string *and* register base, so BCM2712's pcie2, which carries
//! RP1, is never picked): `ranges`, `dma-ranges` (the firmware rewrites them on CM4 and C0 Pi 4s,
//! docs/pcie-brcmstb.md §3), `max-link-speed` (`dtparam=pciex1_gen`), `brcm,tperst-clk-ms`
//! (`dtparam=pciex1_tperst_clk_ms`), `num-lanes`, `brcm,vdm-qos-map` (Pi 5 pcie1) and
//! `brcm,enable-ssc` (BCM2711); then the command line's `pcie.gen=` and `pcie.perst-ms=`.
//! Without the node on a BCM2711 board, the board revision picks the inbound window the way the
//! firmware does (see [`bcm2711_inbound_without_tree`]).
#![forbid(unsafe_code)]

use crate::board::PcieHost;
use crate::devicetree::{read_cells, DeviceNode, DeviceTree};
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;
use drivers::mailbox::{Bcm2711Stepping, BoardRevision};
use drivers::pci::brcmstb::options::PcieOptions;
use drivers::pci::brcmstb::Soc;
use drivers::pci::ranges;
use hal::platform::BusTranslation;

/// Where C0-stepping BCM2711 boards see RAM from PCIe: the firmware rewrites `dma-ranges` to
/// PCI 0x4_0000_0000 -> CPU 0 (raspberrypi/rpi-eeprom#505: "IB MEM 0x0..0x1ffffffff ->
/// 0x400000000" on an 8 GB CM4; the proposed static form in bcm2711.dtsi maps 4 GiB there), and
/// its VL805 loader assumes that window (raspberrypi/firmware#1495, #1518); circle
/// `machineinfo.cpp` `GetPCIeDMAMemory` uses it on every board but the B0 Pi 4B.
pub const BCM2711_C0_INBOUND_PCI_BASE: u64 = 0x4_0000_0000;

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
    /// The link width to advertise: the tree's `num-lanes`, else the board table's.
    pub num_lanes: Option<u8>,
    /// The tree's `brcm,vdm-qos-map` (applied on BCM2712).
    pub vdm_qos_map: Option<u32>,
    /// The tree's `brcm,enable-ssc` (applied on BCM2711).
    pub spread_spectrum: bool,
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

/// BCM2711 without the device tree's `dma-ranges`: the inbound window the board revision implies.
/// B0 (Pi 4B before PCB 1.4) keeps the board table's PCI 0 -> CPU 0, 3 GiB; C0 gets PCI
/// [`BCM2711_C0_INBOUND_PCI_BASE`] -> CPU 0 over a power of two of at least 4 GiB covering RAM (the
/// window must be a power of two aligned to its size: Linux `brcm_pcie_get_inbound_wins`).
/// Unknown: the board table, with a note.
pub fn bcm2711_inbound_without_tree(
    board: &PcieHost,
    revision: Option<u32>,
    notes: &mut Vec<String>,
) -> BusTranslation {
    let code = revision.map(BoardRevision);
    match code.and_then(BoardRevision::bcm2711_stepping) {
        Some(Bcm2711Stepping::C0) => {
            let ram = code.and_then(BoardRevision::memory_bytes).unwrap_or(4 << 30);
            let size_bytes = ram.next_power_of_two().max(4 << 30);
            let mut note = String::new();
            let _ = write!(
                note,
                "no device tree: board revision {:#08x} is a C0 BCM2711, so DMA goes through PCI {BCM2711_C0_INBOUND_PCI_BASE:#x} as the firmware sets it",
                revision.unwrap_or_default()
            );
            notes.push(note);
            BusTranslation { cpu_base: 0, bus_base: BCM2711_C0_INBOUND_PCI_BASE, size_bytes }
        }
        Some(Bcm2711Stepping::B0) => board.dma,
        None => {
            notes.push(String::from(
                "no device tree and no BCM2711 stepping in the board revision: DMA through the B0 window (PCI 0, 3 GiB), which a C0 board's VL805 firmware load does not expect",
            ));
            board.dma
        }
    }
}

/// The plan for `board`'s root complex given the tree, the board revision and the command line.
pub fn plan(
    board: &PcieHost,
    tree: Option<&DeviceTree<'_>>,
    revision: Option<u32>,
    options: &PcieOptions,
) -> HostPlan {
    let mut notes = Vec::new();
    let node = tree.and_then(|tree| find_node(tree, board).map(|node| (tree, node)));
    let tree_cell = |name: &str| node.and_then(|(tree, node)| cell_property(tree, &node, name));
    let num_lanes = tree_cell("num-lanes").map(|lanes| lanes as u8).or(board.num_lanes);
    let vdm_qos_map = tree_cell("brcm,vdm-qos-map");
    let spread_spectrum =
        node.is_some_and(|(tree, node)| tree.property(node.offset, "brcm,enable-ssc").is_some());
    let (host, source, tree_gen, tree_perst_ms) = match node {
        Some((tree, node)) => (
            refine(tree, &node, board, &mut notes),
            WindowSource::DeviceTree(String::from(node.name)),
            cell_property(tree, &node, "max-link-speed"),
            cell_property(tree, &node, "brcm,tperst-clk-ms"),
        ),
        None if board.soc == Soc::Bcm2711 => {
            let dma = bcm2711_inbound_without_tree(board, revision, &mut notes);
            (PcieHost { dma, ..*board }, WindowSource::BoardTable, None, None)
        }
        None => (*board, WindowSource::BoardTable, None, None),
    };
    let gen = choose_gen(board, options, tree_gen, &mut notes);
    let perst_extra_ms = options.perst_extra_ms.or(tree_perst_ms).unwrap_or(0);
    HostPlan { host, source, gen, perst_extra_ms, num_lanes, vdm_qos_map, spread_spectrum, notes }
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
        cm4_tree_with(dma_ranges, false)
    }

    /// [`cm4_tree`], with `brcm,enable-ssc` when `enable_ssc` (bcm2711.dtsi has it).
    fn cm4_tree_with(dma_ranges: &[u32], enable_ssc: bool) -> DeviceTree<'static> {
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
            .cells("dma-ranges", dma_ranges);
        if enable_ssc {
            b.property("brcm,enable-ssc", &[]);
        }
        b.end().end().end();
        DeviceTree::parse(leak(b.finish())).unwrap()
    }

    /// A Pi 5 tree with pcie1's node (bcm2712.dtsi's address and cells); `properties` adds to
    /// the node.
    fn pcie1_tree(properties: impl FnOnce(&mut Builder)) -> DeviceTree<'static> {
        let mut b = Builder::new();
        b.begin("").cells("#address-cells", &[2]).cells("#size-cells", &[2]);
        b.begin("pcie@1000110000")
            .strings("compatible", &["brcm,bcm2712-pcie"])
            .cells("reg", &[0x10, 0x11_0000, 0, 0x9310])
            .cells("#address-cells", &[3])
            .cells("#size-cells", &[2]);
        properties(&mut b);
        b.end().end();
        DeviceTree::parse(leak(b.finish())).unwrap()
    }

    #[test]
    fn the_device_tree_node_overrides_windows_and_dma_view() {
        // rpi-eeprom#505: "IB MEM 0x0..0x1ffffffff -> 0x400000000" on an 8 GB CM4.
        let tree = cm4_tree(&[0x0200_0000, 4, 0, 0, 0, 2, 0]);
        let host = RASPBERRY_PI_4.pcie.unwrap();
        let plan = plan(&host, Some(&tree), None, &PcieOptions::default());
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
            let plan = plan(&host, tree, None, &PcieOptions::default());
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
        let plan = plan(&RASPBERRY_PI_5.pcie.unwrap(), Some(&tree), None, &PcieOptions::default());
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
    fn pcie1_takes_the_firmwares_windows_from_its_tree() {
        // The firmware's tree as raspberrypi/linux#6511's log shows it: "MEM 0x1b80000000 ->
        // 0x80000000" (2 GiB) plus a 14 GiB prefetchable window at PCI 0x4_0000_0000.
        let memory = [0x0200_0000, 0, 0x8000_0000, 0x1b, 0x8000_0000, 0, 0x8000_0000];
        let prefetchable = [0x4300_0000, 4, 0, 0x18, 0, 3, 0x8000_0000];
        let tree = pcie1_tree(|b| {
            b.cells("ranges", &[memory, prefetchable].concat());
        });
        let plan = plan(&RASPBERRY_PI_5.pcie.unwrap(), Some(&tree), None, &PcieOptions::default());
        let (low, high) = (plan.host.windows.memory32.unwrap(), plan.host.windows.memory64.unwrap());
        assert_eq!((low.cpu_base, low.pci_base, low.size_bytes), (0x1b_8000_0000, 0x8000_0000, 2 << 30));
        assert_eq!(
            (high.cpu_base, high.pci_base, high.size_bytes),
            (0x18_0000_0000, 0x4_0000_0000, 14 << 30)
        );
        assert!(high.prefetchable && !low.prefetchable);
        assert!(plan.notes.is_empty(), "{:?}", plan.notes);
    }

    #[test]
    fn the_command_line_wins_and_is_clamped_to_the_soc() {
        let pi5 = RASPBERRY_PI_5.pcie.unwrap();
        let options = PcieOptions { gen: Some(1), perst_extra_ms: Some(100), ready_ms: None };
        let plan_pi5 = plan(&pi5, None, None, &options);
        assert_eq!((plan_pi5.gen, plan_pi5.perst_extra_ms), (1, 100));
        let pi4 = RASPBERRY_PI_4.pcie.unwrap();
        let plan_pi4 = plan(
            &pi4,
            None,
            Some(0x00b0_3112),
            &PcieOptions { gen: Some(3), perst_extra_ms: None, ready_ms: None },
        );
        assert_eq!(plan_pi4.gen, 2);
        assert_eq!(plan_pi4.notes, [String::from("Gen3 asked for; BCM2711 trains up to Gen2: using Gen2")]);
    }

    #[test]
    fn num_lanes_the_vdm_qos_map_and_ssc_come_from_the_tree() {
        let tree = pcie1_tree(|b| {
            b.cells("num-lanes", &[1]).cells("brcm,vdm-qos-map", &[0x3333_3333]);
        });
        let pi5 = plan(&RASPBERRY_PI_5.pcie.unwrap(), Some(&tree), None, &PcieOptions::default());
        assert_eq!(
            (pi5.num_lanes, pi5.vdm_qos_map, pi5.spread_spectrum),
            (Some(1), Some(0x3333_3333), false)
        );
        // Without the tree: pcie1's one lane from the board table, no QoS map.
        let bare = plan(&RASPBERRY_PI_5.pcie.unwrap(), None, None, &PcieOptions::default());
        assert_eq!((bare.num_lanes, bare.vdm_qos_map), (Some(1), None));
        // BCM2711's node says brcm,enable-ssc (bcm2711.dtsi).
        let tree = cm4_tree_with(&[0x0200_0000, 0, 0, 0, 0, 0, 0xc000_0000], true);
        let pi4 = plan(&RASPBERRY_PI_4.pcie.unwrap(), Some(&tree), None, &PcieOptions::default());
        assert!(pi4.spread_spectrum);
        assert_eq!(pi4.num_lanes, None);
    }

    #[test]
    fn without_a_tree_a_c0_pi4_uses_the_firmwares_inbound_window_at_16_gib() {
        let pi4 = RASPBERRY_PI_4.pcie.unwrap();
        let c0_window = |size_bytes| BusTranslation { cpu_base: 0, bus_base: 0x4_0000_0000, size_bytes };
        // CM4 8 GB (0xd03140), Pi 400 4 GB (0xc03130), Pi 4B rev 1.4 2 GB (0xb03114): C0.
        for (revision, size) in [(0x00d0_3140, 8u64 << 30), (0x00c0_3130, 4 << 30), (0x00b0_3114, 4 << 30)] {
            let plan = plan(&pi4, None, Some(revision), &PcieOptions::default());
            assert_eq!(plan.host.dma, c0_window(size), "{revision:#x}");
            assert!(plan.notes[0].contains("C0 BCM2711"), "{:?}", plan.notes);
        }
        // Pi 4B rev 1.1 (B0): the board table's 3 GiB at PCI 0.
        let b0 = plan(&pi4, None, Some(0x00c0_3111), &PcieOptions::default());
        assert_eq!(b0.host.dma, pi4.dma);
        assert!(b0.notes.is_empty(), "{:?}", b0.notes);
        // Nothing known: the board table, said.
        let unknown = plan(&pi4, None, None, &PcieOptions::default());
        assert_eq!(unknown.host.dma, pi4.dma);
        assert!(unknown.notes[0].contains("no BCM2711 stepping"), "{:?}", unknown.notes);
        // A tree's dma-ranges win over the revision.
        let tree = cm4_tree(&[0x0200_0000, 0, 0, 0, 0, 0, 0xc000_0000]);
        let from_tree = plan(&pi4, Some(&tree), Some(0x00d0_3140), &PcieOptions::default());
        assert_eq!(from_tree.host.dma, BusTranslation { cpu_base: 0, bus_base: 0, size_bytes: 3 << 30 });
    }
}
