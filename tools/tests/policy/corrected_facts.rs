//! Statements about the Pi's PCIe that public references contradicted and the docs now state as
//! the references do; these checks keep the old wording from coming back: the CM4 IO board has a
//! PCIe x1 slot, not an M.2 socket (the CM4 IO board datasheet's "PCIe Gen 2 x1 socket"); the
//! bootloader's "PCI1 reset" line appears only when it booted in NVMe mode
//! (raspberrypi/rpi-eeprom#869); pcie1's windows are described as the firmware's tree gives them
//! (MEM 0x1B_8000_0000 -> PCI 0x8000_0000 plus a prefetchable window, raspberrypi/linux#6511).
#![forbid(unsafe_code)]

use std::fs;

/// The Markdown files of `docs/` and the README, as (name, text).
fn documents() -> Vec<(String, String)> {
    let root = super::repository_root();
    let mut files = vec![(String::from("README.md"), fs::read_to_string(root.join("README.md")).unwrap())];
    for entry in fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|extension| extension == "md") {
            let name = format!("docs/{}", path.file_name().unwrap().to_str().unwrap());
            files.push((name, fs::read_to_string(&path).unwrap()));
        }
    }
    files
}

/// Lines containing every one of `words` but none of `unless`, as `file:line: text`.
fn lines_with(words: &[&str], unless: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (name, text) in documents() {
        for (number, line) in text.lines().enumerate() {
            if words.iter().all(|word| line.contains(word)) && !unless.iter().any(|word| line.contains(word))
            {
                found.push(format!("{name}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn the_cm4_io_board_has_a_pcie_x1_slot_not_an_m2_socket() {
    let wrong = lines_with(&["IO board", "M.2"], &["x1 slot", "adapter"]);
    assert!(wrong.is_empty(), "the CM4 IO board's slot is PCIe x1:\n{}", wrong.join("\n"));
}

#[test]
fn pci1_reset_is_said_to_appear_only_in_nvme_boot_mode() {
    let wrong = lines_with(&["PCI1 reset"], &["NVMe"]);
    assert!(wrong.is_empty(), "\"PCI1 reset\" only in NVMe boot mode:\n{}", wrong.join("\n"));
}

#[test]
fn pcie1s_windows_are_described_as_the_firmwares_tree_gives_them() {
    let described = lines_with(&["MEM 0x1B_8000_0000 → PCI 0x8000_0000", "prefetchable"], &[]);
    assert!(!described.is_empty(), "docs/pcie-brcmstb.md describes the firmware's pcie1 windows");
}
