//! SD card registers and responses decoded: CID, CSD (versions 1.0, 2.0, 3.0), SCR, SD Status,
//! OCR, the R1 card status and the CMD6 switch status (SD Physical Layer Simplified Specification
//! v9.00: §5.1 OCR, §5.2 CID, §5.3 CSD, §5.6 SCR, §4.10.1 card status, §4.10.2 SD Status,
//! §4.3.10 switch function status).
#![forbid(unsafe_code)]

use core::fmt;

/// Bits `high..=low` of a 128-bit register (the specification numbers bits from the LSB).
fn bits128(value: u128, high: u32, low: u32) -> u128 {
    (value >> low) & ((1u128 << (high - low + 1)) - 1)
}

fn bits64(value: u64, high: u32, low: u32) -> u64 {
    (value >> low) & ((1u64 << (high - low + 1)) - 1)
}

/// Bits `high..=low` of a register transferred MSB first in `bytes` (SD Status, switch status:
/// byte 0 holds the top bits). `high - low` must be below 32.
fn bits_be(bytes: &[u8], high: usize, low: usize) -> u32 {
    let total_bits = bytes.len() * 8;
    let mut value = 0u32;
    for bit in (low..=high).rev() {
        let from_top = total_bits - 1 - bit;
        let set = (bytes[from_top / 8] >> (7 - from_top % 8)) & 1;
        value = (value << 1) | u32::from(set);
    }
    value
}

/// Printable ASCII for identity strings; anything else shows as `?`.
fn ascii(byte: u8) -> char {
    if (0x20..0x7f).contains(&byte) {
        byte as char
    } else {
        '?'
    }
}

/// The Card Identification register (§5.2). `raw` is the full 128-bit register; the CRC byte is
/// zero when it came through an SDHCI R2 response, which strips it (SDHCI §2.2.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cid {
    pub raw: u128,
}

impl Cid {
    /// Manufacturer ID (MID, bits 127:120), assigned by the SD Association.
    pub fn manufacturer_id(&self) -> u8 {
        bits128(self.raw, 127, 120) as u8
    }

    /// OEM/application ID (OID, bits 119:104): two ASCII characters.
    pub fn oem_id(&self) -> [u8; 2] {
        let oid = bits128(self.raw, 119, 104) as u16;
        oid.to_be_bytes()
    }

    /// Product name (PNM, bits 103:64): five ASCII characters.
    pub fn product_name(&self) -> [u8; 5] {
        let pnm = bits128(self.raw, 103, 64) as u64;
        let bytes = pnm.to_be_bytes();
        [bytes[3], bytes[4], bytes[5], bytes[6], bytes[7]]
    }

    /// Product revision (PRV, bits 63:56) as (major, minor) BCD digits.
    pub fn product_revision(&self) -> (u8, u8) {
        let prv = bits128(self.raw, 63, 56) as u8;
        (prv >> 4, prv & 0xf)
    }

    /// Product serial number (PSN, bits 55:24).
    pub fn serial_number(&self) -> u32 {
        bits128(self.raw, 55, 24) as u32
    }

    /// Manufacturing date (MDT, bits 19:8): (year, month), year counted from 2000.
    pub fn manufacturing_date(&self) -> (u16, u8) {
        let mdt = bits128(self.raw, 19, 8) as u16;
        (2000 + (mdt >> 4), (mdt & 0xf) as u8)
    }

    /// The identity as one line: `MID 0x03 OEM "SD" product "SN512" rev 8.0 serial 0x... made 2021-07`.
    pub fn describe(&self) -> CidDisplay<'_> {
        CidDisplay(self)
    }
}

pub struct CidDisplay<'a>(&'a Cid);

