//! Sizes, durations and fixed-point numbers as the command line takes them and the console prints them (docs/architecture.md "Configuration", "Output").
//!
//! Everything is integer arithmetic: a fixed-point value is an integer count of `10^-decimals`
//! units, so the same text comes out on the host and on the target.

use core::fmt;

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
pub const GIB: u64 = 1024 * MIB;
pub const TIB: u64 = 1024 * GIB;

pub const NS_PER_US: u64 = 1_000;
pub const NS_PER_MS: u64 = 1_000_000;
pub const NS_PER_S: u64 = 1_000_000_000;

/// Parses a size: plain bytes, or a number with a binary suffix k/m/g/t (either case).
pub fn parse_size_bytes(text: &str) -> Option<u64> {
    let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    if digits_end == 0 {
        return None;
    }
    let number: u64 = text[..digits_end].parse().ok()?;
    let multiplier = match &text[digits_end..] {
        "" => 1,
        "k" | "K" => KIB,
        "m" | "M" => MIB,
        "g" | "G" => GIB,
        "t" | "T" => TIB,
        _ => return None,
    };
    number.checked_mul(multiplier)
}

/// Parses a duration: a number followed by `s`, `ms` or `min` (minutes, for long runs such as
/// sustained writes); a bare `0` is accepted too.
pub fn parse_duration_ns(text: &str) -> Option<u64> {
    if text == "0" {
        return Some(0);
    }
    let (digits, ns_per_unit) = if let Some(digits) = text.strip_suffix("ms") {
        (digits, NS_PER_MS)
    } else if let Some(digits) = text.strip_suffix("min") {
        (digits, 60 * NS_PER_S)
    } else if let Some(digits) = text.strip_suffix('s') {
        (digits, NS_PER_S)
    } else {
        return None;
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(ns_per_unit)
}

/// A size as the command line writes it: `1m`, `4k`, `2g`, or plain bytes when no suffix is exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeText(pub u64);

impl fmt::Display for SizeText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0;
        for (unit, suffix) in [(TIB, "t"), (GIB, "g"), (MIB, "m"), (KIB, "k")] {
            if bytes >= unit && bytes.is_multiple_of(unit) {
                return write!(f, "{}{suffix}", bytes / unit);
            }
        }
        write!(f, "{bytes}")
    }
}

/// A byte count for people: in the largest binary unit that divides it exactly (`64 MiB`,
/// `3584 KiB`), else from 1 MiB up in MiB with one decimal (`3.0 MiB`), else in bytes
/// (`1536 bytes`). The one formatter of sizes in messages (the kernel's, the host tool's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0;
        for (unit, name) in [(TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")] {
            if bytes >= unit && bytes.is_multiple_of(unit) {
                return write!(f, "{} {name}", bytes / unit);
            }
        }
        if bytes >= MIB {
            let tenths = (u128::from(bytes) * 10 + u128::from(MIB / 2)) / u128::from(MIB);
            return write!(f, "{} MiB", Fixed::new(tenths, 1));
        }
        write!(f, "{bytes} bytes")
    }
}

/// A duration as the command line writes it: `2s`, `500ms` (fio reads both forms too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurationText(pub u64);

impl fmt::Display for DurationText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        if ns.is_multiple_of(NS_PER_S) {
            write!(f, "{}s", ns / NS_PER_S)
        } else if ns.is_multiple_of(NS_PER_MS) {
            write!(f, "{}ms", ns / NS_PER_MS)
        } else if ns.is_multiple_of(NS_PER_US) {
            write!(f, "{}us", ns / NS_PER_US)
        } else {
            write!(f, "{}ns", ns)
        }
    }
}

/// `value × 10^-decimals`, printed with exactly `decimals` digits after the point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixed {
    pub value: u128,
    pub decimals: u32,
}

impl Fixed {
    pub fn new(value: u128, decimals: u32) -> Fixed {
        Fixed { value, decimals }
    }

    /// The same quantity with fewer decimals, rounded half up.
    pub fn rounded_to(self, decimals: u32) -> Fixed {
        if decimals >= self.decimals {
            let scale = 10u128.pow(decimals - self.decimals);
            return Fixed::new(self.value.saturating_mul(scale), decimals);
        }
        let scale = 10u128.pow(self.decimals - decimals);
        Fixed::new(self.value / scale + u128::from(self.value % scale >= scale / 2), decimals)
    }
}

