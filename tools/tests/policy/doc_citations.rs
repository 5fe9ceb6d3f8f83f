//! The repository explains itself: every citation of its own reference pages in the sources and
//! documents (`docs/hardware.md §2.5`, `docs/qemu.md §1 "UARTs"`, `docs/architecture.md
//! "Configuration"`, and inside `docs/` the sibling form `measurement.md §2`) names a page that exists
//! and a heading on it, and nothing cites a ticket number or notes kept outside the repository.
//!
//! A heading's number is its leading `N.N` (`### 2.5 1.8 V signalling` is §2.5); a quoted name
//! matches a heading's text without its number, whole or up to a parenthesised remark
//! (`"Card model"` is `### Card model (hw/sd/sd.c)`).
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::repository_root;

/// Directories never searched: build outputs and version control.
const SKIPPED_DIRECTORIES: [&str; 4] = ["target", "build", ".git", "node_modules"];

/// Files that may cite the pages: sources, documents, build and set-up scripts.
fn is_searched_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|name| name.to_str()).unwrap_or("");
    let extension = path.extension().and_then(|extension| extension.to_str()).unwrap_or("");
    name == "Makefile" || matches!(extension, "rs" | "md" | "toml" | "sh")
}

fn searched_files(directory: &Path, files: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        fs::read_dir(directory).unwrap().map(|entry| entry.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|name| name.to_str()).unwrap_or("");
        if path.is_dir() {
            if !SKIPPED_DIRECTORIES.contains(&name) {
                searched_files(&path, files);
            }
        } else if is_searched_file(&path) {
            files.push(path);
        }
    }
}

/// Every searched file but this one (whose examples are checked by the tests below), as its
/// path from the repository root and its text.
fn other_files(root: &Path) -> Vec<(PathBuf, String)> {
    let this_file = root.join(file!());
    let mut files = Vec::new();
    searched_files(root, &mut files);
    files
        .into_iter()
        .filter(|path| *path != this_file)
        .map(|path| {
            let text = fs::read_to_string(&path).unwrap();
            (path.strip_prefix(root).unwrap().to_path_buf(), text)
        })
        .collect()
}

/// The headings of one page: section numbers (`"2.5"`) and titles without them.
#[derive(Debug, Default)]
struct Headings {
    numbers: Vec<String>,
    titles: Vec<String>,
}

impl Headings {
    fn parse(markdown: &str) -> Headings {
        let mut headings = Headings::default();
        let mut in_code_block = false;
        for line in markdown.lines() {
            if line.trim_start().starts_with("```") {
                in_code_block = !in_code_block;
                continue;
            }
            if in_code_block || !line.starts_with('#') {
                continue;
            }
            let text = line.trim_start_matches('#').trim();
            let (number, title) = split_section_number(text);
            if let Some(number) = number {
                headings.numbers.push(number.to_string());
            }
            headings.titles.push(title.replace('`', ""));
        }
        headings
    }

    fn has_number(&self, number: &str) -> bool {
        self.numbers.iter().any(|known| known == number)
    }

    fn has_title(&self, name: &str) -> bool {
        self.titles
            .iter()
            .any(|title| title == name || title.strip_prefix(name).is_some_and(|rest| rest.starts_with(" (")))
    }
}

/// `"2.5 1.8 V signalling"` → (`Some("2.5")`, `"1.8 V signalling"`); `"1. Boot"` → (`Some("1")`, `"Boot"`).
fn split_section_number(text: &str) -> (Option<&str>, &str) {
    let number_length = section_number_length(text);
    let rest = &text[number_length..];
    let rest = rest.strip_prefix('.').unwrap_or(rest);
    if number_length == 0 || !rest.starts_with(' ') {
        return (None, text);
    }
    (Some(&text[..number_length]), rest.trim_start())
}

/// Length of the `N(.N)*` at the start of `text` (0 if it does not start with a digit).
fn section_number_length(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut end = 0;
    loop {
        let digits = bytes[end..].iter().take_while(|byte| byte.is_ascii_digit()).count();
        if digits == 0 {
            return end;
        }
        end += digits;
        if bytes.get(end) == Some(&b'.') && bytes.get(end + 1).is_some_and(u8::is_ascii_digit) {
            end += 1;
        } else {
            return end;
        }
    }
}

/// What one citation asks of a page.
#[derive(Debug, PartialEq, Eq)]
enum Wanted {
    Page,
    Section(String),
    Heading(String),
}

#[derive(Debug, PartialEq, Eq)]
struct Citation {
    page: String,
    wanted: Wanted,
    line: usize,
}

