//! Unsafe code stays where it is needed: every Rust file of the workspace that neither contains
//! unsafe code nor has a module below it that does carries `#![forbid(unsafe_code)]`, itself or
//! through a module above it (a crate root's forbid covers the whole crate: `blockdev`, `bench`
//! and `drivers` need no unsafe at all, the compiler enforcing it). So a crate or module that loses
//! its forbid fails here, and a new file without unsafe code must say so. In the bare-metal crates
//! unsafe code lives only in `hal` (registers, DMA memory, the platform contract, barriers, cache
//! maintenance), `boot`, and the few kernel files of its platform layer listed below
//! (docs/architecture.md, "How a driver sees hardware").
//!
//! "Unsafe code" is what the `unsafe_code` lint rejects: `unsafe` blocks, functions, traits and
//! impls, `global_asm!`, and the `no_mangle`, `export_name` and `link_section` attributes
//! (comments do not count).
#![forbid(unsafe_code)]

use std::fs;
use std::path::{Path, PathBuf};

use crate::repository_root;

/// The workspace's crates; each one's `src` (and `tools`' `tests`) is checked.
const SOURCE_DIRECTORIES: [&str; 10] = [
    "blockdev/src",
    "bench/src",
    "boot/src",
    "drivers/src",
    "hal/src",
    "kernel/src",
    "tools/src",
    "tools/tests",
    "profiler/src",
    "profiler/plugin/src",
];

/// Crates that need no unsafe code at all: their root forbids it for every module.
const UNSAFE_FREE_CRATE_ROOTS: [&str; 4] =
    ["blockdev/src/lib.rs", "bench/src/lib.rs", "drivers/src/lib.rs", "profiler/src/lib.rs"];

/// The bare-metal crates' sources (the host tool's own unsafe libc calls are not covered here).
const BARE_METAL_DIRECTORIES: [&str; 6] =
    ["blockdev/src", "bench/src", "boot/src", "drivers/src", "hal/src", "kernel/src"];

/// Where unsafe code may live in them: the crates that exist for it...
const UNSAFE_CRATES: [&str; 2] = ["hal/src", "boot/src"];

/// ...and the kernel's platform layer, each file with the reason it needs unsafe code.
const KERNEL_UNSAFE_FILES: [(&str, &str); 8] = [
    ("kernel/src/devicetree.rs", "the firmware's device tree blob at the boot address"),
    ("kernel/src/runtime/arch.rs", "WFI, SEV, the semihosting and PSCI traps, UDF"),
    ("kernel/src/runtime/exceptions.rs", "the exception vectors' entry into Rust"),
    ("kernel/src/runtime/mod.rs", "boot's entry, MMU, heap, ATAGS window, device spans, core release"),
    (
        "kernel/src/runtime/platform.rs",
        "the DMA pool behind hal's Platform and its rewind after a refused NVMe host memory buffer, the benchmark's buffer access",
    ),
    ("kernel/src/runtime/sync.rs", "the single-core cell"),
    ("kernel/src/runtime/trace.rs", "defmt's global logger"),
    ("kernel/src/runtime/windows.rs", "MMIO windows on admitted device memory"),
];

const FORBID: &str = "#![forbid(unsafe_code)]";