impl fmt::Display for Fixed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.decimals == 0 {
            return pad(f, format_args!("{}", self.value));
        }
        let scale = 10u128.pow(self.decimals);
        let fraction_width = self.decimals as usize;
        pad(f, format_args!("{}.{:0fraction_width$}", self.value / scale, self.value % scale))
    }
}

/// Writes `arguments` honouring the formatter's width, fill and alignment (numbers right-aligned
/// by default, as in tables). Texts here are at most a few dozen characters.
fn pad(f: &mut fmt::Formatter<'_>, arguments: fmt::Arguments<'_>) -> fmt::Result {
    if f.width().is_none() {
        return f.write_fmt(arguments);
    }
    let mut buffer = TextBuffer::<64>::new();
    fmt::write(&mut buffer, arguments)?;
    let width = f.width().unwrap_or(0);
    match f.align() {
        Some(fmt::Alignment::Left) => write!(f, "{:<width$}", buffer.as_str()),
        Some(fmt::Alignment::Center) => write!(f, "{:^width$}", buffer.as_str()),
        _ => write!(f, "{:>width$}", buffer.as_str()),
    }
}

/// A latency for tables, from a value in thousandths of a nanosecond: µs with one decimal below
/// 10 ms, whole µs from 10 ms up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencyMicros {
    pub milli_ns: u128,
}

/// Latencies from this value up are printed in whole microseconds.
const WHOLE_MICROS_FROM_MILLI_NS: u128 = 10 * NS_PER_MS as u128 * 1000;

impl fmt::Display for LatencyMicros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // 1 µs = 10^6 milli-ns.
        let fixed = Fixed::new(self.milli_ns, 6);
        let shown = if self.milli_ns < WHOLE_MICROS_FROM_MILLI_NS {
            fixed.rounded_to(1)
        } else {
            fixed.rounded_to(0)
        };
        write!(f, "{shown:>width$}", width = f.width().unwrap_or(0))
    }
}

/// A small stack buffer that implements `fmt::Write`; text beyond its capacity is an error.
pub struct TextBuffer<const CAPACITY: usize> {
    bytes: [u8; CAPACITY],
    length: usize,
}

impl<const CAPACITY: usize> TextBuffer<CAPACITY> {
    pub fn new() -> Self {
        TextBuffer { bytes: [0; CAPACITY], length: 0 }
    }

    pub fn as_str(&self) -> &str {
        // Only whole `&str`s are ever copied in, so the bytes are valid UTF-8.
        core::str::from_utf8(&self.bytes[..self.length]).unwrap_or("")
    }

    /// The text's bytes, without the UTF-8 check of [`TextBuffer::as_str`].
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.length]
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.length
    }

    pub fn is_empty(&self) -> bool {
        self.length == 0
    }
}

impl<const CAPACITY: usize> Default for TextBuffer<CAPACITY> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const CAPACITY: usize> fmt::Write for TextBuffer<CAPACITY> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let end = self.length + text.len();
        if end > CAPACITY {
            return Err(fmt::Error);
        }
        self.bytes[self.length..end].copy_from_slice(text.as_bytes());
        self.length = end;
        Ok(())
    }
}

/// Nanoseconds as seconds with one decimal (`3.0 s`), rounded half up.
pub struct Seconds(pub u64);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tenths = (u128::from(self.0) + u128::from(NS_PER_S / 20)) / u128::from(NS_PER_S / 10);
        write!(f, "{} s", Fixed::new(tenths, 1))
    }
}

/// Thousandths of a MiB/s with one decimal (`160.4`), as the tables print MiB/s.
pub struct MibPerS(pub u64);

