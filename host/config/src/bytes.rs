//! Sizes written as a number of bytes or as `"64MiB"`.

use serde::{Deserialize, Serialize};

/// A size in bytes, written as a number or as `"<n>B|KiB|MiB|GiB"`; stored as
/// a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(into = "u64")]
pub struct ByteSize(pub u64);

impl From<ByteSize> for u64 {
    fn from(size: ByteSize) -> u64 {
        size.0
    }
}

impl std::str::FromStr for ByteSize {
    type Err = String;

    /// `64MiB`, `2 GiB`, `7B` or a number of bytes.
    fn from_str(s: &str) -> Result<Self, String> {
        parse_size(s).map(ByteSize)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(ByteSize(n)),
            Raw::Text(s) => parse_size(&s)
                .map(ByteSize)
                .map_err(serde::de::Error::custom),
        }
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size; write e.g. \"64MiB\" or a number of bytes"))?;
    let mult = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "unknown size unit `{other}` in `{s}`; use B, KiB, MiB or GiB"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_numbers_and_units_and_store_numbers() {
        let read = |s: &str| serde_json::from_str::<ByteSize>(s).map(|b| b.0);
        assert_eq!(read("1024").unwrap(), 1024);
        assert_eq!(read("\"64MiB\"").unwrap(), 64 << 20);
        assert_eq!(read("\"2 GiB\"").unwrap(), 2 << 30);
        assert_eq!(read("\"7B\"").unwrap(), 7);
        let err = read("\"64MB\"").unwrap_err().to_string();
        assert!(err.contains("unknown size unit `MB`"), "{err}");
        assert!(read("\"99999999999GiB\"").is_err());
        assert_eq!(serde_json::to_string(&ByteSize(5)).unwrap(), "5");
    }
}
