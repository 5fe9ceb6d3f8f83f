//! 256-bit unsigned integers, just enough for exact latency sums of squares and variances.
//!
//! Only the per-I/O addition is on the hot path; multiplication, division and square root run
//! once per report.

use core::cmp::Ordering;

/// An unsigned 256-bit integer: `high × 2^128 + low`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct U256 {
    pub high: u128,
    pub low: u128,
}

impl PartialOrd for U256 {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for U256 {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.high, self.low).cmp(&(other.high, other.low))
    }
}

const LOW_64_BITS: u128 = u64::MAX as u128;

impl U256 {
    pub const ZERO: U256 = U256 { high: 0, low: 0 };

    pub fn from_u128(value: u128) -> U256 {
        U256 { high: 0, low: value }
    }

    /// The full product of two 128-bit numbers (never overflows).
    pub fn product(a: u128, b: u128) -> U256 {
        let (a_high, a_low) = (a >> 64, a & LOW_64_BITS);
        let (b_high, b_low) = (b >> 64, b & LOW_64_BITS);
        let low_low = a_low * b_low;
        let low_high = a_low * b_high;
        let high_low = a_high * b_low;
        let high_high = a_high * b_high;
        // The middle column: the high half of low×low plus the low halves of the cross terms.
        let middle = (low_low >> 64) + (low_high & LOW_64_BITS) + (high_low & LOW_64_BITS);
        U256 {
            low: (middle << 64) | (low_low & LOW_64_BITS),
            high: high_high + (low_high >> 64) + (high_low >> 64) + (middle >> 64),
        }
    }

    pub fn checked_add(self, other: U256) -> Option<U256> {
        let (low, carry) = self.low.overflowing_add(other.low);
        let high = self.high.checked_add(other.high)?.checked_add(u128::from(carry))?;
        Some(U256 { high, low })
    }

    /// Adds a 128-bit value; the per-sample operation (an add with carry).
    pub fn add_u128(&mut self, value: u128) {
        let (low, carry) = self.low.overflowing_add(value);
        self.low = low;
        self.high = self.high.wrapping_add(u128::from(carry));
    }

    pub fn checked_sub(self, other: U256) -> Option<U256> {
        let (low, borrow) = self.low.overflowing_sub(other.low);
        let high = self.high.checked_sub(other.high)?.checked_sub(u128::from(borrow))?;
        Some(U256 { high, low })
    }

    pub fn checked_mul_u128(self, factor: u128) -> Option<U256> {
        let low_product = U256::product(self.low, factor);
        let high_product = U256::product(self.high, factor);
        if high_product.high != 0 {
            return None;
        }
        low_product.checked_add(U256 { high: high_product.low, low: 0 })
    }

    /// Quotient and remainder by a non-zero 128-bit divisor (restoring long division, bit by bit).
    pub fn div_rem_u128(self, divisor: u128) -> Option<(U256, u128)> {
        if divisor == 0 {
            return None;
        }
        let mut quotient = U256::ZERO;
        let mut remainder: u128 = 0;
        for bit in (0..256).rev() {
            // remainder < divisor ≤ 2^128 − 1, so 2·remainder + 1 can need 129 bits.
            let carried_out = remainder >> 127;
            remainder = (remainder << 1) | u128::from(self.bit(bit));
            if carried_out == 1 || remainder >= divisor {
                remainder = remainder.wrapping_sub(divisor);
                quotient.set_bit(bit);
            }
        }
        Some((quotient, remainder))
    }

    /// The value as a `u128`, if it fits.
    pub fn to_u128(self) -> Option<u128> {
        (self.high == 0).then_some(self.low)
    }

    /// ⌊√self⌋, which always fits in 128 bits.
    pub fn integer_sqrt(self) -> u128 {
        let mut root: u128 = 0;
        for bit in (0..128).rev() {
            let candidate = root | (1u128 << bit);
            if U256::product(candidate, candidate) <= self {
                root = candidate;
            }
        }
        root
    }

    fn bit(&self, index: u32) -> bool {
        if index >= 128 {
            (self.high >> (index - 128)) & 1 == 1
        } else {
            (self.low >> index) & 1 == 1
        }
    }

    fn set_bit(&mut self, index: u32) {
        if index >= 128 {
            self.high |= 1u128 << (index - 128);
        } else {
            self.low |= 1u128 << index;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn products_carry_into_the_high_half() {
        assert_eq!(U256::product(u128::MAX, 1), U256::from_u128(u128::MAX));
        // (2^128 − 1)² = 2^256 − 2^129 + 1.
        let square = U256::product(u128::MAX, u128::MAX);
        assert_eq!(square.high, u128::MAX - 1);
        assert_eq!(square.low, 1);
        assert_eq!(U256::product(1 << 64, 1 << 64), U256 { high: 1, low: 0 });
    }

    #[test]
    fn division_and_square_root_at_the_edges() {
        let big = U256 { high: 5, low: 12345 };
        let (quotient, remainder) = big.div_rem_u128(u128::MAX).unwrap();
        let back =
            quotient.checked_mul_u128(u128::MAX).unwrap().checked_add(U256::from_u128(remainder)).unwrap();
        assert_eq!(back, big);
        assert!(big.div_rem_u128(0).is_none());
        assert_eq!(U256::product(u128::MAX, u128::MAX).integer_sqrt(), u128::MAX);
        assert_eq!(U256::from_u128(99).integer_sqrt(), 9);
        assert_eq!(U256::from_u128(100).integer_sqrt(), 10);
        assert!(U256::ZERO.checked_sub(U256::from_u128(1)).is_none());
        assert!(U256 { high: u128::MAX, low: 0 }.checked_mul_u128(2).is_none());
    }

    #[test]
    fn adding_with_carry() {
        let mut sum = U256::from_u128(u128::MAX);
        sum.add_u128(1);
        assert_eq!(sum, U256 { high: 1, low: 0 });
    }

    proptest! {
        #[test]
        fn division_inverts_multiplication(a in any::<u128>(), b in any::<u128>(), d in 1..u128::MAX) {
            let product = U256::product(a, b);
            let (quotient, remainder) = product.div_rem_u128(d).unwrap();
            prop_assert!(remainder < d);
            let back = quotient.checked_mul_u128(d).unwrap()
                .checked_add(U256::from_u128(remainder)).unwrap();
            prop_assert_eq!(back, product);
        }

        #[test]
        fn products_of_64_bit_values_match_u128(a in any::<u64>(), b in any::<u64>()) {
            let product = U256::product(u128::from(a), u128::from(b));
            prop_assert_eq!(product.to_u128(), Some(u128::from(a) * u128::from(b)));
        }

        #[test]
        fn square_root_brackets_the_value(high in any::<u128>(), low in any::<u128>()) {
            let value = U256 { high, low };
            let root = value.integer_sqrt();
            prop_assert!(U256::product(root, root) <= value);
            if root < u128::MAX {
                prop_assert!(U256::product(root + 1, root + 1) > value);
            }
        }
    }
}
