//! docs/architecture.md "Layout" is the one table of what lives where, and it stays true: every
//! workspace crate (`Cargo.toml`'s `members`) and every driver folder (`drivers/src/*/`) has a row,
//! and every path its first column names exists. The expected rows come from the tree itself, so
//! a new crate or driver folder needs only its row.
#![forbid(unsafe_code)]

use std::fs;
use std::path::Path;

use crate::{repository_root, workspace_members};

/// The paths in the first column of the table under `## Layout`, as written (`boot/`,
/// `kernel/src/runtime/`, `Makefile`, …): every backticked word of that column.
fn layout_paths(architecture: &str) -> Vec<String> {
    let section = architecture
        .split("\n## ")
        .find(|section| section.starts_with("Layout\n"))
        .expect("docs/architecture.md has a \"## Layout\" section");
    let mut rows = section.lines().filter(|line| line.starts_with('|'));
    let header = rows.next().expect("the Layout section has a table");
    assert!(header.starts_with("| path |"), "the Layout table's first column is the path: {header}");
    let mut paths = Vec::new();
    for row in rows.filter(|row| !row.starts_with("|---")) {
        let first_cell = row.trim_start_matches('|').split('|').next().unwrap_or("");
        paths.extend(first_cell.split('`').skip(1).step_by(2).map(str::to_string));
    }
    paths
}

/// The driver folders, `drivers/src/<name>/`.
fn driver_folders(root: &Path) -> Vec<String> {
    let mut folders: Vec<String> = fs::read_dir(root.join("drivers/src"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_dir())
        .map(|path| format!("drivers/src/{}/", path.file_name().unwrap().to_str().unwrap()))
        .collect();
    folders.sort();
    folders
}

/// What is wrong with the table: rows missing for `required` paths, and listed paths that do
/// not exist under `root`.
fn problems(listed: &[String], required: &[String], root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for path in required {
        if !listed.contains(path) {
            problems.push(format!("`{path}` has no row in docs/architecture.md \"Layout\""));
        }
    }
    for path in listed {
        if !root.join(path).exists() {
            problems.push(format!("docs/architecture.md \"Layout\" lists `{path}`, which does not exist"));
        }
    }
    problems
}

#[test]
fn every_crate_and_driver_folder_has_a_row_and_every_row_exists() {
    let root = repository_root();
    let architecture = fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let listed = layout_paths(&architecture);
    let manifest = fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = workspace_members(&manifest);
    assert!(members.len() >= 6, "the members list was not read: {members:?}");
    let drivers = driver_folders(&root);
    assert!(drivers.len() >= 5, "the driver folders were not found: {drivers:?}");
    let mut required: Vec<String> = members.iter().map(|member| format!("{member}/")).collect();
    required.extend(drivers);
    let problems = problems(&listed, &required, &root);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_missing_row_and_a_stale_row_are_both_named() {
    let table = "intro\n## Layout\n\nText.\n\n| path | crate | what |\n|---|---|---|\n\
                 | `boot/` | `boot` | reset |\n| `Makefile`, `gone/` | — | glue |\n\n## Next\n| `kernel/` | x |\n";
    let listed = layout_paths(table);
    assert_eq!(listed, ["boot/", "Makefile", "gone/"]);
    let required = vec!["boot/".to_string(), "kernel/".to_string()];
    let found = problems(&listed, &required, &repository_root());
    assert_eq!(
        found,
        [
            "`kernel/` has no row in docs/architecture.md \"Layout\"",
            "docs/architecture.md \"Layout\" lists `gone/`, which does not exist",
        ]
    );
}

#[test]
fn members_are_read_from_the_workspace_manifest() {
    let manifest = "[workspace]\nresolver = \"2\"\nmembers = [\"blockdev\", \"drivers\",\n \"hal\"]\n\
                    default-members = [\"blockdev\"]\n";
    assert_eq!(workspace_members(manifest), ["blockdev", "drivers", "hal"]);
}

/// README is the short way in: what barebench is, the folder map early, the two commands, the
/// card and console, and links; the details live in `docs/` pages (docs/README.md lists them).
#[test]
fn the_readme_stays_a_short_way_in_with_the_folder_map_early() {
    const MOST_README_LINES: usize = 200;
    const FOLDER_MAP_BY_LINE: usize = 40;
    let readme = fs::read_to_string(repository_root().join("README.md")).unwrap();
    let lines: Vec<&str> = readme.lines().collect();
    assert!(
        lines.len() <= MOST_README_LINES,
        "README.md has {} lines, more than {MOST_README_LINES}: move the detail to a docs/ page and link it",
        lines.len()
    );
    let heading_line = |title: &str| lines.iter().position(|line| *line == format!("## {title}"));
    let map_line = heading_line("What is where").expect("README.md has no \"## What is where\" folder map");
    assert!(
        map_line < FOLDER_MAP_BY_LINE,
        "README's folder map starts at line {}, not near the top",
        map_line + 1
    );
    assert!(heading_line("The two commands").is_some(), "README.md has no \"## The two commands\"");
}