impl fmt::Display for CidDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cid = self.0;
        let oem = cid.oem_id();
        let name = cid.product_name();
        let (major, minor) = cid.product_revision();
        let (year, month) = cid.manufacturing_date();
        write!(f, "MID {:#04x} OEM \"", cid.manufacturer_id())?;
        for byte in oem {
            write!(f, "{}", ascii(byte))?;
        }
        write!(f, "\" product \"")?;
        for byte in name {
            write!(f, "{}", ascii(byte))?;
        }
        write!(f, "\" rev {major}.{minor} serial {:#010x} made {year}-{month:02}", cid.serial_number())
    }
}

/// The CSD structure version (CSD_STRUCTURE, bits 127:126).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CsdVersion {
    /// 1.0: Standard Capacity (byte addressing).
    V1,
    /// 2.0: High and Extended Capacity (block addressing, C_SIZE 22 bits).
    V2,
    /// 3.0: Ultra Capacity (C_SIZE 28 bits).
    V3,
}

impl CsdVersion {
    pub fn name(self) -> &'static str {
        match self {
            CsdVersion::V1 => "1.0",
            CsdVersion::V2 => "2.0",
            CsdVersion::V3 => "3.0",
        }
    }
}

/// The card capacity class (§5.3.1; SDHC up to 32 GB, SDXC up to 2 TB, SDUC beyond).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapacityClass {
    Sdsc,
    Sdhc,
    Sdxc,
    Sduc,
}

impl CapacityClass {
    pub fn name(self) -> &'static str {
        match self {
            CapacityClass::Sdsc => "SDSC",
            CapacityClass::Sdhc => "SDHC",
            CapacityClass::Sdxc => "SDXC",
            CapacityClass::Sduc => "SDUC",
        }
    }

    /// Whether the card takes block numbers (not byte offsets) as data addresses (§4.3.14).
    pub fn block_addressed(self) -> bool {
        !matches!(self, CapacityClass::Sdsc)
    }
}

/// A CSD that cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("CSD {raw:#034x} has reserved CSD_STRUCTURE {structure}")]
pub struct CsdError {
    pub raw: u128,
    pub structure: u8,
}

/// The Card-Specific Data register (§5.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Csd {
    pub raw: u128,
    pub version: CsdVersion,
}

/// SDHC's largest C_SIZE (§5.3.3: "0x00FF5F or less" for SDHC, i.e. up to 32 GB).
const SDHC_MAX_C_SIZE: u32 = 0xff5f;

impl Csd {
    pub fn decode(raw: u128) -> Result<Csd, CsdError> {
        let structure = bits128(raw, 127, 126) as u8;
        let version = match structure {
            0 => CsdVersion::V1,
            1 => CsdVersion::V2,
            2 => CsdVersion::V3,
            _ => return Err(CsdError { raw, structure }),
        };
        Ok(Csd { raw, version })
    }

    /// TRAN_SPEED (bits 103:96): 0x32 = 25 MHz, 0x5A = 50 MHz (§5.3.2 Table 5-6).
    pub fn transfer_speed_code(&self) -> u8 {
        bits128(self.raw, 103, 96) as u8
    }

    /// Card command classes (CCC, bits 95:84); bit n set = class n supported.
    pub fn command_classes(&self) -> u16 {
        bits128(self.raw, 95, 84) as u16
    }

    /// READ_BL_LEN (bits 83:80) as bytes (2^n).
    pub fn read_block_bytes(&self) -> u32 {
        1 << bits128(self.raw, 83, 80)
    }

    /// C_SIZE: bits 73:62 (1.0), 69:48 (2.0), 75:48 (3.0).
    pub fn device_size(&self) -> u32 {
        match self.version {
            CsdVersion::V1 => bits128(self.raw, 73, 62) as u32,
            CsdVersion::V2 => bits128(self.raw, 69, 48) as u32,
            CsdVersion::V3 => bits128(self.raw, 75, 48) as u32,
        }
    }

