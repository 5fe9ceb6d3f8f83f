//! Boards own their addresses: the kernel opens MMIO windows in one place,
//! `kernel/src/runtime/windows.rs`, from register blocks of the board table
//! (`kernel/src/board.rs`) or blocks that PCI enumeration and the device tree found; no other
//! kernel file creates an `Mmio` (docs/architecture.md, "How a driver sees hardware").
#![forbid(unsafe_code)]

use std::fs;
use std::path::{Path, PathBuf};

const THE_ONE_PLACE: &str = "kernel/src/runtime/windows.rs";

fn rust_files(directory: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(directory).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

#[test]
fn only_the_windows_module_creates_mmio_windows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    rust_files(&root.join("kernel/src"), &mut files);
    let mut offenders = Vec::new();
    for path in files {
        let relative = path.strip_prefix(root).unwrap().to_str().unwrap().to_string();
        let source = fs::read_to_string(&path).unwrap();
        for (number, line) in source.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("Mmio::new(") && relative != THE_ONE_PLACE {
                offenders.push(format!("{relative}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(offenders.is_empty(), "MMIO windows created outside {THE_ONE_PLACE}:\n{}", offenders.join("\n"));
}