fn rust_files(directory: &Path, files: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        fs::read_dir(directory).unwrap().map(|entry| entry.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
}

/// The file's code without `//` comments (doc comments included).
fn code_of(source: &str) -> String {
    source.lines().map(|line| line.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

fn has_unsafe_code(source: &str) -> bool {
    let code = code_of(source);
    let words = code.split(|c: char| !(c.is_alphanumeric() || c == '_'));
    words
        .into_iter()
        .any(|word| matches!(word, "unsafe" | "global_asm" | "no_mangle" | "export_name" | "link_section"))
}

fn forbids_unsafe(source: &str) -> bool {
    source.lines().any(|line| line.trim() == FORBID)
}

/// A crate root: `lib.rs`, `main.rs`, a binary in `src/bin`, a test file directly in a crate's
/// `tests` (not a `tests` module inside `src`).
fn is_crate_root(path: &Path) -> bool {
    let name = path.file_name().unwrap().to_str().unwrap();
    let directory = path.parent().unwrap();
    let parent = directory.file_name().unwrap().to_str().unwrap();
    let integration_test = parent == "tests" && directory.parent().unwrap().join("Cargo.toml").exists();
    matches!(name, "lib.rs" | "main.rs") || parent == "bin" || integration_test
}

/// The directory holding a file's child modules: `src` for a crate root (for a test file, the
/// harness directories beside it), `x/` for `x/mod.rs` and for `x.rs`.
fn module_directory(path: &Path) -> Option<PathBuf> {
    let name = path.file_name().unwrap().to_str().unwrap();
    let parent = path.parent().unwrap();
    if name == "mod.rs" || name == "lib.rs" || name == "main.rs" {
        return Some(parent.to_path_buf());
    }
    if is_crate_root(path) {
        return None;
    }
    let directory = parent.join(path.file_stem().unwrap());
    directory.is_dir().then_some(directory)
}

/// Whether `path` is `ancestor` or lies below it in the module tree (a file in its module
/// directory, other crates' roots excluded).
fn is_below(path: &Path, ancestor: &Path, files: &[PathBuf]) -> bool {
    if path == ancestor {
        return true;
    }
    let Some(directory) = module_directory(ancestor) else {
        return false;
    };
    let other_crate = is_crate_root(path) || path.components().any(|part| part.as_os_str() == "bin");
    path.starts_with(&directory) && !other_crate && files.iter().any(|file| file == path)
}

/// Files that need a forbid of their own: no unsafe code in them or below them, and no module
/// above them that forbids it already.
fn files_missing_forbid(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for directory in SOURCE_DIRECTORIES {
        rust_files(&root.join(directory), &mut files);
    }
    let sources: Vec<String> = files.iter().map(|path| fs::read_to_string(path).unwrap()).collect();
    let mut missing = Vec::new();
    for (index, path) in files.iter().enumerate() {
        let unsafe_below = files
            .iter()
            .zip(&sources)
            .any(|(other, source)| is_below(other, path, &files) && has_unsafe_code(source));
        let forbidden_above = files
            .iter()
            .zip(&sources)
            .any(|(other, source)| is_below(path, other, &files) && forbids_unsafe(source));
        if !unsafe_below && !forbidden_above && !forbids_unsafe(&sources[index]) {
            missing.push(path.strip_prefix(root).unwrap().display().to_string());
        }
    }
    missing
}

#[test]
fn every_file_without_unsafe_code_forbids_it() {
    let missing = files_missing_forbid(&repository_root());
    assert!(
        missing.is_empty(),
        "these files have no unsafe code and should open with {FORBID}:\n{missing:#?}"
    );
}

#[test]
fn the_unsafe_free_crates_forbid_it_at_their_root() {
    let root = repository_root();
    for crate_root in UNSAFE_FREE_CRATE_ROOTS {
        let source = fs::read_to_string(root.join(crate_root)).unwrap();
        assert!(forbids_unsafe(&source), "{crate_root} must open with {FORBID}");
    }
}

/// Bare-metal files with unsafe code outside the places allowed for it.
fn unsafe_outside_its_places(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for directory in BARE_METAL_DIRECTORIES {
        rust_files(&root.join(directory), &mut files);
    }
    files
        .iter()
        .map(|path| path.strip_prefix(root).unwrap().display().to_string())
        .filter(|relative| !UNSAFE_CRATES.iter().any(|allowed| relative.starts_with(allowed)))
        .filter(|relative| !KERNEL_UNSAFE_FILES.iter().any(|(allowed, _)| relative == allowed))
        .filter(|relative| has_unsafe_code(&fs::read_to_string(root.join(relative)).unwrap()))
        .collect()
}

#[test]
fn unsafe_code_lives_only_in_hal_boot_and_the_kernels_platform_layer() {
    let outside = unsafe_outside_its_places(&repository_root());
    assert!(
        outside.is_empty(),
        "unsafe code outside hal, boot and the kernel's platform layer (KERNEL_UNSAFE_FILES):\n{outside:#?}"
    );
}

#[test]
fn every_kernel_file_allowed_unsafe_code_still_needs_it() {
    let root = repository_root();
    for (file, reason) in KERNEL_UNSAFE_FILES {
        let source =
            fs::read_to_string(root.join(file)).unwrap_or_else(|_| panic!("{file} is listed but missing"));
        assert!(has_unsafe_code(&source), "{file} ({reason}) has no unsafe code left: take it off the list");
    }
}

#[test]
fn unsafe_code_is_recognised_in_code_and_not_in_comments() {
    assert!(has_unsafe_code("fn f() { unsafe { g() } }"));
    assert!(has_unsafe_code("#[no_mangle]\nextern \"C\" fn f() {}"));
    assert!(has_unsafe_code("unsafe impl Platform for P {}"));
    assert!(has_unsafe_code("core::arch::global_asm!(\"nop\");"));
    assert!(!has_unsafe_code("// SAFETY: unsafe is documented\nfn f() {}"));
    assert!(!has_unsafe_code("//! an `unsafe trait`\nfn unsafe_free() {}"));
    assert!(forbids_unsafe("//! doc\n#![forbid(unsafe_code)]\n"));
    assert!(!forbids_unsafe("// #![forbid(unsafe_code)] is not here\n"));
}