    /// The user data area in bytes (§5.3.2: (C_SIZE + 1) × 2^(C_SIZE_MULT + 2) × 2^READ_BL_LEN;
    /// §5.3.3, §5.3.4: (C_SIZE + 1) × 512 KiB).
    pub fn capacity_bytes(&self) -> u64 {
        let c_size = u64::from(self.device_size());
        match self.version {
            CsdVersion::V1 => {
                let multiplier = bits128(self.raw, 49, 47) as u32;
                (c_size + 1) << (multiplier + 2) << bits128(self.raw, 83, 80) as u32
            }
            CsdVersion::V2 | CsdVersion::V3 => (c_size + 1) * 512 * 1024,
        }
    }

    pub fn capacity_class(&self) -> CapacityClass {
        match self.version {
            CsdVersion::V1 => CapacityClass::Sdsc,
            CsdVersion::V2 if self.device_size() <= SDHC_MAX_C_SIZE => CapacityClass::Sdhc,
            CsdVersion::V2 => CapacityClass::Sdxc,
            CsdVersion::V3 => CapacityClass::Sduc,
        }
    }

    /// Whether command class 10 (switch, CMD6) is supported.
    pub fn supports_switch(&self) -> bool {
        self.command_classes() & (1 << 10) != 0
    }
}

/// The SD Configuration Register (§5.6), 64 bits as read with ACMD51 (MSB first on the bus).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scr {
    pub raw: u64,
}

/// CMD_SUPPORT bit for CMD23 SET_BLOCK_COUNT (§5.6, bit 33).
const SCR_CMD23_SUPPORT: u64 = 1 << 33;
/// CMD_SUPPORT bit for CMD48/CMD49, the extension register commands that reach the Performance
/// Enhancement register with its cache fields (§5.6, bit 34; Linux `drivers/mmc/core/sd.c` names
/// it `SD_SCR_CMD48_SUPPORT`).
const SCR_EXTENSION_REGISTER_SUPPORT: u64 = 1 << 34;

/// Why a flush goes to no card: a card without extension registers has no cache it could
/// report; a card with them has its cache off, since Cache Enable is 0 after power-up and this
/// driver never sets it (SD Physical Layer 6.00 Performance Enhancement function; Linux enables it
/// in `sd_enable_cache()`, this driver does not).
pub const NO_CACHE_EXTENSION: &str = "the card has no extension registers (SCR CMD48/49 bit clear)";
pub const CACHE_NEVER_ENABLED: &str =
    "the card's cache is off (Cache Enable is 0 after power-up and never set)";

impl Scr {
    pub fn from_bytes(bytes: [u8; 8]) -> Scr {
        Scr { raw: u64::from_be_bytes(bytes) }
    }

    /// The physical layer version the card implements, from SD_SPEC, SD_SPEC3, SD_SPEC4 and
    /// SD_SPECX (§5.6 Table 5-17).
    pub fn spec_version(&self) -> &'static str {
        let spec = bits64(self.raw, 59, 56);
        let spec3 = bits64(self.raw, 47, 47);
        let spec4 = bits64(self.raw, 42, 42);
        let specx = bits64(self.raw, 41, 38);
        match (spec, spec3, spec4, specx) {
            (0, _, _, _) => "1.0x",
            (1, _, _, _) => "1.10",
            (2, 0, _, _) => "2.00",
            (2, 1, 0, 0) => "3.0x",
            (2, 1, 1, 0) => "4.xx",
            (2, 1, _, 1) => "5.xx",
            (2, 1, _, 2) => "6.xx",
            (2, 1, _, 3) => "7.xx",
            (2, 1, _, 4) => "8.xx",
            (2, 1, _, 5) => "9.xx",
            _ => "unknown",
        }
    }

    /// SD_SPEC ≥ 1 (version 1.10 or later): CMD6 exists.
    pub fn supports_switch(&self) -> bool {
        bits64(self.raw, 59, 56) >= 1
    }

    /// SD_BUS_WIDTHS bit 2 (§5.6 Table 5-18).
    pub fn supports_4_bit_bus(&self) -> bool {
        bits64(self.raw, 51, 48) & 0b0100 != 0
    }

    pub fn supports_cmd23(&self) -> bool {
        self.raw & SCR_CMD23_SUPPORT != 0
    }

    /// Whether the card takes CMD48/CMD49 (extension registers, SD 4.x and later).
    pub fn supports_extension_registers(&self) -> bool {
        self.raw & SCR_EXTENSION_REGISTER_SUPPORT != 0
    }

    /// Why flushes are only counted on this card (see [`NO_CACHE_EXTENSION`]).
    pub fn no_flush_reason(&self) -> &'static str {
        if self.supports_extension_registers() {
            CACHE_NEVER_ENABLED
        } else {
            NO_CACHE_EXTENSION
        }
    }
}

