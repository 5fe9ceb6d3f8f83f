//! The JSON writer both result blocks share (fio's jobs in crate::json, the scans, sustained
//! writes and hdparm timings in crate::stream_json): fio's layout (`"key" : value`, two-space
//! indentation), strings escaped as RFC 8259 §7 says, and the sections both write the same way
//! (errors by kind, `check=`'s findings, a write's verification).

use core::fmt::{self, Write};

use blockdev::IoErrorKind;

use crate::units::Fixed;

/// A streaming JSON writer with fio's layout (`"key" : value`, two-space indentation).
pub(crate) struct JsonWriter<'w> {
    out: &'w mut dyn fmt::Write,
    depth: usize,
    /// Whether the current object or array has no member yet.
    empty: bool,
}

impl<'w> JsonWriter<'w> {
    pub(crate) fn new(out: &'w mut dyn fmt::Write) -> JsonWriter<'w> {
        JsonWriter { out, depth: 0, empty: true }
    }

    /// Starts a member: the comma after the previous one, a new line, indentation, the key.
    fn member(&mut self, key: Option<&str>) -> fmt::Result {
        if self.depth > 0 {
            if !self.empty {
                self.out.write_char(',')?;
            }
            self.out.write_char('\n')?;
            for _ in 0..self.depth {
                self.out.write_str("  ")?;
            }
        }
        self.empty = false;
        if let Some(key) = key {
            write_escaped(self.out, format_args!("{key}"))?;
            self.out.write_str(" : ")?;
        }
        Ok(())
    }

    pub(crate) fn open(&mut self, key: Option<&str>, bracket: char) -> fmt::Result {
        self.member(key)?;
        self.out.write_char(bracket)?;
        self.depth += 1;
        self.empty = true;
        Ok(())
    }

    pub(crate) fn close(&mut self, bracket: char) -> fmt::Result {
        self.depth -= 1;
        if !self.empty {
            self.out.write_char('\n')?;
            for _ in 0..self.depth {
                self.out.write_str("  ")?;
            }
        }
        self.out.write_char(bracket)?;
        self.empty = false;
        Ok(())
    }

    pub(crate) fn string_field(&mut self, key: &str, value: fmt::Arguments<'_>) -> fmt::Result {
        self.member(Some(key))?;
        write_escaped(self.out, value)
    }

    pub(crate) fn string_element(&mut self, value: fmt::Arguments<'_>) -> fmt::Result {
        self.member(None)?;
        write_escaped(self.out, value)
    }

    pub(crate) fn number_field(&mut self, key: &str, value: impl Into<u128>) -> fmt::Result {
        self.member(Some(key))?;
        write!(self.out, "{}", value.into())
    }

    pub(crate) fn fixed_field(&mut self, key: &str, value: Fixed) -> fmt::Result {
        self.member(Some(key))?;
        write!(self.out, "{value}")
    }

    pub(crate) fn bool_field(&mut self, key: &str, value: bool) -> fmt::Result {
        self.member(Some(key))?;
        self.out.write_str(if value { "true" } else { "false" })
    }

    pub(crate) fn null_field(&mut self, key: &str) -> fmt::Result {
        self.member(Some(key))?;
        self.out.write_str("null")
    }
}

/// Writes a JSON string (RFC 8259 §7): quotes, with `"`, `\` and control characters escaped.
pub(crate) fn write_escaped(out: &mut dyn fmt::Write, value: fmt::Arguments<'_>) -> fmt::Result {
    struct Escaper<'a>(&'a mut dyn fmt::Write);
    impl fmt::Write for Escaper<'_> {
        fn write_str(&mut self, text: &str) -> fmt::Result {
            for c in text.chars() {
                match c {
                    '"' => self.0.write_str("\\\"")?,
                    '\\' => self.0.write_str("\\\\")?,
                    '\n' => self.0.write_str("\\n")?,
                    '\r' => self.0.write_str("\\r")?,
                    '\t' => self.0.write_str("\\t")?,
                    c if (c as u32) < 0x20 || c == '\u{7f}' => write!(self.0, "\\u{:04x}", c as u32)?,
                    c => self.0.write_char(c)?,
                }
            }
            Ok(())
        }
    }
    out.write_char('"')?;
    Escaper(out).write_fmt(value)?;
    out.write_char('"')
}

/// `"check"`: what `check=` compared (docs/checks.md §2); its mismatches
/// are in `errors_total` too.
pub(crate) fn write_check(
    json: &mut JsonWriter<'_>,
    check: &crate::pattern_check::CheckSummary,
) -> fmt::Result {
    json.open(Some("check"), '{')?;
    json.number_field("every", check.every)?;
    json.number_field("checked", check.checked)?;
    json.number_field("checked_bytes", check.checked_bytes)?;
    json.number_field("mismatches", check.mismatches)?;
    json.number_field("ns_per_check", check.ns_per_check())?;
    json.open(Some("first_mismatches"), '[')?;
    for mismatch in &check.first {
        json.open(None, '{')?;
        json.number_field("lba", mismatch.lba)?;
        json.number_field("blocks", mismatch.block_count)?;
        json.number_field("byte_offset", mismatch.byte_offset)?;
        json.number_field("device_byte", mismatch.device_byte)?;
        json.close('}')?;
    }
    json.close(']')?;
    if let Some(reason) = check.skipped {
        json.string_field("skipped", format_args!("{reason}"))?;
    }
    json.close('}')
}

/// `"errors"` by kind and `"errors_total"` (which counts `check=` mismatches too).
pub(crate) fn write_errors(
    json: &mut JsonWriter<'_>,
    errors: &[u64; IoErrorKind::ALL.len()],
    total: u64,
) -> fmt::Result {
    json.open(Some("errors"), '{')?;
    for kind in IoErrorKind::ALL {
        json.number_field(kind.name(), errors[kind.index()])?;
    }
    json.close('}')?;
    json.number_field("errors_total", total)
}

/// `"verify"`: what reading back the written blocks found (docs/writes.md §4).
pub(crate) fn write_verify(json: &mut JsonWriter<'_>, verify: &crate::written::VerifyOutcome) -> fmt::Result {
    json.open(Some("verify"), '{')?;
    json.number_field("blocks_checked", verify.blocks_checked)?;
    json.number_field("mismatches", verify.mismatches)?;
    json.number_field("read_errors", verify.read_errors)?;
    json.number_field("unknown_blocks", verify.unknown_blocks)?;
    json.open(Some("mismatch_lbas"), '[')?;
    for lba in &verify.mismatch_lbas {
        json.string_element(format_args!("{lba}"))?;
    }
    json.close(']')?;
    json.close('}')
}
