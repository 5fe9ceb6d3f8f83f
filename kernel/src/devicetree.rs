//! A bounds-checked reader for flattened device trees (Devicetree Specification v0.4, chapter 5
//! "Flattened Devicetree (DTB) Format"; §2.3.6-2.3.8 for #address-cells, #size-cells, reg and
//! ranges).
//!
//! Written here rather than taken from the `fdt` crate because a corrupt blob must lead to a
//! one-line warning and the board tables, and `fdt` 0.1.5 panics on malformed structure blocks
//! (`panic!("bad prop")`, `.expect("FDT property")` in its node parser). Every read here is
//! checked and every failure is a [`DeviceTreeError`]. No allocation: it runs before the MMU.

use core::fmt;

const MAGIC: u32 = 0xd00d_feed;
const TOKEN_BEGIN_NODE: u32 = 1;
const TOKEN_END_NODE: u32 = 2;
const TOKEN_PROPERTY: u32 = 3;
const TOKEN_NOP: u32 = 4;
const TOKEN_END: u32 = 9;
const HEADER_BYTES: usize = 40;
/// Nesting deeper than this is treated as corruption (real trees nest 5 or 6 levels).
pub const MAX_DEPTH: usize = 16;
/// Largest blob accepted; QEMU's virt tree is 1 MiB, Pi trees are under 100 KiB.
pub const MAX_TOTAL_BYTES: usize = 4 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceTreeError {
    BadMagic { found: u32 },
    BadHeader { total_bytes: u32 },
    Truncated { offset: usize },
    BadToken { token: u32, offset: usize },
    TooDeep,
    BadString { offset: usize },
}

impl fmt::Display for DeviceTreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceTreeError::BadMagic { found } => {
                write!(f, "no device tree magic (found {found:#010x})")
            }
            DeviceTreeError::BadHeader { total_bytes } => {
                write!(f, "inconsistent header (total size {total_bytes})")
            }
            DeviceTreeError::Truncated { offset } => {
                write!(f, "structure ends early at byte {offset}")
            }
            DeviceTreeError::BadToken { token, offset } => {
                write!(f, "unknown token {token:#x} at byte {offset}")
            }
            DeviceTreeError::TooDeep => write!(f, "nodes nested deeper than {MAX_DEPTH}"),
            DeviceTreeError::BadString { offset } => {
                write!(f, "unterminated string at byte {offset}")
            }
        }
    }
}

fn be32(bytes: &[u8], offset: usize) -> Result<u32, DeviceTreeError> {
    let word = bytes.get(offset..offset + 4).ok_or(DeviceTreeError::Truncated { offset })?;
    Ok(u32::from_be_bytes([word[0], word[1], word[2], word[3]]))
}

/// Reads a big-endian number of `cells` 32-bit cells (1 or 2; more keep the low 64 bits).
pub fn read_cells(bytes: &[u8], cells: usize) -> Option<u64> {
    if bytes.len() < cells * 4 {
        return None;
    }
    let mut value = 0u64;
    for index in 0..cells {
        let word = u32::from_be_bytes(bytes[index * 4..index * 4 + 4].try_into().ok()?);
        value = (value << 32) | u64::from(word);
    }
    Some(value)
}

/// The strings of a string-list property (`compatible`), without empty trailing entries.
pub fn string_list(value: &[u8]) -> impl Iterator<Item = &str> {
    value.split(|&b| b == 0).filter(|s| !s.is_empty()).filter_map(|s| core::str::from_utf8(s).ok())
}

/// A validated device tree blob.
#[derive(Clone, Copy)]
pub struct DeviceTree<'a> {
    structure: &'a [u8],
    strings: &'a [u8],
    total_bytes: usize,
}

/// One step of a walk over the structure block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token<'a> {
    BeginNode { name: &'a str, offset: usize },
    Property { name: &'a str, value: &'a [u8] },
    EndNode,
    End,
}

/// How a node's children address things: its own #address-cells and #size-cells, and its
/// `ranges` (None: absent; Some(empty): identity).
#[derive(Clone, Copy, Debug, Default)]
struct Frame<'a> {
    address_cells: usize,
    size_cells: usize,
    ranges: Option<&'a [u8]>,
}

