//! A simulated SCSI direct-access logical unit for host tests (SPC-4/SBC-3 as QEMU's `scsi-hd`
//! answers): INQUIRY, TEST UNIT READY (not ready for the first N tries), REQUEST SENSE, READ
//! CAPACITY(10)/(16), READ(10)/(16) over the test pattern (`blockdev::pattern`), media errors at
//! chosen LBAs; any write is a violation (the benchmark never writes).

extern crate std;

use super::super::scsi::opcode;
use std::string::String;
use std::vec;
use std::vec::Vec;

/// What a command produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScsiAnswer {
    /// Data for the host (device to host).
    pub data: Vec<u8>,
    /// 0 GOOD, 2 CHECK CONDITION.
    pub status: u8,
    /// Fixed-format sense (18 bytes) for CHECK CONDITION.
    pub sense: Option<[u8; 18]>,
}

impl ScsiAnswer {
    fn good(data: Vec<u8>) -> Self {
        ScsiAnswer { data, status: 0, sense: None }
    }

    fn check(key: u8, code: u8, qualifier: u8) -> Self {
        let mut sense = [0u8; 18];
        sense[0] = 0x70;
        sense[2] = key;
        sense[7] = 10;
        sense[12] = code;
        sense[13] = qualifier;
        ScsiAnswer { data: Vec::new(), status: 2, sense: Some(sense) }
    }
}

#[derive(Clone, Debug)]
pub struct SimDisk {
    pub blocks: u64,
    pub block_bytes: u32,
    /// TEST UNIT READY answers NOT READY, becoming ready, this many times.
    pub not_ready_tries: u32,
    /// READ CAPACITY(16) is an invalid command (some bridges).
    pub no_read_capacity_16: bool,
    /// READ of any block in these ranges fails with MEDIUM ERROR.
    pub media_errors: Vec<(u64, u64)>,
    /// Commands seen, by opcode.
    pub commands: Vec<u8>,
    /// (LBA, blocks) of every READ.
    pub reads: Vec<(u64, u32)>,
    /// Sense kept for REQUEST SENSE (Bulk-Only has no autosense).
    pub pending_sense: Option<[u8; 18]>,
    pub violations: Vec<String>,
}

impl SimDisk {
    pub fn new(blocks: u64, block_bytes: u32) -> Self {
        SimDisk {
            blocks,
            block_bytes,
            not_ready_tries: 0,
            no_read_capacity_16: false,
            media_errors: Vec::new(),
            commands: Vec::new(),
            reads: Vec::new(),
            pending_sense: None,
            violations: Vec::new(),
        }
    }

    /// Bytes of `blocks` blocks from `lba` (each 512-byte sector from the pattern).
    pub fn contents(&self, lba: u64, blocks: u32) -> Vec<u8> {
        let bytes = blocks as usize * self.block_bytes as usize;
        let first_sector = lba * u64::from(self.block_bytes) / 512;
        let mut data = vec![0u8; bytes];
        for (index, chunk) in data.chunks_mut(512).enumerate() {
            let mut sector = [0u8; 512];
            blockdev::pattern::fill_sector(first_sector + index as u64, &mut sector);
            chunk.copy_from_slice(&sector[..chunk.len()]);
        }
        data
    }

    /// Executes a CDB; `data_out` is what the host sent (writes).
    pub fn execute(&mut self, cdb: &[u8], allocation_limit: u32) -> ScsiAnswer {
        let Some(&operation) = cdb.first() else {
            return ScsiAnswer::check(5, 0x20, 0);
        };
        self.commands.push(operation);
        let answer = self.answer(operation, cdb);
        self.pending_sense = answer.sense;
        let mut answer = answer;
        answer.data.truncate(allocation_limit as usize);
        answer
    }

    fn answer(&mut self, operation: u8, cdb: &[u8]) -> ScsiAnswer {
        match operation {
            opcode::TEST_UNIT_READY => {
                if self.not_ready_tries > 0 {
                    self.not_ready_tries -= 1;
                    return ScsiAnswer::check(2, 0x04, 0x01);
                }
                ScsiAnswer::good(Vec::new())
            }
            opcode::REQUEST_SENSE => {
                let sense = self.pending_sense.take().unwrap_or_else(|| {
                    let mut none = [0u8; 18];
                    none[0] = 0x70;
                    none[7] = 10;
                    none
                });
                let length = usize::from(cdb.get(4).copied().unwrap_or(0));
                ScsiAnswer::good(sense[..length.min(18)].to_vec())
            }
            opcode::INQUIRY => {
                let mut data = vec![0u8; 36];
                data[1] = 0x80;
                data[2] = 5;
                data[3] = 2;
                data[4] = 31;
                data[8..16].copy_from_slice(b"BAREBNCH");
                data[16..32].copy_from_slice(b"SIM USB DISK    ");
                data[32..36].copy_from_slice(b"1.00");
                let length = usize::from(u16::from_be_bytes([cdb[3], cdb[4]]));
                data.truncate(length);
                ScsiAnswer::good(data)
            }
            opcode::READ_CAPACITY_10 => {
                let last = (self.blocks - 1).min(0xffff_ffff) as u32;
                let mut data = last.to_be_bytes().to_vec();
                data.extend_from_slice(&self.block_bytes.to_be_bytes());
                ScsiAnswer::good(data)
            }
            opcode::SERVICE_ACTION_IN_16 if cdb.get(1).map(|b| b & 0x1f) == Some(0x10) => {
                if self.no_read_capacity_16 {
                    return ScsiAnswer::check(5, 0x20, 0);
                }
                let mut data = vec![0u8; 32];
                data[..8].copy_from_slice(&(self.blocks - 1).to_be_bytes());
                data[8..12].copy_from_slice(&self.block_bytes.to_be_bytes());
                let length = u32::from_be_bytes([cdb[10], cdb[11], cdb[12], cdb[13]]) as usize;
                data.truncate(length);
                ScsiAnswer::good(data)
            }
            opcode::READ_10 | opcode::READ_16 => {
                let (lba, blocks) = if operation == opcode::READ_10 {
                    (
                        u64::from(u32::from_be_bytes([cdb[2], cdb[3], cdb[4], cdb[5]])),
                        u32::from(u16::from_be_bytes([cdb[7], cdb[8]])),
                    )
                } else {
                    (
                        u64::from_be_bytes(cdb[2..10].try_into().expect("8 bytes")),
                        u32::from_be_bytes([cdb[10], cdb[11], cdb[12], cdb[13]]),
                    )
                };
                if lba.checked_add(u64::from(blocks)).is_none_or(|end| end > self.blocks) {
                    self.violations
                        .push(std::format!("READ of {blocks} blocks at LBA {lba} is past the end"));
                    return ScsiAnswer::check(5, 0x21, 0);
                }
                self.reads.push((lba, blocks));
                let end = lba + u64::from(blocks);
                if self.media_errors.iter().any(|&(first, count)| first < end && lba < first + count) {
                    return ScsiAnswer::check(3, 0x11, 0);
                }
                ScsiAnswer::good(self.contents(lba, blocks))
            }
            opcode::WRITE_10 | opcode::WRITE_16 | opcode::SYNCHRONIZE_CACHE_10 => {
                self.violations
                    .push(std::format!("the driver sent {operation:#04x}: nothing may be written"));
                ScsiAnswer::check(7, 0x27, 0)
            }
            _ => ScsiAnswer::check(5, 0x20, 0),
        }
    }
}
