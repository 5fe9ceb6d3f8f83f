//! A byte range of a device: the part a job reads or writes, and a pattern region found on it
//! (docs/checks.md §1).

/// A byte range of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub offset_bytes: u64,
    pub size_bytes: u64,
}