/// A node found by a query, with its `reg` translated to CPU physical addresses.
#[derive(Clone, Copy, Debug)]
pub struct DeviceNode<'a> {
    pub name: &'a str,
    /// Byte offset of the node in the structure block, for [`DeviceTree::property`].
    pub offset: usize,
    pub depth: usize,
    /// The node's own #address-cells / #size-cells (how its children and `ranges` count).
    pub address_cells: usize,
    pub size_cells: usize,
    /// The parent's cell counts (how this node's `reg` counts).
    pub parent_address_cells: usize,
    pub parent_size_cells: usize,
    /// First `reg` entry, translated through the ancestors' `ranges`, if it has one.
    pub first_reg: Option<(u64, u64)>,
    pub compatible: Option<&'a [u8]>,
}

impl<'a> DeviceNode<'a> {
    pub fn is_compatible(&self, wanted: &str) -> bool {
        self.compatible.map(|c| string_list(c).any(|s| s == wanted)).unwrap_or(false)
    }

    pub fn first_compatible(&self) -> Option<&'a str> {
        self.compatible.and_then(|c| string_list(c).next())
    }
}

impl<'a> DeviceTree<'a> {
    /// Checks the header and the whole structure block.
    pub fn parse(blob: &'a [u8]) -> Result<Self, DeviceTreeError> {
        let magic = be32(blob, 0)?;
        if magic != MAGIC {
            return Err(DeviceTreeError::BadMagic { found: magic });
        }
        let total_bytes = be32(blob, 4)?;
        let bad_header = DeviceTreeError::BadHeader { total_bytes };
        let total = total_bytes as usize;
        if total < HEADER_BYTES || total > blob.len() || total > MAX_TOTAL_BYTES {
            return Err(bad_header);
        }
        let structure_offset = be32(blob, 8)? as usize;
        let strings_offset = be32(blob, 12)? as usize;
        let strings_bytes = be32(blob, 32)? as usize;
        let structure_bytes = be32(blob, 36)? as usize;
        let structure = blob
            .get(structure_offset..structure_offset.checked_add(structure_bytes).ok_or(bad_header)?)
            .filter(|_| structure_offset + structure_bytes <= total)
            .ok_or(bad_header)?;
        let strings = blob
            .get(strings_offset..strings_offset.checked_add(strings_bytes).ok_or(bad_header)?)
            .filter(|_| strings_offset + strings_bytes <= total)
            .ok_or(bad_header)?;
        let tree = DeviceTree { structure, strings, total_bytes: total };
        tree.validate()?;
        Ok(tree)
    }

