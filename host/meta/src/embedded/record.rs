//! How one key is stored in the `kv` table: a fixed header, then the value.
//!
//! ```text
//! create_revision: u64 LE | mod_revision: u64 LE | lease: i64 LE (0 = none) | value
//! ```

use crate::store::{KeyValue, LeaseId, Revision};

const HEADER: usize = 24;

/// Encode a key's record.
pub(super) fn encode(
    create_revision: Revision,
    mod_revision: Revision,
    lease: Option<LeaseId>,
    value: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + value.len());
    out.extend_from_slice(&create_revision.0.to_le_bytes());
    out.extend_from_slice(&mod_revision.0.to_le_bytes());
    out.extend_from_slice(&lease.map_or(0, LeaseId::get).to_le_bytes());
    out.extend_from_slice(value);
    out
}

/// Decode a key's record; the error says what is wrong with it.
pub(super) fn decode(key: &str, bytes: &[u8]) -> Result<KeyValue, String> {
    let Some((header, value)) = bytes.split_first_chunk::<HEADER>() else {
        return Err(format!(
            "the record of key {key:?} has {} bytes, fewer than its {HEADER}-byte header",
            bytes.len()
        ));
    };
    let word = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&header[i * 8..i * 8 + 8]);
        b
    };
    let create_revision = Revision(u64::from_le_bytes(word(0)));
    let mod_revision = Revision(u64::from_le_bytes(word(1)));
    let lease = i64::from_le_bytes(word(2));
    if create_revision == Revision::ZERO || mod_revision < create_revision {
        return Err(format!(
            "the record of key {key:?} has create revision {create_revision} and mod revision \
             {mod_revision}"
        ));
    }
    Ok(KeyValue {
        key: key.to_owned(),
        value: value.to_vec(),
        create_revision,
        mod_revision,
        lease: (lease != 0).then_some(LeaseId(lease)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips() {
        let bytes = encode(Revision(3), Revision(9), Some(LeaseId(-5)), b"v");
        let kv = decode("/k", &bytes).unwrap();
        assert_eq!(
            kv,
            KeyValue {
                key: "/k".into(),
                value: b"v".to_vec(),
                create_revision: Revision(3),
                mod_revision: Revision(9),
                lease: Some(LeaseId(-5)),
            }
        );
        let bytes = encode(Revision(1), Revision(1), None, b"");
        assert_eq!(decode("/k", &bytes).unwrap().lease, None);
    }

    #[test]
    fn short_or_inconsistent_records_are_rejected() {
        assert!(decode("/k", &[0; 23]).is_err());
        assert!(decode("/k", &encode(Revision(5), Revision(4), None, b"")).is_err());
        assert!(decode("/k", &encode(Revision(0), Revision(4), None, b"")).is_err());
    }
}