/// The SD Status register (§4.10.2), 512 bits read with ACMD13.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdStatus {
    pub bytes: [u8; 64],
}

impl SdStatus {
    /// SPEED_CLASS (bits 447:440) as the class number: 0, 2, 4, 6 or 10 (Table 4-44).
    pub fn speed_class(&self) -> Option<u8> {
        match bits_be(&self.bytes, 447, 440) {
            0 => Some(0),
            1 => Some(2),
            2 => Some(4),
            3 => Some(6),
            4 => Some(10),
            _ => None,
        }
    }

    /// UHS_SPEED_GRADE (bits 399:396): 0 none, 1 = U1, 3 = U3 (Table 4-50).
    pub fn uhs_speed_grade(&self) -> u8 {
        bits_be(&self.bytes, 399, 396) as u8
    }

    /// VIDEO_SPEED_CLASS (bits 391:384): 0, 6, 10, 30, 60 or 90 (Table 4-52).
    pub fn video_speed_class(&self) -> u8 {
        bits_be(&self.bytes, 391, 384) as u8
    }

    /// APP_PERF_CLASS (bits 339:336): 0 none, 1 = A1, 2 = A2 (Table 4-54).
    pub fn application_class(&self) -> u8 {
        bits_be(&self.bytes, 339, 336) as u8
    }

    /// DAT_BUS_WIDTH (bits 511:510): 0 = 1 bit, 2 = 4 bits.
    pub fn bus_width_bits(&self) -> u8 {
        match bits_be(&self.bytes, 511, 510) {
            2 => 4,
            _ => 1,
        }
    }

    /// The classes as a reader expects them: `speed class 10, U3, V30, A2`.
    pub fn describe(&self) -> SdStatusDisplay<'_> {
        SdStatusDisplay(self)
    }
}

pub struct SdStatusDisplay<'a>(&'a SdStatus);

impl fmt::Display for SdStatusDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.0;
        match status.speed_class() {
            Some(class) => write!(f, "speed class {class}")?,
            None => write!(f, "speed class reserved")?,
        }
        match status.uhs_speed_grade() {
            0 => write!(f, ", UHS grade none")?,
            grade => write!(f, ", UHS grade U{grade}")?,
        }
        match status.video_speed_class() {
            0 => write!(f, ", video class none")?,
            class => write!(f, ", video class V{class}")?,
        }
        match status.application_class() {
            0 => write!(f, ", application class none"),
            class => write!(f, ", application class A{class}"),
        }
    }
}

/// OCR bits (§5.1).
pub mod ocr {
    /// Power-up finished (busy bit, active high).
    pub const POWER_UP_DONE: u32 = 1 << 31;
    /// Card Capacity Status: SDHC/SDXC/SDUC.
    pub const CARD_CAPACITY_STATUS: u32 = 1 << 30;
    /// Switching to 1.8 V accepted.
    pub const SWITCHING_TO_1V8_ACCEPTED: u32 = 1 << 24;
    /// The 2.7-3.6 V window (bits 23:15).
    pub const VOLTAGE_WINDOW_3V3: u32 = 0x00ff_8000;
    /// ACMD41 argument bits: host capacity support, SDXC power control, 1.8 V request.
    pub const HOST_CAPACITY_SUPPORT: u32 = 1 << 30;
    pub const SDXC_POWER_CONTROL: u32 = 1 << 28;
    pub const SWITCHING_TO_1V8_REQUEST: u32 = 1 << 24;
}

