//! The byte-level alphabet of GPT-2-style vocabularies: each of the 256 bytes is written as one
//! printable character, so a byte string is a string of characters. Both the BPE merger
//! (`bpe.rs`) and the vocabulary loader (`vocab.rs`, byte tokens) use it.

/// The GPT-2 byte → character table: printable Latin-1 bytes map to themselves, the other 68
/// bytes to U+0100.. in byte order.
fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..256u32 {
        let printable =
            (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        let cp = if printable {
            b
        } else {
            next += 1;
            next - 1
        };
        // Every value here is below U+0144, so it is a valid char.
        table[b as usize] = char::from_u32(cp).unwrap_or('\0');
    }
    table
}

/// The character a byte is written as in a byte-level vocabulary.
pub(crate) fn byte_to_char(b: u8) -> char {
    static TABLE: std::sync::OnceLock<[char; 256]> = std::sync::OnceLock::new();
    TABLE.get_or_init(byte_to_char_table)[b as usize]
}

/// The inverse of [`byte_to_char`]: a lookup closure from character to byte.
pub(crate) fn unicode_to_byte_table() -> impl Fn(char) -> Option<u8> {
    let mut inv = [0u8; 324];
    let mut set = [false; 324];
    for b in 0..=255u8 {
        let c = byte_to_char(b) as usize;
        inv[c] = b;
        set[c] = true;
    }
    move |c: char| {
        let i = c as usize;
        (i < inv.len() && set[i]).then(|| inv[i])
    }
}
