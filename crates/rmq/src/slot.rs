//! Slot hashing: a message goes to slot `CRC32(slot basis) mod slots`.
//!
//! The slot basis is the explicit one when given, else the merge key, so
//! duplicates always meet in one slot (which is what makes merging work) and
//! all messages of one entity share a slot (which is what serial consumption
//! relies on). Slot counts are powers of two, so `mod` is a mask.

/// The slot of a message with this basis in a topic of `slots` slots.
pub fn slot_of(basis: &[u8], slots: u32) -> u32 {
    debug_assert!(slots.is_power_of_two());
    crc32fast::hash(basis) & (slots - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_ieee_reference_value() {
        // The standard check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        assert_eq!(slot_of(b"123456789", 16), 0xCBF4_3926 & 15);
        assert_eq!(slot_of(b"anything", 1), 0);
    }
}