/// Every citation of a `docs/` page in `text`. Inside `docs/` itself (`in_docs`), a bare
/// `<page>.md` naming one of `pages`, and any Markdown link `](<name>.md)`, is a citation too.
fn citations(text: &str, in_docs: bool, pages: &[String]) -> Vec<Citation> {
    let mut found = Vec::new();
    for (line_index, line) in text.lines().enumerate() {
        let line_number = line_index + 1;
        let mut search_from = 0;
        while let Some(position) = line[search_from..].find(".md") {
            let md_at = search_from + position;
            search_from = md_at + 3;
            let name_start = line[..md_at]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                .map_or(0, |index| index + 1);
            let name = &line[name_start..md_at];
            if name.is_empty() || line[md_at + 3..].starts_with(|c: char| c.is_ascii_alphanumeric()) {
                continue;
            }
            let before = &line[..name_start];
            let cited_as_docs = before.ends_with("docs/")
                && !before[..before.len() - 5]
                    .ends_with(|c: char| c.is_ascii_alphanumeric() || c == '/' || c == '.');
            let sibling = in_docs
                && !before.ends_with('/')
                && (pages.iter().any(|page| page == name) || before.ends_with("]("));
            if !cited_as_docs && !sibling {
                continue;
            }
            found.push(Citation { page: name.to_string(), wanted: Wanted::Page, line: line_number });
            for wanted in wanted_after(&line[md_at + 3..]) {
                found.push(Citation { page: name.to_string(), wanted, line: line_number });
            }
        }
    }
    found
}

/// The sections and headings named right after a page: ` §2.1-2.7, §4.1 and "Output", "Layout"`.
fn wanted_after(tail: &str) -> Vec<Wanted> {
    let mut wanted = Vec::new();
    let mut rest = tail;
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if let Some(after_and) = rest.strip_prefix("and ") {
            rest = after_and.trim_start();
        }
        if let Some(after_sign) = rest.strip_prefix('§') {
            let length = section_number_length(after_sign);
            if length == 0 {
                break;
            }
            wanted.push(Wanted::Section(after_sign[..length].to_string()));
            rest = &after_sign[length..];
            if let Some(range_end) = rest.strip_prefix('-').or_else(|| rest.strip_prefix('–')) {
                let length = section_number_length(range_end);
                if length > 0 {
                    wanted.push(Wanted::Section(range_end[..length].to_string()));
                    rest = &range_end[length..];
                }
            }
        } else if let Some(after_quote) = rest.strip_prefix('"') {
            let Some(end) = after_quote.find('"') else { break };
            wanted.push(Wanted::Heading(after_quote[..end].to_string()));
            rest = &after_quote[end + 1..];
        } else {
            break;
        }
    }
    wanted
}

/// The research notes' directory beside the repository, spelled in pieces so that this checker is
/// not itself a reference to it.
const NOTES_DIRECTORY: &str = concat!("shared", "/docs");
const NOTES_PARENT: &str = concat!("..", "/shared");

/// Ticket numbers and notes outside the repository, which a newcomer cannot follow.
fn unfollowable_reference(line: &str) -> Option<&'static str> {
    let lower = line.to_lowercase();
    if lower.contains(NOTES_DIRECTORY) || lower.contains(NOTES_PARENT) {
        return Some("notes outside the repository");
    }
    let mut search_from = 0;
    while let Some(position) = lower[search_from..].find("issue") {
        let start = search_from + position;
        search_from = start + 5;
        let word_start = start == 0 || !lower.as_bytes()[start - 1].is_ascii_alphanumeric();
        let rest = lower[start + 5..].strip_prefix('s').unwrap_or(&lower[start + 5..]);
        let rest = rest.strip_prefix(' ').unwrap_or("");
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        if word_start && rest.starts_with(|c: char| c.is_ascii_digit()) {
            return Some("an issue number (cite a public source as owner/repo #N, or a docs/ page)");
        }
    }
    None
}

fn pages(root: &Path) -> BTreeMap<String, Headings> {
    let mut pages = BTreeMap::new();
    for entry in fs::read_dir(root.join("docs")).expect("docs/ exists") {
        let path = entry.unwrap().path();
        if path.extension().and_then(|extension| extension.to_str()) == Some("md") {
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            pages.insert(name, Headings::parse(&fs::read_to_string(&path).unwrap()));
        }
    }
    pages
}

#[test]
fn every_docs_citation_names_an_existing_page_and_heading() {
    let root = repository_root();
    let pages = pages(&root);
    let page_names: Vec<String> = pages.keys().cloned().collect();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (relative, text) in other_files(&root) {
        let in_docs = relative.starts_with("docs");
        for citation in citations(&text, in_docs, &page_names) {
            checked += 1;
            let place = format!("{}:{}", relative.display(), citation.line);
            let Some(headings) = pages.get(&citation.page) else {
                problems.push(format!("{place}: docs/{}.md does not exist", citation.page));
                continue;
            };
            match &citation.wanted {
                Wanted::Page => {}
                Wanted::Section(number) if !headings.has_number(number) => {
                    problems.push(format!("{place}: docs/{}.md has no §{number}", citation.page))
                }
                Wanted::Heading(name) if !headings.has_title(name) => {
                    problems.push(format!("{place}: docs/{}.md has no heading \"{name}\"", citation.page))
                }
                _ => {}
            }
        }
    }
    assert!(problems.is_empty(), "stale citations:\n{}", problems.join("\n"));
    // The sources cite the pages a few hundred times; finding far fewer means the scan broke.
    assert!(checked > 200, "only {checked} citations found: is the scan still reading the sources?");
}

