//! MariaDB's global transaction ids and the raw events `mysql_common` does not
//! parse: GTID (162), GTID_LIST (163) and BINLOG_CHECKPOINT (161).
//!
//! A MariaDB GTID is `domain-server-sequence`; a replication position is one
//! GTID per domain (the last transaction applied in each), written
//! `0-1-100,1-2-7`: what `@@gtid_binlog_pos` shows and `@slave_connect_state`
//! takes.

use std::collections::BTreeMap;
use std::fmt;

/// One MariaDB GTID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Gtid {
    /// The replication domain.
    pub domain: u32,
    /// The server that wrote it.
    pub server: u32,
    /// The sequence number in its domain.
    pub seq: u64,
}

impl fmt::Display for Gtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server, self.seq)
    }
}

impl std::str::FromStr for Gtid {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is not a MariaDB GTID (domain-server-sequence, as in 0-1-100)");
        let mut it = s.trim().splitn(3, '-');
        let (Some(d), Some(sv), Some(q)) = (it.next(), it.next(), it.next()) else {
            return Err(bad());
        };
        Ok(Gtid {
            domain: d.parse().map_err(|_| bad())?,
            server: sv.parse().map_err(|_| bad())?,
            seq: q.parse().map_err(|_| bad())?,
        })
    }
}

/// A MariaDB replication position: the last GTID of each domain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GtidPos(BTreeMap<u32, Gtid>);

impl GtidPos {
    /// Parses `0-1-100,1-2-7` (empty: no transaction yet).
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut pos = GtidPos::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let g: Gtid = part.parse()?;
            if pos.0.insert(g.domain, g).is_some() {
                return Err(format!("`{s}` names domain {} twice", g.domain));
            }
        }
        Ok(pos)
    }

    /// Records that `g` was applied.
    pub fn apply(&mut self, g: Gtid) {
        self.0.insert(g.domain, g);
    }

    /// Whether no domain has a transaction.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for GtidPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.0.values().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{g}")?;
        }
        Ok(())
    }
}

/// MariaDB's GTID event: it starts every event group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GtidEvent {
    /// The GTID (its server id comes from the event header).
    pub gtid: Gtid,
    /// A group without BEGIN/COMMIT (a DDL, or a non-transactional statement).
    pub standalone: bool,
}

/// Parses a GTID event's body (after the common header, checksum removed).
pub fn parse_gtid_event(body: &[u8], server: u32) -> Result<GtidEvent, String> {
    if body.len() < 13 {
        return Err(format!("a GTID event of {} bytes is too short", body.len()));
    }
    let seq = u64::from_le_bytes(body[0..8].try_into().expect("8 bytes"));
    let domain = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
    let flags = body[12];
    Ok(GtidEvent {
        gtid: Gtid {
            domain,
            server,
            seq,
        },
        standalone: flags & 1 != 0,
    })
}

/// Parses a GTID_LIST event's body: the binlog state when its file began.
pub fn parse_gtid_list(body: &[u8]) -> Result<GtidPos, String> {
    if body.len() < 4 {
        return Err("a GTID_LIST event is too short".into());
    }
    let count =
        (u32::from_le_bytes(body[0..4].try_into().expect("4 bytes")) & 0x0FFF_FFFF) as usize;
    if body.len() < 4 + count * 16 {
        return Err(format!(
            "a GTID_LIST event of {} bytes cannot hold {count} GTIDs",
            body.len()
        ));
    }
    let mut pos = GtidPos::default();
    for i in 0..count {
        let at = 4 + i * 16;
        let domain = u32::from_le_bytes(body[at..at + 4].try_into().expect("4 bytes"));
        let server = u32::from_le_bytes(body[at + 4..at + 8].try_into().expect("4 bytes"));
        let seq = u64::from_le_bytes(body[at + 8..at + 16].try_into().expect("8 bytes"));
        // A list may hold several GTIDs of a domain; the last one is the state.
        pos.apply(Gtid {
            domain,
            server,
            seq,
        });
    }
    Ok(pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip_and_reject_junk() {
        let p = GtidPos::parse("1-2-7, 0-1-100").unwrap();
        assert_eq!(p.to_string(), "0-1-100,1-2-7");
        assert!(GtidPos::parse("").unwrap().is_empty());
        assert!(GtidPos::parse("0-1").is_err());
        assert!(GtidPos::parse("0-1-2,0-1-3").is_err());
        assert!(GtidPos::parse("a-b-c").is_err());
    }

    #[test]
    fn gtid_events_parse_from_their_bodies() {
        let mut body = 42u64.to_le_bytes().to_vec();
        body.extend_from_slice(&3u32.to_le_bytes());
        body.push(1);
        let e = parse_gtid_event(&body, 9).unwrap();
        assert_eq!(e.gtid.to_string(), "3-9-42");
        assert!(e.standalone);
        assert!(parse_gtid_event(&body[..5], 9).is_err());

        let mut list = 2u32.to_le_bytes().to_vec();
        for (d, s, q) in [(0u32, 1u32, 5u64), (1, 1, 9)] {
            list.extend_from_slice(&d.to_le_bytes());
            list.extend_from_slice(&s.to_le_bytes());
            list.extend_from_slice(&q.to_le_bytes());
        }
        assert_eq!(parse_gtid_list(&list).unwrap().to_string(), "0-1-5,1-1-9");
        assert!(parse_gtid_list(&list[..20]).is_err());
    }
}