    /// Parses the blob at a physical address (the x0 handed over at entry).
    ///
    /// # Safety
    /// `address` must be readable for 8 bytes and, when the magic matches, for the header's total
    /// size (capped at [`MAX_TOTAL_BYTES`]); that memory must not change while the tree is used.
    pub unsafe fn from_address(address: usize) -> Result<DeviceTree<'static>, DeviceTreeError> {
        if address == 0 || !address.is_multiple_of(4) {
            return Err(DeviceTreeError::BadMagic { found: 0 });
        }
        // SAFETY: the caller guarantees the first 8 bytes are readable.
        let header = unsafe { core::slice::from_raw_parts(address as *const u8, 8) };
        let magic = be32(header, 0)?;
        if magic != MAGIC {
            return Err(DeviceTreeError::BadMagic { found: magic });
        }
        let total = be32(header, 4)? as usize;
        if !(HEADER_BYTES..=MAX_TOTAL_BYTES).contains(&total) {
            return Err(DeviceTreeError::BadHeader { total_bytes: total as u32 });
        }
        // SAFETY: the magic matched, so by the caller's guarantee `total` bytes are readable.
        let blob = unsafe { core::slice::from_raw_parts(address as *const u8, total) };
        DeviceTree::parse(blob)
    }

    pub fn total_bytes(&self) -> usize {
        self.total_bytes
    }

    fn string_at(&self, offset: usize) -> Result<&'a str, DeviceTreeError> {
        let tail = self.strings.get(offset..).ok_or(DeviceTreeError::BadString { offset })?;
        let end = tail.iter().position(|&b| b == 0).ok_or(DeviceTreeError::BadString { offset })?;
        core::str::from_utf8(&tail[..end]).map_err(|_| DeviceTreeError::BadString { offset })
    }

    /// Reads the token at `offset`; returns it and the offset of the next one.
    fn token_at(&self, mut offset: usize) -> Result<(Token<'a>, usize), DeviceTreeError> {
        loop {
            let token = be32(self.structure, offset)?;
            match token {
                TOKEN_NOP => offset += 4,
                TOKEN_BEGIN_NODE => {
                    let name_start = offset + 4;
                    let tail =
                        self.structure.get(name_start..).ok_or(DeviceTreeError::Truncated { offset })?;
                    let length =
                        tail.iter().position(|&b| b == 0).ok_or(DeviceTreeError::BadString { offset })?;
                    let name = core::str::from_utf8(&tail[..length])
                        .map_err(|_| DeviceTreeError::BadString { offset: name_start })?;
                    let next = (name_start + length + 1).next_multiple_of(4);
                    return Ok((Token::BeginNode { name, offset }, next));
                }
                TOKEN_PROPERTY => {
                    let length = be32(self.structure, offset + 4)? as usize;
                    let name_offset = be32(self.structure, offset + 8)? as usize;
                    let value_start = offset + 12;
                    let value = self
                        .structure
                        .get(
                            value_start
                                ..value_start
                                    .checked_add(length)
                                    .ok_or(DeviceTreeError::Truncated { offset })?,
                        )
                        .ok_or(DeviceTreeError::Truncated { offset })?;
                    let name = self.string_at(name_offset)?;
                    return Ok((Token::Property { name, value }, (value_start + length).next_multiple_of(4)));
                }
                TOKEN_END_NODE => return Ok((Token::EndNode, offset + 4)),
                TOKEN_END => return Ok((Token::End, offset + 4)),
                other => return Err(DeviceTreeError::BadToken { token: other, offset }),
            }
        }
    }

    fn validate(&self) -> Result<(), DeviceTreeError> {
        let mut offset = 0;
        let mut depth = 0usize;
        let mut seen_root = false;
        loop {
            let (token, next) = self.token_at(offset)?;
            match token {
                Token::BeginNode { .. } => {
                    if depth == 0 && seen_root {
                        return Err(DeviceTreeError::BadToken { token: TOKEN_BEGIN_NODE, offset });
                    }
                    seen_root = true;
                    depth += 1;
                    if depth > MAX_DEPTH {
                        return Err(DeviceTreeError::TooDeep);
                    }
                }
                Token::EndNode => {
                    depth = depth
                        .checked_sub(1)
                        .ok_or(DeviceTreeError::BadToken { token: TOKEN_END_NODE, offset })?;
                }
                Token::Property { .. } if depth == 0 => {
                    return Err(DeviceTreeError::BadToken { token: TOKEN_PROPERTY, offset });
                }
                Token::Property { .. } => {}
                Token::End => {
                    return if depth == 0 && seen_root {
                        Ok(())
                    } else {
                        Err(DeviceTreeError::Truncated { offset })
                    };
                }
            }
            offset = next;
        }
    }

    /// The properties of the node that begins at `node_offset`.
    pub fn properties(&self, node_offset: usize) -> impl Iterator<Item = (&'a str, &'a [u8])> + '_ {
        let mut offset = self.token_at(node_offset).map(|(_, next)| next).ok();
        core::iter::from_fn(move || {
            let (token, next) = self.token_at(offset?).ok()?;
            match token {
                Token::Property { name, value } => {
                    offset = Some(next);
                    Some((name, value))
                }
                _ => {
                    offset = None;
                    None
                }
            }
        })
    }

    pub fn property(&self, node_offset: usize, wanted: &str) -> Option<&'a [u8]> {
        self.properties(node_offset).find(|(name, _)| *name == wanted).map(|(_, value)| value)
    }

    /// A string property, without its terminating NUL.
    pub fn string_property(&self, node_offset: usize, wanted: &str) -> Option<&'a str> {
        let value = self.property(node_offset, wanted)?;
        let text = value.split(|&b| b == 0).next()?;
        core::str::from_utf8(text).ok()
    }

    /// Visits every node depth-first with its reg translated to CPU addresses. `visit` returns
    /// false to stop the walk.
    pub fn walk(&self, mut visit: impl FnMut(&DeviceNode<'a>) -> bool) {
        self.walk_with_frames(|node, _| visit(node));
    }

    /// `address` in the space `node`'s own `reg` uses (its parent's children; also the parent
    /// side of its `ranges`), translated through the ancestors' `ranges` to a CPU address.
    pub fn to_cpu_address(&self, node: &DeviceNode<'a>, address: u64) -> Option<u64> {
        let mut translated = None;
        self.walk_with_frames(|candidate, frames| {
            if candidate.offset != node.offset {
                return true;
            }
            translated = translate(frames, address);
            false
        });
        translated
    }

    /// [`DeviceTree::walk`], also handing the visitor the frames that translate the node's `reg`.
    fn walk_with_frames(&self, mut visit: impl FnMut(&DeviceNode<'a>, &[Frame<'a>]) -> bool) {
        let mut frames = [Frame::default(); MAX_DEPTH + 1];
        // The root's parent: the spec's defaults are 2 address cells and 1 size cell.
        frames[0] = Frame { address_cells: 2, size_cells: 1, ranges: Some(&[]) };
        let mut depth = 0usize;
        let mut offset = 0usize;
        while let Ok((token, next)) = self.token_at(offset) {
            match token {
                Token::BeginNode { name, offset: node_offset } => {
                    depth += 1;
                    if depth > MAX_DEPTH {
                        return;
                    }
                    let mut frame = Frame { address_cells: 2, size_cells: 1, ranges: None };
                    let mut reg = None;
                    let mut compatible = None;
                    for (property, value) in self.properties(node_offset) {
                        match property {
                            "#address-cells" => {
                                frame.address_cells = read_cells(value, 1).unwrap_or(2) as usize
                            }
                            "#size-cells" => frame.size_cells = read_cells(value, 1).unwrap_or(1) as usize,
                            "ranges" => frame.ranges = Some(value),
                            "reg" => reg = Some(value),
                            "compatible" => compatible = Some(value),
                            _ => {}
                        }
                    }
                    frames[depth] = frame;
                    let parent = frames[depth - 1];
                    let first_reg = reg.and_then(|value| {
                        let address = read_cells(value, parent.address_cells)?;
                        let size = read_cells(value.get(parent.address_cells * 4..)?, parent.size_cells)?;
                        Some((translate(&frames[..depth], address)?, size))
                    });
                    let node = DeviceNode {
                        name,
                        offset: node_offset,
                        depth,
                        address_cells: frame.address_cells,
                        size_cells: frame.size_cells,
                        parent_address_cells: parent.address_cells,
                        parent_size_cells: parent.size_cells,
                        first_reg,
                        compatible,
                    };
                    if !visit(&node, &frames[..depth]) {
                        return;
                    }
                }
                Token::EndNode => depth = depth.saturating_sub(1),
                Token::Property { .. } => {}
                Token::End => return,
            }
            offset = next;
        }
    }

    /// The first node that is compatible with any of `wanted`.
    pub fn find_compatible(&self, wanted: &[&str]) -> Option<DeviceNode<'a>> {
        let mut found = None;
        self.walk(|node| {
            if wanted.iter().any(|w| node.is_compatible(w)) {
                found = Some(*node);
                return false;
            }
            true
        });
        found
    }

    /// The node at an absolute path such as `/chosen` (unit addresses must be given in full).
    pub fn find_path(&self, path: &str) -> Option<DeviceNode<'a>> {
        let mut components: heapless::Vec<&str, MAX_DEPTH> = heapless::Vec::new();
        for component in path.split('/').filter(|c| !c.is_empty()) {
            components.push(component).ok()?;
        }
        let mut matched = 0usize;
        let mut found = None;
        self.walk(|node| {
            // Depth 1 is the root (name ""); component k matches at depth k + 2.
            if node.depth == 1 {
                if components.is_empty() {
                    found = Some(*node);
                    return false;
                }
                return true;
            }
            if node.depth <= matched + 1 {
                matched = node.depth - 2;
            }
            if node.depth == matched + 2 && components.get(matched) == Some(&node.name) {
                matched += 1;
                if matched == components.len() {
                    found = Some(*node);
                    return false;
                }
            }
            true
        });
        found
    }

    /// The node that contains `node` (`None` for the root).
    pub fn parent_of(&self, node: &DeviceNode<'a>) -> Option<DeviceNode<'a>> {
        let mut ancestors: [Option<DeviceNode<'a>>; MAX_DEPTH + 1] = [None; MAX_DEPTH + 1];
        let mut found = None;
        self.walk(|visited| {
            if visited.offset == node.offset {
                found = ancestors[visited.depth - 1];
                return false;
            }
            ancestors[visited.depth] = Some(*visited);
            true
        });
        found
    }

    /// All `reg` entries of `node`, in its parent's address space (no `ranges` translation: use
    /// it for nodes directly under the root, such as `/memory`, where the spaces agree).
    pub fn reg_entries(&self, node: &DeviceNode<'a>) -> impl Iterator<Item = (u64, u64)> + 'a {
        let entry_bytes = (node.parent_address_cells + node.parent_size_cells) * 4;
        let (address_cells, size_cells) = (node.parent_address_cells, node.parent_size_cells);
        let value = self.property(node.offset, "reg").unwrap_or(&[]);
        let chunks =
            if entry_bytes == 0 { value[..0].chunks_exact(1) } else { value.chunks_exact(entry_bytes) };
        chunks.filter_map(move |entry| {
            let address = read_cells(entry, address_cells)?;
            let size = read_cells(entry.get(address_cells * 4..)?, size_cells)?;
            Some((address, size))
        })
    }

    /// Nodes directly under the root whose `device_type` is "memory".
    pub fn for_each_memory_node(&self, mut visit: impl FnMut(&DeviceNode<'a>)) {
        self.walk(|node| {
            if node.depth == 2 && self.string_property(node.offset, "device_type") == Some("memory") {
                visit(node);
            }
            true
        });
    }

    pub fn root(&self) -> Option<DeviceNode<'a>> {
        self.find_path("/")
    }
}

/// Translates an address in the space of the node at `frames.len() - 1`'s children up to the
/// root, through each ancestor's `ranges` (Devicetree Specification §2.3.8).
fn translate(frames: &[Frame<'_>], mut address: u64) -> Option<u64> {
    // frames[k] describes the node at depth k (frames[0] is the root's notional parent and
    // frames[1] the root). An address in the space of frames[level]'s children moves to the space
    // of frames[level - 1]'s children through frames[level].ranges; the root's children's space is
    // the CPU's.
    for level in (2..frames.len()).rev() {
        let bus = frames[level];
        let parent = frames[level - 1];
        let ranges = match bus.ranges {
            None => return None,
            Some([]) => continue,
            Some(ranges) => ranges,
        };
        let entry_bytes = (bus.address_cells + parent.address_cells + bus.size_cells) * 4;
        if entry_bytes == 0 {
            return None;
        }
        let mut translated = None;
        for entry in ranges.chunks_exact(entry_bytes) {
            let child = read_cells(entry, bus.address_cells)?;
            let parent_address = read_cells(&entry[bus.address_cells * 4..], parent.address_cells)?;
            let size = read_cells(&entry[(bus.address_cells + parent.address_cells) * 4..], bus.size_cells)?;
            if address >= child && address - child < size {
                translated = Some(parent_address + (address - child));
                break;
            }
        }
        address = translated?;
    }
    Some(address)
}

/// Builds device tree blobs for tests (the host side of the end-to-end tests uses it too, to hand
/// QEMU's raspi machines a tree with `-dtb`).
#[cfg(not(target_os = "none"))]
pub mod builder {
    use std::vec::Vec;

    #[derive(Default)]
    pub struct Builder {
        structure: Vec<u8>,
        strings: Vec<u8>,
    }

    impl Builder {
        pub fn new() -> Self {
            Self::default()
        }

        fn word(&mut self, value: u32) {
            self.structure.extend_from_slice(&value.to_be_bytes());
        }

        fn pad(&mut self) {
            while !self.structure.len().is_multiple_of(4) {
                self.structure.push(0);
            }
        }

        pub fn begin(&mut self, name: &str) -> &mut Self {
            self.word(super::TOKEN_BEGIN_NODE);
            self.structure.extend_from_slice(name.as_bytes());
            self.structure.push(0);
            self.pad();
            self
        }

        pub fn end(&mut self) -> &mut Self {
            self.word(super::TOKEN_END_NODE);
            self
        }

        pub fn property(&mut self, name: &str, value: &[u8]) -> &mut Self {
            let name_offset = match self
                .strings
                .windows(name.len() + 1)
                .position(|w| &w[..name.len()] == name.as_bytes() && w[name.len()] == 0)
            {
                Some(offset) => offset,
                None => {
                    let offset = self.strings.len();
                    self.strings.extend_from_slice(name.as_bytes());
                    self.strings.push(0);
                    offset
                }
            };
            self.word(super::TOKEN_PROPERTY);
            self.word(value.len() as u32);
            self.word(name_offset as u32);
            self.structure.extend_from_slice(value);
            self.pad();
            self
        }

        pub fn string(&mut self, name: &str, value: &str) -> &mut Self {
            let mut bytes = value.as_bytes().to_vec();
            bytes.push(0);
            self.property(name, &bytes)
        }

        pub fn strings(&mut self, name: &str, values: &[&str]) -> &mut Self {
            let mut bytes = Vec::new();
            for value in values {
                bytes.extend_from_slice(value.as_bytes());
                bytes.push(0);
            }
            self.property(name, &bytes)
        }

        pub fn cells(&mut self, name: &str, cells: &[u32]) -> &mut Self {
            let bytes: Vec<u8> = cells.iter().flat_map(|c| c.to_be_bytes()).collect();
            self.property(name, &bytes)
        }

        pub fn finish(&mut self) -> Vec<u8> {
            self.word(super::TOKEN_END);
            let structure_offset = 40 + 16; // header, then an empty reservation map
            let strings_offset = structure_offset + self.structure.len();
            let total = strings_offset + self.strings.len();
            let mut blob = Vec::with_capacity(total);
            for word in [
                super::MAGIC,
                total as u32,
                structure_offset as u32,
                strings_offset as u32,
                40,
                17,
                16,
                0,
                self.strings.len() as u32,
                self.structure.len() as u32,
            ] {
                blob.extend_from_slice(&word.to_be_bytes());
            }
            blob.extend_from_slice(&[0; 16]);
            blob.extend_from_slice(&self.structure);
            blob.extend_from_slice(&self.strings);
            blob
        }
    }

    /// `emmc2bus` `dma-ranges` as a C0 board's firmware writes it: bus = CPU for 0xFC00_0000
    /// bytes (2 child cells, 2 parent cells, 1 size cell; docs/hardware.md §1.4).
    pub const EMMC2_C0_DMA_RANGES: [u8; 20] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfc, 0, 0, 0];

    /// A copy of `blob` with the value of `property` of the node at `path` replaced by `value`
    /// of the same length (as a firmware edits a tree in place); `None` when the tree, node or
    /// property is missing or the lengths differ.
    pub fn with_property_value(blob: &[u8], path: &str, property: &str, value: &[u8]) -> Option<Vec<u8>> {
        let tree = super::DeviceTree::parse(blob).ok()?;
        let node = tree.find_path(path)?;
        let old = tree.property(node.offset, property)?;
        if old.len() != value.len() {
            return None;
        }
        let start = old.as_ptr() as usize - blob.as_ptr() as usize;
        let mut edited = blob.to_vec();
        edited[start..start + value.len()].copy_from_slice(value);
        Some(edited)
    }

    /// A tree shaped like a Pi 4's (soc ranges 0x7e00_0000 -> 0xfe00_0000, EMMC2 behind emmc2bus
    /// with the B0 `dma-ranges` the upstream tree ships).
    pub fn pi4_like(bootargs: &str) -> Vec<u8> {
        let mut b = Builder::new();
        b.begin("")
            .cells("#address-cells", &[2])
            .cells("#size-cells", &[1])
            .string("model", "Raspberry Pi 4 Model B Rev 1.5")
            .strings("compatible", &["raspberrypi,4-model-b", "brcm,bcm2711"]);
        b.begin("chosen").string("bootargs", bootargs).end();
        b.begin("memory@0").string("device_type", "memory").cells("reg", &[0, 0, 0x3b40_0000]).end();
        b.begin("soc")
            .strings("compatible", &["simple-bus"])
            .cells("#address-cells", &[1])
            .cells("#size-cells", &[1])
            .cells("ranges", &[0x7e00_0000, 0, 0xfe00_0000, 0x0180_0000]);
        b.begin("serial@7e201000")
            .strings("compatible", &["arm,pl011", "arm,primecell"])
            .cells("reg", &[0x7e20_1000, 0x200])
            .end();
        b.end();
        b.begin("emmc2bus")
            .strings("compatible", &["simple-bus"])
            .cells("#address-cells", &[2])
            .cells("#size-cells", &[1])
            .cells("ranges", &[0, 0x7e00_0000, 0, 0xfe00_0000, 0x0180_0000])
            .cells("dma-ranges", &[0, 0xc000_0000, 0, 0, 0x4000_0000]);
        b.begin("mmc@7e340000")
            .strings("compatible", &["brcm,bcm2711-emmc2"])
            .cells("reg", &[0, 0x7e34_0000, 0x100])
            .end();
        b.end();
        b.end();
        b.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::builder::{pi4_like, Builder};
    use super::*;

    #[test]
    fn reads_model_bootargs_and_translates_through_ranges() {
        let blob = pi4_like("preset=quick exit=semihosting");
        let tree = DeviceTree::parse(&blob).unwrap();
        let root = tree.root().unwrap();
        assert_eq!(tree.string_property(root.offset, "model"), Some("Raspberry Pi 4 Model B Rev 1.5"));
        assert!(root.is_compatible("brcm,bcm2711"));
        let chosen = tree.find_path("/chosen").unwrap();
        assert_eq!(tree.string_property(chosen.offset, "bootargs"), Some("preset=quick exit=semihosting"));
        let uart = tree.find_compatible(&["arm,pl011"]).unwrap();
        assert_eq!(uart.first_reg, Some((0xfe20_1000, 0x200)));
        let emmc2 = tree.find_compatible(&["brcm,bcm2711-emmc2"]).unwrap();
        assert_eq!(emmc2.first_reg, Some((0xfe34_0000, 0x100)));
        assert_eq!(tree.find_path("/memory@0").unwrap().first_reg, Some((0, 0x3b40_0000)));
        let mut memory = std::vec::Vec::new();
        tree.for_each_memory_node(|node| memory.extend(tree.reg_entries(node)));
        assert_eq!(memory, [(0, 0x3b40_0000)]);
        assert!(tree.find_path("/soc/serial@7e201000").is_some());
        assert!(tree.find_path("/soc/nothing").is_none());
        assert!(tree.find_path("/serial@7e201000").is_none());
    }

    #[test]
    fn parents_are_found_and_properties_edited_in_place() {
        use super::builder::{with_property_value, EMMC2_C0_DMA_RANGES};
        let blob = pi4_like("x");
        let tree = DeviceTree::parse(&blob).unwrap();
        let emmc2 = tree.find_compatible(&["brcm,bcm2711-emmc2"]).unwrap();
        let bus = tree.parent_of(&emmc2).unwrap();
        assert_eq!(bus.name, "emmc2bus");
        assert_eq!((bus.address_cells, bus.parent_address_cells, bus.size_cells), (2, 2, 1));
        assert_eq!(tree.parent_of(&bus).unwrap().name, "");
        assert!(tree.parent_of(&tree.root().unwrap()).is_none());
        let edited = with_property_value(&blob, "/emmc2bus", "dma-ranges", &EMMC2_C0_DMA_RANGES).unwrap();
        assert_eq!(edited.len(), blob.len());
        let tree = DeviceTree::parse(&edited).unwrap();
        let bus = tree.find_path("/emmc2bus").unwrap();
        assert_eq!(tree.property(bus.offset, "dma-ranges"), Some(&EMMC2_C0_DMA_RANGES[..]));
        assert_eq!(tree.string_property(tree.find_path("/chosen").unwrap().offset, "bootargs"), Some("x"));
        // A value of another length, or a missing node, is refused.
        assert!(with_property_value(&blob, "/emmc2bus", "dma-ranges", &[0; 4]).is_none());
        assert!(with_property_value(&blob, "/nothing", "dma-ranges", &EMMC2_C0_DMA_RANGES).is_none());
    }

    #[test]
    fn addresses_in_a_nodes_space_translate_to_the_cpus() {
        let blob = pi4_like("x");
        let tree = DeviceTree::parse(&blob).unwrap();
        let uart = tree.find_compatible(&["arm,pl011"]).unwrap();
        assert_eq!(tree.to_cpu_address(&uart, 0x7e20_1000), Some(0xfe20_1000));
        assert_eq!(tree.to_cpu_address(&uart, 0x7c00_0000), None);
        let root = tree.root().unwrap();
        let chosen = tree.find_path("/chosen").unwrap();
        assert_eq!(tree.to_cpu_address(&chosen, 0x1234), Some(0x1234), "root children: CPU space");
        assert_eq!(tree.to_cpu_address(&root, 0x10), Some(0x10));
    }

    #[test]
    fn a_node_outside_every_range_has_no_address() {
        let mut b = Builder::new();
        b.begin("").cells("#address-cells", &[1]).cells("#size-cells", &[1]);
        b.begin("bus")
            .cells("#address-cells", &[1])
            .cells("#size-cells", &[1])
            .cells("ranges", &[0x1000, 0x8000, 0x100]);
        b.begin("inside").cells("reg", &[0x1010, 4]).end();
        b.begin("outside").cells("reg", &[0x2000, 4]).end();
        b.end();
        b.begin("nobus").cells("#address-cells", &[1]).cells("#size-cells", &[1]);
        b.begin("dev").cells("reg", &[0x10, 4]).end();
        b.end().end();
        let blob = b.finish();
        let tree = DeviceTree::parse(&blob).unwrap();
        assert_eq!(tree.find_path("/bus/inside").unwrap().first_reg, Some((0x8010, 4)));
        assert_eq!(tree.find_path("/bus/outside").unwrap().first_reg, None);
        assert_eq!(tree.find_path("/nobus/dev").unwrap().first_reg, None);
    }

    #[test]
    fn corrupt_blobs_are_errors_not_panics() {
        let blob = pi4_like("x");
        assert!(matches!(DeviceTree::parse(&blob[..blob.len() - 8]), Err(DeviceTreeError::BadHeader { .. })));
        let mut bad_magic = blob.clone();
        bad_magic[0] = 0;
        assert!(matches!(DeviceTree::parse(&bad_magic), Err(DeviceTreeError::BadMagic { .. })));
        // Every single-byte corruption in the structure block must be handled without panicking.
        for index in 40..blob.len() {
            for value in [0x00, 0x03, 0xff] {
                let mut corrupt = blob.clone();
                corrupt[index] = value;
                if let Ok(tree) = DeviceTree::parse(&corrupt) {
                    tree.walk(|_| true);
                    let _ = tree.find_path("/chosen").map(|n| tree.string_property(n.offset, "bootargs"));
                }
            }
        }
        let mut unterminated = Builder::new();
        unterminated.begin("").begin("child");
        let mut blob = unterminated.finish();
        assert!(DeviceTree::parse(&blob).is_err());
        blob.clear();
        assert!(DeviceTree::parse(&blob).is_err());
    }

    #[test]
    fn tokens_have_the_specification_values() {
        // Devicetree Specification v0.4 §5.4.1: BEGIN_NODE 1, END_NODE 2, PROP 3, NOP 4, END 9.
        assert_eq!((TOKEN_BEGIN_NODE, TOKEN_END_NODE, TOKEN_PROPERTY, TOKEN_NOP, TOKEN_END), (1, 2, 3, 4, 9));
        let blob = Builder::new().begin("").end().finish();
        let structure_end = 56 + 16; // header and reservation map, then BEGIN "" (8), END_NODE, END
        assert_eq!(&blob[structure_end - 4..structure_end], &[0, 0, 0, 9]);
    }

    #[test]
    fn cells_and_string_lists() {
        assert_eq!(read_cells(&[0, 0, 0, 0x40, 0x10, 0, 0, 0], 2), Some(0x40_1000_0000));
        assert_eq!(read_cells(&[1, 2], 1), None);
        let list: std::vec::Vec<&str> = string_list(b"a,b\0c\0").collect();
        assert_eq!(list, ["a,b", "c"]);
    }
}