/// Every `README "Heading"` in `text` (the repository's own README, not `tools/README` or a
/// project's `boot/README`): the quoted headings with their line numbers.
fn readme_citations(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (line_index, line) in text.lines().enumerate() {
        for (position, _) in line.match_indices("README \"") {
            let before = line[..position].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '/' || c == '.' || c == '_') {
                continue;
            }
            let quoted = &line[position + "README \"".len()..];
            if let Some(end) = quoted.find('"') {
                found.push((line_index + 1, quoted[..end].to_string()));
            }
        }
    }
    found
}

#[test]
fn every_readme_citation_names_a_readme_heading() {
    let root = repository_root();
    let readme = Headings::parse(&fs::read_to_string(root.join("README.md")).unwrap());
    let mut problems = Vec::new();
    for (relative, text) in other_files(&root) {
        for (line, heading) in readme_citations(&text) {
            if !readme.has_title(&heading) {
                problems
                    .push(format!("{}:{line}: README.md has no heading \"{heading}\"", relative.display()));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "stale README citations (its details live in docs/ now):\n{}",
        problems.join("\n")
    );
}

#[test]
fn readme_citations_are_told_apart_from_other_readmes() {
    let text =
        "//! options (README \"Settings\"): x\n// see tools/README \"Flags\" and circle boot/README \"x\"\n";
    assert_eq!(readme_citations(text), [(1, "Settings".to_string())]);
}

#[test]
fn nothing_cites_a_ticket_or_notes_outside_the_repository() {
    let root = repository_root();
    let mut problems = Vec::new();
    for (relative, text) in other_files(&root) {
        for (index, line) in text.lines().enumerate() {
            if let Some(what) = unfollowable_reference(line) {
                problems.push(format!("{}:{}: {what}: {}", relative.display(), index + 1, line.trim()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn citations_are_read_with_ranges_lists_and_quoted_headings() {
    let pages = vec!["qemu".to_string(), "hardware".to_string(), "measurement".to_string()];
    let text =
        "// QEMU (docs/qemu.md §1 \"UARTs\"), docs/hardware.md §2.1-2.7, §4.1 and §1.5–1.6; 0 = none\n\
                // docs/architecture.md \"What is measured\", \"Output\". see docs/ecosystem.md §2.3.\n\
                // other/docs/hardware.md §9 and README.md §9 are not ours";
    let found: Vec<(String, Wanted)> =
        citations(text, false, &pages).into_iter().map(|citation| (citation.page, citation.wanted)).collect();
    let section = |page: &str, number: &str| (page.to_string(), Wanted::Section(number.to_string()));
    let heading = |page: &str, name: &str| (page.to_string(), Wanted::Heading(name.to_string()));
    let page = |page: &str| (page.to_string(), Wanted::Page);
    assert_eq!(
        found,
        vec![
            page("qemu"),
            section("qemu", "1"),
            heading("qemu", "UARTs"),
            page("hardware"),
            section("hardware", "2.1"),
            section("hardware", "2.7"),
            section("hardware", "4.1"),
            section("hardware", "1.5"),
            section("hardware", "1.6"),
            page("architecture"),
            heading("architecture", "What is measured"),
            heading("architecture", "Output"),
            page("ecosystem"),
            section("ecosystem", "2.3"),
        ]
    );
    // Inside docs/, a sibling page cited without the directory counts; other .md files do not.
    let inside = citations(
        "see [measurement.md §3](measurement.md), [gone](gone.md) and tools/README.md",
        true,
        &pages,
    );
    assert_eq!(inside.len(), 4, "{inside:?}");
    assert_eq!(inside[1].wanted, Wanted::Section("3".to_string()));
    assert_eq!((inside[3].page.as_str(), &inside[3].wanted), ("gone", &Wanted::Page));
}

#[test]
fn headings_are_numbered_from_their_text_and_code_blocks_are_skipped() {
    let headings = Headings::parse(
        "# Title\n## 0. Summary\n### 2.5 1.8 V signalling\n```\n# 7. not a heading\n```\n\
         ### Card model (hw/sd/sd.c)\n## The block interface\n",
    );
    assert_eq!(headings.numbers, vec!["0", "2.5"]);
    assert!(headings.has_number("2.5") && !headings.has_number("1.8") && !headings.has_number("7"));
    assert!(headings.has_title("1.8 V signalling"));
    assert!(headings.has_title("Card model") && headings.has_title("The block interface"));
    assert!(!headings.has_title("Card") && !headings.has_title("The block"));
}

#[test]
fn ticket_numbers_are_told_apart_from_public_sources() {
    assert!(unfollowable_reference("// interface (issues 3 and 4).").is_some());
    assert!(unfollowable_reference("see Issue #12 for the plan").is_some());
    assert!(unfollowable_reference(&format!("read {NOTES_PARENT}/docs/hardware.md")).is_some());
    assert!(unfollowable_reference("raspberrypi/linux #3802 says so").is_none());
    assert!(unfollowable_reference("the host issues a command 5 times").is_none());
    assert!(unfollowable_reference("it reissues 3 times").is_none());
}
