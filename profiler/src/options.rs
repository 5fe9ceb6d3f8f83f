//! The plugin's arguments (`-plugin file=libbarebench_profile.so,out=PATH,lap=HEX,...`), which
//! `barebench qemu --profile` computes from the kernel ELF's symbols.
#![forbid(unsafe_code)]

use std::ops::Range;

/// Where the meter's functions are and where the profile goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub output: String,
    /// `CpuMeter::lap`.
    pub lap: Range<u64>,
    /// `bench::cpu_cost::run_metered`'s first instruction.
    pub run_end: u64,
}

/// The argument names, as `barebench` writes them.
pub const NAMES: [&str; 4] = ["out", "lap", "lap_end", "run_end"];

impl Options {
    /// Parses `name=value` arguments; addresses in hexadecimal with or without `0x`.
    pub fn parse<'a>(arguments: impl IntoIterator<Item = &'a str>) -> Result<Options, String> {
        let mut values: [Option<&str>; NAMES.len()] = [None; NAMES.len()];
        for argument in arguments {
            let (name, value) =
                argument.split_once('=').ok_or_else(|| format!("argument {argument:?} is not name=value"))?;
            let index = NAMES
                .iter()
                .position(|known| *known == name)
                .ok_or_else(|| format!("unknown argument {name:?} (known: {})", NAMES.join(", ")))?;
            values[index] = Some(value);
        }
        let text =
            |index: usize| values[index].ok_or_else(|| format!("argument {}= is missing", NAMES[index]));
        let address = |index: usize| {
            let value = text(index)?;
            u64::from_str_radix(value.trim_start_matches("0x"), 16)
                .map_err(|_| format!("{}={value} is not a hexadecimal address", NAMES[index]))
        };
        Ok(Options { output: text(0)?.to_string(), lap: address(1)?..address(2)?, run_end: address(3)? })
    }

    /// The arguments that [`Options::parse`] reads back.
    pub fn to_arguments(&self) -> Vec<String> {
        vec![
            format!("out={}", self.output),
            format!("lap={:#x}", self.lap.start),
            format!("lap_end={:#x}", self.lap.end),
            format!("run_end={:#x}", self.run_end),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_read_back_as_written() {
        let options = Options { output: "build/p.txt".into(), lap: 0x4008_0000..0x4008_0040, run_end: 0x30 };
        let arguments = options.to_arguments();
        assert_eq!(Options::parse(arguments.iter().map(String::as_str)), Ok(options));
    }

    #[test]
    fn a_missing_or_unknown_argument_is_named() {
        assert!(Options::parse(["out=x"]).unwrap_err().contains("lap= is missing"));
        assert!(Options::parse(["colour=red"]).unwrap_err().contains("unknown argument \"colour\""));
        assert!(Options::parse(["lap"]).unwrap_err().contains("not name=value"));
    }
}