/// The card status in an R1 response (§4.10.1 Table 4-42).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CardStatus(pub u32);

impl CardStatus {
    /// Every bit that reports an error (type E in Table 4-42): OUT_OF_RANGE, ADDRESS_ERROR,
    /// BLOCK_LEN_ERROR, ERASE_SEQ_ERROR, ERASE_PARAM, WP_VIOLATION, LOCK_UNLOCK_FAILED,
    /// COM_CRC_ERROR, ILLEGAL_COMMAND, CARD_ECC_FAILED, CC_ERROR, ERROR, CSD_OVERWRITE,
    /// WP_ERASE_SKIP, AKE_SEQ_ERROR.
    pub const ERROR_BITS: u32 = 0xfdf9_8008;
    pub const OUT_OF_RANGE: u32 = 1 << 31;
    pub const ILLEGAL_COMMAND: u32 = 1 << 22;
    pub const READY_FOR_DATA: u32 = 1 << 8;
    pub const APP_CMD: u32 = 1 << 5;

    pub fn errors(&self) -> u32 {
        self.0 & Self::ERROR_BITS
    }

    /// CURRENT_STATE (bits 12:9).
    pub fn state(&self) -> CardState {
        CardState::from_bits((self.0 >> 9) & 0xf)
    }
}

/// CURRENT_STATE values (§4.10.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CardState {
    Idle,
    Ready,
    Identification,
    StandBy,
    Transfer,
    SendingData,
    ReceiveData,
    Programming,
    Disconnect,
    Reserved(u8),
}

impl CardState {
    pub fn from_bits(bits: u32) -> CardState {
        match bits {
            0 => CardState::Idle,
            1 => CardState::Ready,
            2 => CardState::Identification,
            3 => CardState::StandBy,
            4 => CardState::Transfer,
            5 => CardState::SendingData,
            6 => CardState::ReceiveData,
            7 => CardState::Programming,
            8 => CardState::Disconnect,
            other => CardState::Reserved(other as u8),
        }
    }
}

/// The 512-bit status CMD6 returns (§4.3.10.4 Table 4-13).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchStatus {
    pub bytes: [u8; 64],
}

/// Access modes of function group 1 (§4.3.10.3): the function numbers for CMD6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusSpeedFunction {
    /// Default Speed / SDR12 (25 MHz).
    DefaultSpeed = 0,
    /// High Speed / SDR25 (50 MHz).
    HighSpeed = 1,
    Sdr50 = 2,
    Sdr104 = 3,
    Ddr50 = 4,
}

impl SwitchStatus {
    /// Function group 1 support bits (bits 415:400): bit n = function n.
    pub fn group1_support(&self) -> u16 {
        bits_be(&self.bytes, 415, 400) as u16
    }

    /// The function group 1 result (bits 379:376): the function selected, 0xF on error.
    pub fn group1_selection(&self) -> u8 {
        bits_be(&self.bytes, 379, 376) as u8
    }

