//! The few A64 encodings the profiler needs to follow calls and returns (Arm ARM DDI 0487, C6.2:
//! BL, BLR, RET).
#![forbid(unsafe_code)]

use crate::accounting::BlockEnd;

/// `BL label`: bits 31:26 = 100101.
const BL_MASK: u32 = 0xFC00_0000;
const BL_BITS: u32 = 0x9400_0000;
/// `BLR Xn` and `RET Xn`: everything but Rn (bits 9:5) fixed.
const BRANCH_REGISTER_MASK: u32 = 0xFFFF_FC1F;
const BLR_BITS: u32 = 0xD63F_0000;
const RET_BITS: u32 = 0xD65F_0000;

/// How a block whose last instruction is `instruction` ends.
pub fn block_end(instruction: u32) -> BlockEnd {
    if instruction & BL_MASK == BL_BITS || instruction & BRANCH_REGISTER_MASK == BLR_BITS {
        BlockEnd::Call
    } else if is_return(instruction) {
        BlockEnd::Return
    } else {
        BlockEnd::Other
    }
}

/// Whether `instruction` is a `RET`.
pub fn is_return(instruction: u32) -> bool {
    instruction & BRANCH_REGISTER_MASK == RET_BITS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_returns_are_recognised() {
        assert_eq!(block_end(0x9400_0010), BlockEnd::Call); // bl .+64
        assert_eq!(block_end(0x97FF_FFFF), BlockEnd::Call); // bl .-4
        assert_eq!(block_end(0xD63F_0100), BlockEnd::Call); // blr x8
        assert_eq!(block_end(0xD65F_03C0), BlockEnd::Return); // ret
        assert_eq!(block_end(0xD61F_0100), BlockEnd::Other); // br x8: a jump, no frame
        assert_eq!(block_end(0x1400_0010), BlockEnd::Other); // b .+64: a tail call keeps the frame
        assert_eq!(block_end(0xD503_201F), BlockEnd::Other); // nop
    }
}
