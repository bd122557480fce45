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

/// A MySQL GTID set: per server uuid, the transaction numbers applied, as
/// inclusive ranges (`3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5:7-9,...`, what
/// `@@gtid_executed` shows).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MysqlGtidSet(BTreeMap<String, Vec<(u64, u64)>>);

impl MysqlGtidSet {
    /// Parses `uuid:1-5:7,uuid2:1-3` (empty: no transaction).
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut set = MysqlGtidSet::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || format!("`{part}` is not a MySQL GTID set entry (uuid:1-5:7)");
            let mut pieces = part.split(':');
            let uuid = pieces.next().ok_or_else(bad)?.to_ascii_lowercase();
            let hex: String = uuid.chars().filter(|c| *c != '-').collect();
            if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad());
            }
            let mut any = false;
            for range in pieces {
                let (a, b) = match range.split_once('-') {
                    Some((a, b)) => (a, b),
                    None => (range, range),
                };
                let (a, b): (u64, u64) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a == 0 || b < a {
                    return Err(bad());
                }
                let ranges = set.0.entry(uuid.clone()).or_default();
                ranges.push((a, b));
                normalize(ranges);
                any = true;
            }
            if !any {
                return Err(bad());
            }
        }
        Ok(set)
    }

    /// Records that transaction `gno` of server `uuid` was applied.
    pub fn add(&mut self, uuid: &str, gno: u64) {
        let ranges = self.0.entry(uuid.to_ascii_lowercase()).or_default();
        ranges.push((gno, gno));
        normalize(ranges);
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The set as the entries of a `COM_BINLOG_DUMP_GTID` request.
    pub fn sids(&self) -> Result<Vec<mysql_common::packets::Sid<'static>>, String> {
        self.to_string()
            .split(',')
            .filter(|p| !p.is_empty())
            .map(|p| p.parse().map_err(|e| format!("GTID set entry `{p}`: {e}")))
            .collect()
    }
}

/// Sorts and merges touching or overlapping inclusive ranges.
fn normalize(ranges: &mut Vec<(u64, u64)>) {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for &(a, b) in ranges.iter() {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    *ranges = out;
}

impl fmt::Display for MysqlGtidSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (uuid, ranges)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(uuid)?;
            for (a, b) in ranges {
                if a == b {
                    write!(f, ":{a}")?;
                } else {
                    write!(f, ":{a}-{b}")?;
                }
            }
        }
        Ok(())
    }
}

/// The uuid text of a MySQL GTID event's 16-byte server id.
pub fn uuid_text(sid: [u8; 16]) -> String {
    mysql_common::uuid::Uuid::from_bytes(sid)
        .hyphenated()
        .to_string()
}

#[cfg(test)]
mod mysql_tests {
    use super::*;

    const U: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";

    #[test]
    fn mysql_sets_parse_grow_and_print() {
        let mut set = MysqlGtidSet::parse(&format!("{}:1-5:7, {U}:6", U.to_uppercase())).unwrap();
        assert_eq!(set.to_string(), format!("{U}:1-7"));
        set.add(U, 9);
        set.add("00000000-0000-0000-0000-000000000001", 1);
        assert_eq!(
            set.to_string(),
            format!("00000000-0000-0000-0000-000000000001:1,{U}:1-7:9")
        );
        let sids = set.sids().unwrap();
        assert_eq!(sids.len(), 2);
        // Dump intervals are half-open: 1-7 is [1, 8).
        let iv: Vec<(u64, u64)> = sids[1]
            .intervals()
            .iter()
            .map(|i| (i.start(), i.end()))
            .collect();
        assert_eq!(iv, [(1, 8), (9, 10)]);
        for bad in ["x:1", U, &format!("{U}:0"), &format!("{U}:5-3")] {
            assert!(MysqlGtidSet::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn uuid_text_is_the_hyphenated_lower_case_form() {
        let sid = [
            0x3e, 0x11, 0xfa, 0x47, 0x71, 0xca, 0x11, 0xe1, 0x9e, 0x33, 0xc8, 0x0a, 0xa9, 0x42,
            0x95, 0x62,
        ];
        assert_eq!(uuid_text(sid), U);
    }
}