    pub fn supports(&self, function: BusSpeedFunction) -> bool {
        self.group1_support() & (1 << function as u16) != 0
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    fn hex128(text: &str) -> u128 {
        u128::from_str_radix(text, 16).unwrap()
    }

    // Published dumps from Linux sysfs (cid/csd/scr files, with the CRC byte):
    // - SanDisk "SN512" 512 GB microSDXC: hakandundar34coding/system-monitoring-center #45
    //   (cid 035344534e35313280fff7b17b015700, csd 400e0032db79000ee5b77f800a404000,
    //   scr 0245848700000000, date 07/2021, manfid 0x03, oemid 0x5344, hwrev 0x8, fwrev 0x0).
    // - "SD16G" 16 GB SDHC (MID 0x27): armbian/build pull request #246
    //   (cid 275048534431364730da89b82900fb61, csd 400e00325b59000073a77f800a4000eb,
    //   scr 0235800201000000, date 11/2015, oemid 0x5048, serial 0xda89b829, hwrev 0x3).
    // - SanDisk "SN128" 128 GB SDXC: ironsheep/P2-uSD-FS DOCs/cards/sandisk-sn128-128gb.md
    //   (CSD 400e0032db790003b8ab7f800a40405f, C_SIZE 0x3B8AB).
    // - Transcend "USD" card: linux-automation/usbsdmux pull request #62
    //   (CID 744a605553442020104182bbc7010600, SCR 0225800000000000).

    #[test]
    fn cid_of_a_sandisk_sdxc_card() {
        let cid = Cid { raw: hex128("035344534e35313280fff7b17b015700") };
        assert_eq!(cid.manufacturer_id(), 0x03);
        assert_eq!(&cid.oem_id(), b"SD");
        assert_eq!(&cid.product_name(), b"SN512");
        assert_eq!(cid.product_revision(), (8, 0));
        assert_eq!(cid.serial_number(), 0xfff7_b17b);
        assert_eq!(cid.manufacturing_date(), (2021, 7));
        assert_eq!(
            cid.describe().to_string(),
            "MID 0x03 OEM \"SD\" product \"SN512\" rev 8.0 serial 0xfff7b17b made 2021-07"
        );
    }

    #[test]
    fn cid_of_an_sdhc_card_and_a_transcend_card() {
        let cid = Cid { raw: hex128("275048534431364730da89b82900fb61") };
        assert_eq!(cid.manufacturer_id(), 0x27);
        assert_eq!(&cid.oem_id(), b"PH");
        assert_eq!(&cid.product_name(), b"SD16G");
        assert_eq!(cid.product_revision(), (3, 0));
        assert_eq!(cid.serial_number(), 0xda89_b829);
        assert_eq!(cid.manufacturing_date(), (2015, 11));
        let transcend = Cid { raw: hex128("744a605553442020104182bbc7010600") };
        assert_eq!(transcend.manufacturer_id(), 0x74);
        assert_eq!(&transcend.product_name(), b"USD  ");
        assert_eq!(transcend.serial_number(), 1_099_086_791);
        assert_eq!(transcend.product_revision(), (1, 0));
        // A non-printable OID byte (0x60 is printable, so build one that is not).
        let odd = Cid { raw: 0x0001_0000_0000_0000_0000_0000_0000_0000 };
        assert!(odd.describe().to_string().contains("OEM \"??\""));
    }

    #[test]
    fn qemu_cid_as_an_sdhci_r2_response() {
        // QEMU's card (hw/sd/sd.c sd_set_cid): MID 0xaa, OID "XY", PNM "QEMU!", PRV 0x01,
        // PSN 0xdeadbeef, MDT 2006-02. The SDHCI response registers hold bits 127:8.
        let register = u128::from_be_bytes([
            0xaa, b'X', b'Y', b'Q', b'E', b'M', b'U', b'!', 0x01, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x62, 0x3f,
        ]);
        let response = register >> 8;
        let cid = Cid { raw: response << 8 };
        assert_eq!(cid.manufacturer_id(), 0xaa);
        assert_eq!(&cid.oem_id(), b"XY");
        assert_eq!(&cid.product_name(), b"QEMU!");
        assert_eq!(cid.product_revision(), (0, 1));
        assert_eq!(cid.serial_number(), 0xdead_beef);
        assert_eq!(cid.manufacturing_date(), (2006, 2));
    }

    #[test]
    fn csd_version_2_capacities_and_classes() {
        let sdxc = Csd::decode(hex128("400e0032db79000ee5b77f800a404000")).unwrap();
        assert_eq!(sdxc.version, CsdVersion::V2);
        assert_eq!(sdxc.device_size(), 0x0e_e5b7);
        assert_eq!(sdxc.capacity_bytes(), 976_312 * 524_288);
        assert_eq!(sdxc.capacity_class(), CapacityClass::Sdxc);
        assert_eq!(sdxc.transfer_speed_code(), 0x32);
        assert_eq!(sdxc.command_classes(), 0xdb7);
        assert!(sdxc.supports_switch());
        assert_eq!(sdxc.read_block_bytes(), 512);

        let sdhc = Csd::decode(hex128("400e00325b59000073a77f800a4000eb")).unwrap();
        assert_eq!(sdhc.device_size(), 0x73a7);
        assert_eq!(sdhc.capacity_bytes(), 15_523_119_104);
        assert_eq!(sdhc.capacity_class(), CapacityClass::Sdhc);
        assert_eq!(sdhc.command_classes(), 0x5b5);
        assert!(sdhc.capacity_class().block_addressed());

        let sn128 = Csd::decode(hex128("400e0032db790003b8ab7f800a40405f")).unwrap();
        assert_eq!(sn128.device_size(), 243_883);
        assert_eq!(sn128.capacity_bytes() / 512, 249_737_216);
    }

    #[test]
    fn csd_version_1_capacity() {
        // A 2 GB SDSC card read by au-ts/sddf pull request #224 (mmc-utils agrees): READ_BL_LEN
        // 0xa, C_SIZE 0xeaf, C_SIZE_MULT 7. Build the register from those fields.
        let raw = (0x32u128 << 96) // TRAN_SPEED 25 MHz
            | (0x5b5u128 << 84) // CCC
            | (0xau128 << 80)
            | (0xeafu128 << 62)
            | (7u128 << 47);
        let csd = Csd::decode(raw).unwrap();
        assert_eq!(csd.version, CsdVersion::V1);
        assert_eq!(csd.capacity_bytes(), 3760 * 512 * 1024);
        assert_eq!(csd.capacity_class(), CapacityClass::Sdsc);
        assert!(!csd.capacity_class().block_addressed());
        assert_eq!(csd.read_block_bytes(), 1024);
        // QEMU's SDSC CSD (hw/sd/sd.c sd_set_csd): READ_BL_LEN 9, C_SIZE_MULT 7 and
        // C_SIZE = size / 2^18 - 1, so a 1 GiB image reads back as 1 GiB.
        let qemu_1gib = (9u128 << 80) | (((1u128 << 30) / (512 * 512) - 1) << 62) | (7u128 << 47);
        assert_eq!(Csd::decode(qemu_1gib).unwrap().capacity_bytes(), 1 << 30);
    }

    #[test]
    fn csd_versions_3_and_reserved() {
        let sduc = Csd::decode((2u128 << 126) | (0x0100_0000u128 << 48)).unwrap();
        assert_eq!(sduc.version, CsdVersion::V3);
        assert_eq!(sduc.capacity_class(), CapacityClass::Sduc);
        assert_eq!(sduc.capacity_bytes(), (0x0100_0000u64 + 1) * 524_288);
        let reserved = Csd::decode(3u128 << 126).unwrap_err();
        assert_eq!(reserved.structure, 3);
        assert!(reserved.to_string().contains("reserved CSD_STRUCTURE 3"));
    }

    #[test]
    fn scr_versions_bus_widths_and_cmd23() {
        let sn512 = Scr::from_bytes(0x0245_8487_0000_0000u64.to_be_bytes());
        assert_eq!(sn512.spec_version(), "6.xx");
        assert!(sn512.supports_4_bit_bus());
        assert!(sn512.supports_cmd23());
        assert!(sn512.supports_switch());
        let sd16g = Scr { raw: 0x0235_8002_0100_0000 };
        assert_eq!(sd16g.spec_version(), "3.0x");
        assert!(sd16g.supports_cmd23());
        let transcend = Scr { raw: 0x0225_8000_0000_0000 };
        assert_eq!(transcend.spec_version(), "3.0x");
        assert!(!transcend.supports_cmd23());
        // QEMU's SCR (docs/qemu.md §2: 0x02258000 in the first word): spec 3.0x, 1+4 bit, no CMD23.
        let qemu = Scr::from_bytes([0x02, 0x25, 0x80, 0x00, 0, 0, 0, 0]);
        assert_eq!(qemu, transcend);
        let one_bit_v1 = Scr { raw: 0x0001_0000_0000_0000 };
        assert_eq!(one_bit_v1.spec_version(), "1.0x");
        assert!(!one_bit_v1.supports_4_bit_bus());
        assert!(!one_bit_v1.supports_switch());
    }

    #[test]
    fn sd_status_classes() {
        // Fields placed per §4.10.2 Table 4-44: a 4-bit bus, speed class 10 (code 4), U3, V30, A2.
        let mut bytes = [0u8; 64];
        bytes[0] = 0b1000_0000; // DAT_BUS_WIDTH = 2 (4 bits)
        bytes[8] = 4; // SPEED_CLASS, bits 447:440
        bytes[14] = 0x39; // UHS_SPEED_GRADE 3 (bits 399:396), UHS_AU_SIZE 9
        bytes[15] = 30; // VIDEO_SPEED_CLASS, bits 391:384
        bytes[21] = 0x02; // APP_PERF_CLASS, bits 339:336
        let status = SdStatus { bytes };
        assert_eq!(status.bus_width_bits(), 4);
        assert_eq!(status.speed_class(), Some(10));
        assert_eq!(status.uhs_speed_grade(), 3);
        assert_eq!(status.video_speed_class(), 30);
        assert_eq!(status.application_class(), 2);
        assert_eq!(
            status.describe().to_string(),
            "speed class 10, UHS grade U3, video class V30, application class A2"
        );
        // QEMU's card returns an all-zero SD Status apart from the bus width.
        let qemu = SdStatus { bytes: [0; 64] };
        assert_eq!(
            qemu.describe().to_string(),
            "speed class 0, UHS grade none, video class none, application class none"
        );
        let mut reserved = [0u8; 64];
        reserved[8] = 9;
        assert_eq!(SdStatus { bytes: reserved }.speed_class(), None);
    }

    #[test]
    fn card_status_errors_and_state() {
        let tran_ready = CardStatus(0x0000_0900);
        assert_eq!(tran_ready.state(), CardState::Transfer);
        assert_eq!(tran_ready.errors(), 0);
        let out_of_range = CardStatus(0x8000_0a00);
        assert_eq!(out_of_range.errors(), CardStatus::OUT_OF_RANGE);
        assert_eq!(out_of_range.state(), CardState::SendingData);
        // CARD_IS_LOCKED (bit 25) and APP_CMD are status, not errors.
        assert_eq!(CardStatus(0x0200_0020).errors(), 0);
        assert_eq!(CardState::from_bits(12), CardState::Reserved(12));
    }

    #[test]
    fn switch_status_group1() {
        // QEMU answers support 0x8003 (SDR12 + HS) and echoes the function asked for.
        let mut bytes = [0u8; 64];
        bytes[12] = 0x80;
        bytes[13] = 0x03;
        bytes[16] = 0x01;
        let status = SwitchStatus { bytes };
        assert_eq!(status.group1_support(), 0x8003);
        assert!(status.supports(BusSpeedFunction::HighSpeed));
        assert!(!status.supports(BusSpeedFunction::Sdr50));
        assert_eq!(status.group1_selection(), 1);
    }
}
