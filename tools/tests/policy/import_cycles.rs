//! No two source files import each other, directly or round a circle. A file "imports" another
//! when its non-test code names a path into it: `use crate::a::B;`, `use super::b;`, a group
//! `use crate::{a::B, c::D};` or an inline `crate::a::B` / `super::b::f()`. Each workspace crate's
//! `src/` is read (not `src/bin/`, not the binary root beside a library: neither holds modules the
//! library imports), with comments, strings, `#[cfg(test)]` items and test-only files (declared
//! `#[cfg(test)] mod x;` or opening with `#![cfg(test)]`) left out. A circle means neither file can
//! be understood, tested or moved without the other: the shared type belongs in a third file.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

use crate::{repository_root, workspace_members};

/// `text` with comments, string literals and character literals blanked out (same length, same
/// line breaks), so that only code is searched for paths.
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for byte in &mut out[from..to.min(bytes.len())] {
            if *byte != b'\n' {
                *byte = b' ';
            }
        }
    };
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        let after_word = i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&byte| byte == b'\n').map_or(bytes.len(), |at| i + at);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < bytes.len() && depth > 0 {
                if bytes[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if bytes[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if !after_word
            && (rest.starts_with(b"r#") || rest.starts_with(b"r\"") || rest.starts_with(b"br"))
        {
            let start = if rest[0] == b'b' { i + 2 } else { i + 1 };
            let hashes = bytes[start..].iter().take_while(|&&byte| byte == b'#').count();
            if bytes.get(start + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let mut closing = vec![b'"'];
            closing.extend(std::iter::repeat_n(b'#', hashes));
            let body = start + hashes + 1;
            let end = bytes[body..]
                .windows(closing.len())
                .position(|window| window == closing)
                .map_or(bytes.len(), |at| body + at);
            blank(&mut out, body, end);
            i = end + closing.len();
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i + 1, j);
            i = j + 1;
        } else if rest[0] == b'\'' && rest.get(1) == Some(&b'\\') {
            let end =
                bytes[i + 2..].iter().position(|&byte| byte == b'\'').map_or(bytes.len(), |at| i + 2 + at);
            blank(&mut out, i, end + 1);
            i = end + 1;
        } else if rest[0] == b'\'' {
            // A character literal ('x', 'µ') is blanked; a lifetime ('a, 'static) is code.
            let character_length = text[i + 1..].chars().next().map_or(1, char::len_utf8);
            if bytes.get(i + 1 + character_length) == Some(&b'\'') {
                blank(&mut out, i, i + 2 + character_length);
                i += 2 + character_length;
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a `cfg` predicate selects test builds only (`test`, `any(test, feature = …)`), not
/// `not(test)`.
fn is_test_predicate(predicate: &str) -> bool {
    !predicate.contains("not(")
        && predicate.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).any(|word| word == "test")
}

/// The end (exclusive) of the attribute starting at `start` (`#[` … `]`).
fn attribute_end(code: &[u8], start: usize) -> usize {
    let mut depth = 0;
    for (offset, &byte) in code[start..].iter().enumerate() {
        match byte {
            b'[' => depth += 1,
            b']' => {
                depth -= 1;
                if depth == 0 {
                    return start + offset + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The end (exclusive) of the item starting at `start`: its `;` or its closing brace, after any
/// further attributes.
fn item_end(code: &[u8], start: usize) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < code.len() {
        match code[i] {
            b'#' if depth == 0 && code.get(i + 1) == Some(&b'[') => {
                i = attribute_end(code, i);
                continue;
            }
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            b';' if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    code.len()
}

/// A source file read for imports: its code without test items, and the names of the submodules
/// it declares for tests only.
struct SourceFile {
    code: String,
    whole_file_is_test: bool,
    test_modules: Vec<String>,
}

impl SourceFile {
    fn read(text: &str) -> SourceFile {
        let code = code_only(text);
        let whole_file_is_test = code
            .match_indices("#![cfg(")
            .any(|(at, _)| is_test_predicate(&code[at..attribute_end(code.as_bytes(), at + 2)]));
        let bytes = code.as_bytes();
        let mut kept = bytes.to_vec();
        let mut test_modules = Vec::new();
        let mut search_from = 0;
        while let Some(found) = code[search_from..].find("#[cfg(") {
            let start = search_from + found;
            let end = attribute_end(bytes, start);
            search_from = end;
            if !is_test_predicate(&code[start..end]) {
                continue;
            }
            let item_stop = item_end(bytes, end);
            let item = code[end..item_stop].trim();
            if let Some(name) = declared_module(item) {
                test_modules.push(name);
            }
            for byte in &mut kept[start..item_stop] {
                if *byte != b'\n' {
                    *byte = b' ';
                }
            }
            search_from = item_stop;
        }
        SourceFile { code: String::from_utf8(kept).unwrap(), whole_file_is_test, test_modules }
    }
}

/// `mod x;` (with attributes and visibility) → `x`; anything else → `None`.
fn declared_module(item: &str) -> Option<String> {
    let mut item = item;
    while item.starts_with("#[") {
        item = item[attribute_end(item.as_bytes(), 0)..].trim_start();
    }
    let item = item.strip_suffix(';')?.trim();
    let words: Vec<&str> = item.split_whitespace().collect();
    match words.as_slice() {
        [.., "mod", name] => Some(name.to_string()),
        _ => None,
    }
}

/// Every path named in `code`, with its line: each leaf of every `use` tree (`crate::a::{b, c::D}`
/// gives `crate::a::b` and `crate::a::c::D`) and every inline `crate::…`, `super::…`, `self::…`.
fn named_paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let line_starts: Vec<usize> = code.match_indices('\n').map(|(at, _)| at).collect();
    let line_of = |offset: usize| line_starts.partition_point(|&start| start < offset) + 1;
    let is_word_byte = |byte: u8| byte.is_ascii_alphanumeric() || byte == b'_';
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    for (at, _) in code.match_indices("use ") {
        if at > 0 && (is_word_byte(bytes[at - 1]) || bytes[at - 1] == b'#') {
            continue;
        }
        let Some(length) = code[at..].find(';') else { continue };
        let tree: String = code[at + 4..at + length].split_whitespace().collect::<Vec<_>>().join(" ");
        for path in expand_use_tree(&tree) {
            found.push((line_of(at), path));
        }
    }
    for keyword in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(keyword) {
            if at > 0 && (is_word_byte(bytes[at - 1]) || bytes[at - 1] == b':') {
                continue;
            }
            let length = code[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(code.len() - at);
            let path = split_path(&code[at..at + length]);
            found.push((line_of(at), path));
        }
    }
    found
}

fn split_path(path: &str) -> Vec<String> {
    path.split("::").map(str::trim).filter(|segment| !segment.is_empty()).map(str::to_string).collect()
}

/// The leaves of a `use` tree: `a::{b, c::{d, e as f}, *}` → `a::b`, `a::c::d`, `a::c::e`, `a`.
fn expand_use_tree(tree: &str) -> Vec<Vec<String>> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree);
        return vec![split_path(path.trim_end_matches('*'))];
    };
    let prefix = split_path(&tree[..open]);
    let inner = tree[open + 1..].trim_end().strip_suffix('}').unwrap_or(&tree[open + 1..]);
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (index, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    let mut leaves = Vec::new();
    for part in parts.into_iter().filter(|part| !part.trim().is_empty()) {
        for leaf in expand_use_tree(part) {
            let mut path = prefix.clone();
            path.extend(leaf);
            leaves.push(path);
        }
    }
    leaves
}

/// One crate's files by module path (`[]` for `lib.rs`, `["sdhci", "host"]` for
/// `sdhci/host.rs`), each with its path from the repository root.
fn crate_files(root: &Path, member: &str) -> BTreeMap<Vec<String>, PathBuf> {
    let source = root.join(member).join("src");
    let mut files = BTreeMap::new();
    let mut pending = vec![source.clone()];
    while let Some(directory) = pending.pop() {
        let Ok(entries) = fs::read_dir(&directory) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(&source).unwrap().to_path_buf();
            if path.is_dir() {
                if relative != Path::new("bin") {
                    pending.push(path);
                }
                continue;
            }
            if path.extension().and_then(|extension| extension.to_str()) != Some("rs") {
                continue;
            }
            let mut module: Vec<String> =
                relative.with_extension("").iter().map(|part| part.to_str().unwrap().to_string()).collect();
            if module.last().is_some_and(|last| last == "mod") || module == ["lib"] {
                module.pop();
            }
            if module == ["main"] && source.join("lib.rs").exists() {
                continue;
            }
            if module == ["main"] {
                module.clear();
            }
            files.insert(module, path.strip_prefix(root).unwrap().to_path_buf());
        }
    }
    files
}

/// One import from a file into another, with the line that names it.
#[derive(Debug, Clone)]
struct Import {
    from: PathBuf,
    line: usize,
    to: PathBuf,
}

/// The imports between different files of one crate, from non-test code.
fn crate_imports(root: &Path, member: &str) -> Vec<Import> {
    let files = crate_files(root, member);
    let mut read = BTreeMap::new();
    for (module, path) in &files {
        read.insert(module.clone(), SourceFile::read(&fs::read_to_string(root.join(path)).unwrap()));
    }
    let is_test_only = |module: &[String]| {
        (0..module.len()).any(|length| {
            let parent = &module[..length];
            read.get(parent).is_some_and(|file| file.test_modules.contains(&module[length]))
        }) || read.get(module).is_some_and(|file| file.whole_file_is_test)
    };
    let mut imports = Vec::new();
    for (module, file) in &read {
        if is_test_only(module.as_slice()) {
            continue;
        }
        for (line, path) in named_paths(&file.code) {
            let Some(target) = resolve(module, &path, &files) else { continue };
            if target != *module && !is_test_only(target.as_slice()) {
                imports.push(Import { from: files[module].clone(), line, to: files[&target].clone() });
            }
        }
    }
    imports
}

/// The file a path leads into, seen from the file of `module`: the longest run of its leading
/// segments that names a module file.
fn resolve(
    module: &[String],
    path: &[String],
    files: &BTreeMap<Vec<String>, PathBuf>,
) -> Option<Vec<String>> {
    let (mut current, mut rest) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        Some("self") => (module.to_vec(), &path[1..]),
        Some("super") => (module.to_vec(), path),
        _ => return None,
    };
    while rest.first().is_some_and(|segment| segment == "super") {
        current.pop()?;
        rest = &rest[1..];
    }
    for segment in rest {
        let mut deeper = current.clone();
        deeper.push(segment.clone());
        if !files.contains_key(&deeper) {
            break;
        }
        current = deeper;
    }
    Some(current)
}

/// The strongly connected groups of more than one file (Tarjan's algorithm), each sorted.
fn circles(imports: &[Import]) -> Vec<Vec<PathBuf>> {
    let mut graph: BTreeMap<&PathBuf, BTreeSet<&PathBuf>> = BTreeMap::new();
    for import in imports {
        graph.entry(&import.from).or_default().insert(&import.to);
        graph.entry(&import.to).or_default();
    }
    struct Walk<'a> {
        graph: &'a BTreeMap<&'a PathBuf, BTreeSet<&'a PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        found: Vec<Vec<PathBuf>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a PathBuf) {
            let number = self.index.len();
            self.index.insert(node, number);
            self.low.insert(node, number);
            self.stack.push(node);
            let graph = self.graph;
            for &next in &graph[node] {
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.stack.contains(&next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut group = Vec::new();
                while let Some(member) = self.stack.pop() {
                    group.push(member.clone());
                    if member == node {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.found.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        graph: &graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for &node in graph.keys() {
        if !walk.index.contains_key(node) {
            walk.visit(node);
        }
    }
    walk.found.sort();
    walk.found
}

/// One circle spelled out import by import, from its first file back to it:
/// `a.rs:16 → b.rs`, `b.rs:38 → a.rs`.
fn describe(circle: &[PathBuf], imports: &[Import]) -> String {
    let inside = |path: &PathBuf| circle.contains(path);
    let start = &circle[0];
    // Breadth-first from the start's imports back to the start, inside the circle.
    let mut came_from: BTreeMap<&PathBuf, &Import> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    'search: while let Some(node) = queue.pop_front() {
        for import in imports.iter().filter(|import| &import.from == node && inside(&import.to)) {
            if import.to == *start {
                came_from.insert(start, import);
                break 'search;
            }
            if !came_from.contains_key(&import.to) {
                came_from.insert(&import.to, import);
                queue.push_back(&import.to);
            }
        }
    }
    let mut steps = Vec::new();
    let mut node = start;
    while let Some(import) = came_from.get(node) {
        steps.push(format!("{}:{} → {}", import.from.display(), import.line, import.to.display()));
        node = &import.from;
        if node == start {
            break;
        }
    }
    steps.reverse();
    steps.join(", ")
}

#[test]
fn no_two_source_files_import_each_other() {
    let root = repository_root();
    let members = workspace_members(&fs::read_to_string(root.join("Cargo.toml")).unwrap());
    assert!(members.len() >= 6, "the workspace members were not read: {members:?}");
    let mut problems = Vec::new();
    let mut imports_read = 0;
    for member in &members {
        let imports = crate_imports(&root, member);
        imports_read += imports.len();
        for circle in circles(&imports) {
            let names: Vec<String> = circle.iter().map(|path| path.display().to_string()).collect();
            problems.push(format!(
                "{member}: files import each other: {{{}}}, e.g. {}",
                names.join(", "),
                describe(&circle, &imports)
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The crates import across files hundreds of times; far fewer means the scan broke.
    assert!(imports_read > 300, "only {imports_read} imports found: is the scan still reading the sources?");
}

#[test]
fn use_trees_inline_paths_and_test_code_are_read_as_written() {
    let text = r#"
//! Docs naming crate::not_code.
use crate::a::{b, c::{D, E as F}, self};
use super::g::*;
fn f() -> u32 { let s = "crate::in_a_string"; let c = '"'; crate::h::value() + super::i::J }
#[cfg(test)]
mod tests { use crate::only_in_tests::X; }
#[cfg(any(test, feature = "testing"))]
pub mod sim;
#[cfg(not(test))]
use crate::k::L;
"#;
    let file = SourceFile::read(text);
    // The inline `mod tests { … }` is left out where it stands; only `mod sim;` names a file.
    assert_eq!(file.test_modules, ["sim"]);
    let paths: Vec<String> = named_paths(&file.code).into_iter().map(|(_, path)| path.join("::")).collect();
    for expected in [
        "crate::a::b",
        "crate::a::c::D",
        "crate::a::c::E",
        "crate::a::self",
        "super::g",
        "crate::h::value",
        "super::i::J",
        "crate::k::L",
    ] {
        assert!(paths.contains(&expected.to_string()), "{expected} missing from {paths:?}");
    }
    for unexpected in ["not_code", "in_a_string", "only_in_tests"] {
        assert!(!paths.iter().any(|path| path.contains(unexpected)), "{unexpected} read from {paths:?}");
    }
}

#[test]
fn a_circle_is_named_import_by_import() {
    let import =
        |from: &str, line, to: &str| Import { from: PathBuf::from(from), line, to: PathBuf::from(to) };
    let imports = vec![
        import("src/check.rs", 16, "src/run.rs"),
        import("src/run.rs", 38, "src/report.rs"),
        import("src/report.rs", 18, "src/check.rs"),
        import("src/report.rs", 22, "src/units.rs"),
    ];
    let found = circles(&imports);
    assert_eq!(found.len(), 1);
    assert_eq!(
        describe(&found[0], &imports),
        "src/check.rs:16 → src/run.rs, src/run.rs:38 → src/report.rs, src/report.rs:18 → src/check.rs"
    );
}

#[test]
fn paths_resolve_to_the_deepest_module_file() {
    let files: BTreeMap<Vec<String>, PathBuf> = [
        (vec![], "lib.rs"),
        (vec!["nvme".to_string()], "nvme/mod.rs"),
        (vec!["nvme".to_string(), "admin".to_string()], "nvme/admin.rs"),
        (vec!["nvme".to_string(), "ring".to_string()], "nvme/ring.rs"),
    ]
    .into_iter()
    .map(|(module, path)| (module, PathBuf::from(path)))
    .collect();
    let admin = ["nvme".to_string(), "admin".to_string()];
    let resolved = |path: &str| resolve(&admin, &split_path(path), &files);
    assert_eq!(resolved("super::ring::SubmissionRing"), Some(vec!["nvme".to_string(), "ring".to_string()]));
    assert_eq!(resolved("super::NvmeError"), Some(vec!["nvme".to_string()]));
    assert_eq!(resolved("crate::MARKER"), Some(vec![]));
    assert_eq!(resolved("self::inner"), Some(admin.to_vec()));
}
