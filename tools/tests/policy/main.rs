//! Checks of the repository's own sources and documents, not of what they do: unsafe code only
//! where it is needed (`unsafe_policy`), every `docs/` citation current (`doc_citations`), the
//! architecture table true (`architecture_table`), no file-level import circles
//! (`import_cycles`), MMIO windows made in one place (`mmio_windows`), the set-up script
//! (`deps_script`), PCIe facts the references corrected kept corrected (`corrected_facts`), and, with the `e2e` feature, the barriers in the built kernels (`barriers`,
//! objdump over `build/`).
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

mod architecture_table;
mod barriers;
mod corrected_facts;
mod deps_script;
mod doc_citations;
mod import_cycles;
mod mmio_windows;
mod unsafe_policy;

/// The repository's root: the folder above `tools/`.
fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The workspace's crate folders, from the root `Cargo.toml`'s `members = [...]` line.
fn workspace_members(manifest: &str) -> Vec<String> {
    let start = manifest
        .match_indices("members")
        .map(|(index, _)| index)
        .find(|&index| index == 0 || manifest.as_bytes()[index - 1] == b'\n')
        .expect("Cargo.toml has a line `members = [...]`");
    let list = &manifest[start..];
    let list = &list[list.find('[').unwrap() + 1..list.find(']').unwrap()];
    list.split(',')
        .map(|member| member.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}
