//! SDCLK divider selection (SDHCI §2.2.14 Clock Control: v3.00 10-bit divided clock mode,
//! SDCLK = base / 2N with N = 0 meaning the base clock; v1/v2 8-bit mode, SDCLK = base / N with
//! N a power of two from 1 to 256). The result never exceeds the requested frequency.
#![forbid(unsafe_code)]

use crate::sd::error::ClockError;

/// A divider setting and the frequency it gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockSetting {
    /// The 10-bit value for Clock Control bits 15:8 (low 8) and 7:6 (high 2).
    pub divider_field: u16,
    pub sd_clock_hz: u32,
}

const MAX_V3_DIVIDER_FIELD: u32 = 0x3ff;
const MAX_V2_DIVISOR: u32 = 256;

/// The fastest SDCLK not above `target_hz` from `base_clock_hz`.
pub fn divider_for(
    base_clock_hz: u32,
    target_hz: u32,
    ten_bit_divider: bool,
) -> Result<ClockSetting, ClockError> {
    let error = |slowest_hz| ClockError { base_clock_hz, target_hz, slowest_hz };
    if target_hz == 0 || base_clock_hz == 0 {
        return Err(error(0));
    }
    if base_clock_hz <= target_hz {
        return Ok(ClockSetting { divider_field: 0, sd_clock_hz: base_clock_hz });
    }
    if ten_bit_divider {
        let n = base_clock_hz.div_ceil(2 * target_hz);
        if n > MAX_V3_DIVIDER_FIELD {
            return Err(error(base_clock_hz / (2 * MAX_V3_DIVIDER_FIELD)));
        }
        Ok(ClockSetting { divider_field: n as u16, sd_clock_hz: base_clock_hz / (2 * n) })
    } else {
        let mut divisor = 2;
        while u64::from(base_clock_hz) > u64::from(target_hz) * u64::from(divisor) {
            if divisor == MAX_V2_DIVISOR {
                return Err(error(base_clock_hz / MAX_V2_DIVISOR));
            }
            divisor *= 2;
        }
        // The 8-bit field holds divisor / 2 (0x01 = /2, 0x80 = /256).
        Ok(ClockSetting { divider_field: (divisor / 2) as u16, sd_clock_hz: base_clock_hz / divisor })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dividers_for_each_base_clock() {
        // QEMU's mailbox EMMC clock, 50 MHz (docs/hardware.md §1.6): 400 kHz -> N = 63 (396.8 kHz).
        assert_eq!(
            divider_for(50_000_000, 400_000, true),
            Ok(ClockSetting { divider_field: 63, sd_clock_hz: 396_825 })
        );
        assert_eq!(divider_for(50_000_000, 25_000_000, true).unwrap().divider_field, 1);
        assert_eq!(
            divider_for(50_000_000, 50_000_000, true),
            Ok(ClockSetting { divider_field: 0, sd_clock_hz: 50_000_000 })
        );
        // Pi 100 MHz (circle's fallback) and 200 MHz (firmware since 2018): exact dividers.
        assert_eq!(
            divider_for(100_000_000, 400_000, true).unwrap(),
            ClockSetting { divider_field: 125, sd_clock_hz: 400_000 }
        );
        assert_eq!(divider_for(100_000_000, 50_000_000, true).unwrap().divider_field, 1);
        assert_eq!(divider_for(200_000_000, 400_000, true).unwrap().divider_field, 250);
        assert_eq!(
            divider_for(200_000_000, 25_000_000, true).unwrap(),
            ClockSetting { divider_field: 4, sd_clock_hz: 25_000_000 }
        );
        // QEMU's capabilities base clock, 52 MHz: 25 MHz needs N = 2 (13 MHz) rather than
        // 26 MHz, which would overclock a default-speed card.
        assert_eq!(
            divider_for(52_000_000, 25_000_000, true).unwrap(),
            ClockSetting { divider_field: 2, sd_clock_hz: 13_000_000 }
        );
        assert_eq!(divider_for(52_000_000, 50_000_000, true).unwrap().sd_clock_hz, 26_000_000);
        // QEMU answers 700 MHz for EMMC2 (id 12): 400 kHz still fits in 10 bits.
        let emmc2 = divider_for(700_000_000, 400_000, true).unwrap();
        assert_eq!(emmc2.divider_field, 875);
        assert!(emmc2.sd_clock_hz <= 400_000);
    }

    #[test]
    fn eight_bit_mode_uses_powers_of_two() {
        // sdhci-pci with spec version 2: 52 MHz / 256 = 203 kHz for identification.
        assert_eq!(
            divider_for(52_000_000, 400_000, false).unwrap(),
            ClockSetting { divider_field: 0x80, sd_clock_hz: 203_125 }
        );
        assert_eq!(
            divider_for(52_000_000, 25_000_000, false).unwrap(),
            ClockSetting { divider_field: 0x02, sd_clock_hz: 13_000_000 }
        );
        assert_eq!(
            divider_for(50_000_000, 25_000_000, false).unwrap(),
            ClockSetting { divider_field: 0x01, sd_clock_hz: 25_000_000 }
        );
    }

    #[test]
    fn impossible_targets_are_errors() {
        assert_eq!(
            divider_for(200_000_000, 50_000, true),
            Err(ClockError { base_clock_hz: 200_000_000, target_hz: 50_000, slowest_hz: 97_751 })
        );
        assert!(divider_for(200_000_000, 400_000, false).is_err());
        assert!(divider_for(0, 400_000, true).is_err());
        assert!(divider_for(50_000_000, 0, true).is_err());
    }
}