impl fmt::Display for MibPerS {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Fixed::new(u128::from(self.0), 3).rounded_to(1), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn byte_sizes_read_in_the_largest_exact_unit() {
        assert_eq!(format!("{}", ByteSize(64 << 20)), "64 MiB");
        assert_eq!(format!("{}", ByteSize(4 << 30)), "4 GiB");
        assert_eq!(format!("{}", ByteSize(2 << 40)), "2 TiB");
        assert_eq!(format!("{}", ByteSize(1536)), "1536 bytes");
        assert_eq!(format!("{}", ByteSize((3 << 20) + (1 << 19))), "3584 KiB");
        assert_eq!(format!("{}", ByteSize((3 << 20) + 512)), "3.0 MiB");
        assert_eq!(format!("{}", ByteSize((3 << 20) + 300_000)), "3.3 MiB");
        assert_eq!(format!("{}", ByteSize(3 << 10)), "3 KiB");
        assert_eq!(format!("{}", ByteSize(100)), "100 bytes");
        assert_eq!(format!("{}", ByteSize(0)), "0 bytes");
    }

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size_bytes("512"), Some(512));
        assert_eq!(parse_size_bytes("4k"), Some(4096));
        assert_eq!(parse_size_bytes("4K"), Some(4096));
        assert_eq!(parse_size_bytes("1m"), Some(MIB));
        assert_eq!(parse_size_bytes("2g"), Some(2 * GIB));
        assert_eq!(parse_size_bytes("1t"), Some(TIB));
        assert_eq!(parse_size_bytes("0"), Some(0));
        for bad in ["", "k", "4kb", "4 k", "-1", "1.5m", "99999999999999999999", "16777216t"] {
            assert_eq!(parse_size_bytes(bad), None, "{bad}");
        }
    }

    #[test]
    fn durations_take_s_ms_and_min() {
        assert_eq!(parse_duration_ns("10s"), Some(10 * NS_PER_S));
        assert_eq!(parse_duration_ns("500ms"), Some(500 * NS_PER_MS));
        assert_eq!(parse_duration_ns("30min"), Some(1800 * NS_PER_S));
        assert_eq!(parse_duration_ns("0"), Some(0));
        assert_eq!(parse_duration_ns("0s"), Some(0));
        for bad in ["10", "ten", "s", "ms", "min", "1.5s", "10m", "1.5min", "-1s", "99999999999999999999s"] {
            assert_eq!(parse_duration_ns(bad), None, "{bad}");
        }
    }

    #[test]
    fn sizes_and_durations_print_as_they_parse() {
        for (bytes, text) in [(4096, "4k"), (MIB, "1m"), (3 * GIB, "3g"), (1536, "1536"), (0, "0")] {
            assert_eq!(format!("{}", SizeText(bytes)), text);
        }
        assert_eq!(format!("{}", DurationText(2 * NS_PER_S)), "2s");
        assert_eq!(format!("{}", DurationText(500 * NS_PER_MS)), "500ms");
        assert_eq!(format!("{}", DurationText(1500)), "1500ns");
    }

    #[test]
    fn fixed_point_prints_exact_decimals_and_rounds_half_up() {
        assert_eq!(format!("{}", Fixed::new(13_579_142_086, 6)), "13579.142086");
        assert_eq!(format!("{}", Fixed::new(5, 3)), "0.005");
        assert_eq!(format!("{}", Fixed::new(42, 0)), "42");
        assert_eq!(format!("{:>8}", Fixed::new(12_345, 2)), "  123.45");
        assert_eq!(Fixed::new(1_250, 3).rounded_to(1), Fixed::new(13, 1));
        assert_eq!(Fixed::new(1_249, 3).rounded_to(1), Fixed::new(12, 1));
        assert_eq!(Fixed::new(7, 1).rounded_to(3), Fixed::new(700, 3));
    }

    #[test]
    fn latencies_switch_to_whole_microseconds_at_10_ms() {
        let us = |ns: u128| format!("{}", LatencyMicros { milli_ns: ns * 1000 });
        assert_eq!(us(71_806), "71.8");
        assert_eq!(us(71_850), "71.9");
        assert_eq!(us(9_999_940), "9999.9");
        assert_eq!(us(10_000_000), "10000");
        assert_eq!(us(36_305_121), "36305");
        assert_eq!(format!("{:>9}", LatencyMicros { milli_ns: 1_500_000 }), "      1.5");
    }

    #[test]
    fn text_buffer_refuses_overflow() {
        use core::fmt::Write;
        let mut buffer = TextBuffer::<4>::new();
        assert!(buffer.write_str("abcd").is_ok());
        assert!(buffer.write_str("e").is_err());
        assert_eq!(buffer.as_str(), "abcd");
    }

    #[test]
    fn seconds_and_rates_print_with_one_decimal() {
        assert_eq!(format!("{}", Seconds(3_049_999_999)), "3.0 s");
        assert_eq!(format!("{}", Seconds(3_050_000_000)), "3.1 s");
        assert_eq!(format!("{}", MibPerS(160_449)), "160.4");
        assert_eq!(format!("{}", MibPerS(160_450)), "160.5");
    }
}
