//! Running a changefeed's tables on several captures (ADR 0013).
//!
//! `changefeed move-table` records where a table is to run in the
//! changefeed's [`TablePlacement`] (`/sluice/v1/table-placement/{tenant}/{cf}`);
//! a table it does not name runs on the capture that reads the source. The
//! owner's follower of the changefeed's run sees the record change
//! (`Relocations`), stops the run everywhere (written, flushed and saved, as a
//! pause does), and the owner places the next run, under a new epoch, as
//! sides: the reading capture's assignment ships the named tables to the
//! captures that run them, each of which gets an assignment of those tables
//! only. A table is never run by two captures at one epoch: every side of a
//! run has the same epoch, and the next run is placed only after every side
//! of the previous one reported its end (or its capture's lease ended).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sluice_meta::keys::{self, MetaKey};
use sluice_meta::{Compare, KeyValue, MetaError, MetaStore, Op, Revision, Txn};
use sluice_protocol::{
    ASSIGNMENT_VERSION, Assignment, CaptureInfo, Receiver, ShipRole, Shipment, Tables,
    WHOLE_ASSIGNMENT_VERSION,
};

use crate::ChangefeedId;
use crate::relocate::{MoveError, Placement};

/// The most tables one changefeed may have placed by name (the record stays
/// well inside a meta-store value's limit).
pub const MAX_PLACED_TABLES: usize = 4096;

/// The longest `schema.table` name taken (MySQL allows 64 characters each).
pub const MAX_TABLE_NAME_LEN: usize = 256;

/// The record of where some of a changefeed's tables run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TablePlacement {
    /// Version of this stored form (1).
    pub version: u32,
    /// `schema.table` → the capture that runs it.
    pub tables: BTreeMap<String, String>,
}

/// One table moved from one capture to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMove {
    /// The changefeed.
    pub changefeed: ChangefeedId,
    /// The table (`schema.table`).
    pub table: String,
    /// Where it runs now.
    pub from: String,
    /// Where it is to run.
    pub to: String,
}

/// Checks a `schema.table` name as a move names it.
pub fn validate_table(table: &str) -> Result<(), MoveError> {
    let bad = |why: &str| Err(MoveError::BadTable(format!("table {table:?} {why}")));
    if table.len() > MAX_TABLE_NAME_LEN {
        return bad(&format!("is longer than {MAX_TABLE_NAME_LEN} bytes"));
    }
    match table.split_once('.') {
        Some((schema, name)) if !schema.is_empty() && !name.is_empty() => {}
        _ => return bad("is not of the form schema.table"),
    }
    if table.chars().any(char::is_control) {
        return bad("holds a control character");
    }
    Ok(())
}

/// Checks that `id` is stored; the compare a placement write makes so that
/// it lands only while that description is the one read (a changefeed with
/// a redo log splits like any other: its reading capture logs every table's
/// events and ships only what its log has, ADR 0013).
async fn described(store: &dyn MetaStore, id: &ChangefeedId) -> Result<Compare, MoveError> {
    let key = keys::changefeed_info(id.tenant(), id.name())?;
    let kv = store
        .get(&key)
        .await?
        .ok_or_else(|| MoveError::NotRunning(id.clone()))?;
    crate::ChangefeedInfo::decode(&kv.value)
        .map_err(|e| MoveError::BadTable(format!("changefeed {id} does not decode: {e}")))?;
    Ok(Compare::mod_revision(&key, kv.mod_revision))
}

/// Reads the changefeed's table placement and its revision (none: no record).
pub async fn read(
    store: &dyn MetaStore,
    id: &ChangefeedId,
) -> Result<(TablePlacement, Option<Revision>), MetaError> {
    let key = keys::table_placement(id.tenant(), id.name())?;
    Ok(match store.get(&key).await? {
        Some(kv) => (decode(&kv), Some(kv.mod_revision)),
        None => (TablePlacement::default(), None),
    })
}

/// The largest stored placement (well inside a meta-store request).
const MAX_PLACEMENT_BYTES: usize = 256 * 1024;

/// The stored form of `record`, refused when too large.
fn encode(record: &TablePlacement) -> Result<Vec<u8>, MoveError> {
    let value = keys::encode(record)?;
    if value.len() > MAX_PLACEMENT_BYTES {
        return Err(MoveError::BadTable(format!(
            "the changefeed's table placement would take {} bytes, more than {MAX_PLACEMENT_BYTES}; \
             move some tables back to the reading capture first",
            value.len()
        )));
    }
    Ok(value)
}

/// Writes `record` (none left: deletes it) if the stored one is still
/// `current`; whether it did (another move came between: read again).
async fn replace(
    store: &dyn MetaStore,
    key: &str,
    (current, info): (Option<&KeyValue>, &Compare),
    record: &TablePlacement,
) -> Result<bool, MoveError> {
    let unchanged = match current {
        Some(kv) => Compare::mod_revision(key, kv.mod_revision),
        None => Compare::absent(key),
    };
    let op = if record.tables.is_empty() {
        Op::delete(key)
    } else {
        Op::put(key, encode(record)?)
    };
    Ok(store
        .txn(Txn::new().when([unchanged, info.clone()]).and_then([op]))
        .await?
        .succeeded)
}

/// A stored placement; one that does not decode counts as empty (said in the
/// log: its tables run on the reader, none is lost).
pub(crate) fn decode(kv: &KeyValue) -> TablePlacement {
    keys::decode::<TablePlacement>(&kv.key, &kv.value).unwrap_or_else(|e| {
        tracing::warn!(key = %kv.key, error = %e, "A table placement does not decode; its tables run on the reading capture.");
        TablePlacement::default()
    })
}

/// Asks for `table` of `id` to run on capture `to` (live, not drained; `id`
/// running). Moving it to the reading capture takes it back there; moving it
/// to where it runs changes nothing.
pub async fn request_table_move(
    store: &dyn MetaStore,
    id: &ChangefeedId,
    table: &str,
    to: &str,
) -> Result<TableMove, MoveError> {
    validate_table(table)?;
    let key = keys::table_placement(id.tenant(), id.name())?;
    loop {
        let info = described(store, id).await?;
        let placement = Placement::read(store).await?;
        if placement.draining.contains(to) {
            return Err(MoveError::Draining(to.to_string()));
        }
        if !placement.captures.contains_key(to) {
            return Err(MoveError::NoCapture(to.to_string()));
        }
        let reader = placement
            .capture_of(id)
            .ok_or_else(|| MoveError::NotRunning(id.clone()))?
            .to_string();
        let from = placement
            .tables
            .get(id)
            .and_then(|t| t.get(table))
            .cloned()
            .unwrap_or_else(|| reader.clone());
        let current = store.get(&key).await?;
        let mut record = current.as_ref().map(decode).unwrap_or_default();
        let before = record.clone();
        if to == reader {
            record.tables.remove(table);
        } else {
            record.tables.insert(table.to_string(), to.to_string());
        }
        if record.tables.len() > MAX_PLACED_TABLES {
            return Err(MoveError::BadTable(format!(
                "changefeed {id} has {MAX_PLACED_TABLES} tables placed by name already; move \
                 some back to the reading capture ({reader}) first"
            )));
        }
        let moved = TableMove {
            changefeed: id.clone(),
            table: table.to_string(),
            from,
            to: to.to_string(),
        };
        if record == before && current.is_some() {
            return Ok(moved);
        }
        record.version = 1;
        if replace(store, &key, (current.as_ref(), &info), &record).await? {
            return Ok(moved);
        }
        // Another move changed the record meanwhile: read it again.
    }
}

/// What [`rebalance_tables`] evens out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// The number of tables per capture.
    Tables,
    /// The rows per second read per capture (as the captures last measured).
    Rows,
}

/// The most moves one rebalance asks for (the rest waits for the next).
pub const MAX_REBALANCE_MOVES: usize = 64;

/// The moves that even `measure` over the `captures` (all live) for a
/// changefeed read on `reader`: `tables` is each known table with its
/// capture and rows per second. From the most loaded capture to the least,
/// one table at a time, while a move makes their difference smaller (for
/// rows, the busiest table that does); at most [`MAX_REBALANCE_MOVES`].
pub fn plan_rebalance(
    measure: Measure,
    captures: &BTreeSet<String>,
    tables: &BTreeMap<String, (String, u64)>,
) -> Vec<(String, String, String)> {
    let weight = |rate: u64| match measure {
        Measure::Tables => 1,
        Measure::Rows => rate,
    };
    let mut load: BTreeMap<&str, u64> = captures.iter().map(|c| (c.as_str(), 0)).collect();
    let mut on: BTreeMap<String, (String, u64)> = BTreeMap::new();
    for (table, (capture, rate)) in tables {
        if let Some(l) = load.get_mut(capture.as_str()) {
            *l += weight(*rate);
            on.insert(table.clone(), (capture.clone(), weight(*rate)));
        }
    }
    let mut moves = Vec::new();
    while moves.len() < MAX_REBALANCE_MOVES {
        let Some((&most, &high)) = load
            .iter()
            .max_by_key(|(c, l)| (**l, std::cmp::Reverse(**c)))
        else {
            break;
        };
        let (&least, &low) = load
            .iter()
            .min_by_key(|(c, l)| (**l, **c))
            .expect("not empty");
        // A table of weight w moved from `most` to `least` helps while
        // 0 < w < high - low.
        let candidate = on
            .iter()
            .filter(|(_, (c, w))| c == most && *w > 0 && *w < high - low)
            // The heaviest that helps; the first by name among equals.
            .max_by_key(|(t, (_, w))| (*w, std::cmp::Reverse((*t).clone())))
            .map(|(t, (_, w))| (t.clone(), *w));
        let Some((table, w)) = candidate else {
            break;
        };
        *load.get_mut(most).expect("loaded") -= w;
        *load.get_mut(least).expect("loaded") += w;
        on.insert(table.clone(), (least.to_string(), w));
        moves.push((table, most.to_string(), least.to_string()));
    }
    moves
}

/// Evens `measure` over the live captures for the tables of `id` (as its
/// captures last measured them: a table is known once a run read it), by
/// asking for the moves [`plan_rebalance`] finds, all in one change of the
/// table placement (one restart of the run).
pub async fn rebalance_tables(
    store: &dyn MetaStore,
    id: &ChangefeedId,
    measure: Measure,
) -> Result<Vec<TableMove>, MoveError> {
    let key = keys::table_placement(id.tenant(), id.name())?;
    loop {
        let info = described(store, id).await?;
        let placement = Placement::read(store).await?;
        let reader = placement
            .capture_of(id)
            .ok_or_else(|| MoveError::NotRunning(id.clone()))?
            .to_string();
        let placed = placement.tables.get(id).cloned().unwrap_or_default();
        // Each table the runs measured, where it runs now.
        let mut tables: BTreeMap<String, (String, u64)> = BTreeMap::new();
        let prefix = keys::task_prefix(id.tenant(), id.name())?;
        for kv in store.list(&prefix).await?.kvs {
            let Some(MetaKey::TaskPosition { capture, .. }) = MetaKey::parse(&kv.key) else {
                continue;
            };
            let Ok(report) = keys::decode::<sluice_protocol::TaskReport>(&kv.key, &kv.value) else {
                continue;
            };
            let runs_here = |t: &str| match placed.get(t) {
                Some(c) => *c == capture,
                None => capture == reader,
            };
            for (table, rate) in report.load.map(|l| l.tables).unwrap_or_default() {
                if runs_here(&table) {
                    tables.insert(table, (capture.clone(), rate));
                }
            }
        }
        let live: BTreeSet<String> = placement.captures.keys().cloned().collect();
        let planned = plan_rebalance(measure, &live, &tables);
        if planned.is_empty() {
            return Ok(Vec::new());
        }
        let current = store.get(&key).await?;
        let mut record = current.as_ref().map(decode).unwrap_or_default();
        record.version = 1;
        let mut moves = Vec::new();
        for (table, from, to) in planned {
            if to == reader {
                record.tables.remove(&table);
            } else {
                record.tables.insert(table.clone(), to.clone());
            }
            moves.push(TableMove {
                changefeed: id.clone(),
                table,
                from,
                to,
            });
        }
        if record.tables.len() > MAX_PLACED_TABLES {
            return Err(MoveError::BadTable(format!(
                "changefeed {id} would have more than {MAX_PLACED_TABLES} tables placed by name"
            )));
        }
        if replace(store, &key, (current.as_ref(), &info), &record).await? {
            return Ok(moves);
        }
    }
}

/// One capture's part of a run, as the owner assigns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Side {
    /// The capture.
    pub capture: String,
    /// Its tables.
    pub tables: Tables,
    /// Its side of the shipment, if the tables are split.
    pub shipment: Option<Shipment>,
}

impl Side {
    /// The assignment of this side, its shared fields taken from `record`.
    pub(crate) fn assignment(&self, record: &Assignment) -> Assignment {
        Assignment {
            version: if self.shipment.is_some() {
                ASSIGNMENT_VERSION
            } else {
                WHOLE_ASSIGNMENT_VERSION
            },
            tables: self.tables.clone(),
            shipment: self.shipment.clone(),
            ..record.clone()
        }
    }

    /// Whether this side reads the source.
    pub(crate) fn reads(&self) -> bool {
        !matches!(
            self.shipment,
            Some(Shipment {
                role: ShipRole::Receives { .. },
                ..
            })
        )
    }
}

/// The sides of one run: the reader first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sides {
    pub sides: Vec<Side>,
    /// The placement record the split came from (compared with later ones to
    /// tell whether the tables move).
    pub placement: TablePlacement,
}

impl Sides {
    /// The whole changefeed on `reader`.
    pub(crate) fn whole(reader: String) -> Self {
        Self {
            sides: vec![Side {
                capture: reader,
                tables: Tables::All,
                shipment: None,
            }],
            placement: TablePlacement::default(),
        }
    }

    /// The sides of a run read on `reader` with `placement`'s tables on the
    /// captures it names that are in `live` (id → address); entries naming
    /// the reader or a capture not in `live` run on the reader. `token` is
    /// the run's shipment secret.
    pub(crate) fn plan(
        reader: String,
        placement: TablePlacement,
        live: &BTreeMap<String, String>,
        token: impl FnOnce() -> String,
    ) -> Self {
        let mut elsewhere: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (table, capture) in &placement.tables {
            if *capture != reader && live.contains_key(capture) {
                elsewhere.entry(capture).or_default().push(table.clone());
            }
        }
        if elsewhere.is_empty() {
            return Self {
                placement,
                ..Self::whole(reader)
            };
        }
        let token = token();
        let address = live.get(&reader).cloned().unwrap_or_default();
        let mut sides = vec![Side {
            capture: reader.clone(),
            tables: Tables::All,
            shipment: Some(Shipment {
                token: token.clone(),
                role: ShipRole::Reads {
                    receivers: elsewhere
                        .iter()
                        .map(|(capture, tables)| Receiver {
                            capture: capture.to_string(),
                            tables: tables.clone(),
                        })
                        .collect(),
                },
            }),
        }];
        for (capture, tables) in elsewhere {
            sides.push(Side {
                capture: capture.to_string(),
                tables: Tables::Only(tables),
                shipment: Some(Shipment {
                    token: token.clone(),
                    role: ShipRole::Receives {
                        reader: reader.clone(),
                        address: address.clone(),
                    },
                }),
            });
        }
        Self { sides, placement }
    }

    /// The sides of a run an earlier owner assigned, if they form one run:
    /// one whole assignment, or one reader and the receivers it names, with
    /// one secret.
    pub(crate) fn adopted(found: &[(String, Assignment)]) -> Option<Self> {
        let side = |(capture, a): &(String, Assignment)| Side {
            capture: capture.clone(),
            tables: a.tables.clone(),
            shipment: a.shipment.clone(),
        };
        let sides: Vec<Side> = found.iter().map(side).collect();
        let (readers, receivers): (Vec<&Side>, Vec<&Side>) = sides.iter().partition(|s| s.reads());
        let [reader] = readers[..] else {
            return None;
        };
        let named: BTreeSet<&str> = match &reader.shipment {
            None => BTreeSet::new(),
            Some(Shipment {
                role: ShipRole::Reads { receivers },
                ..
            }) => receivers.iter().map(|r| r.capture.as_str()).collect(),
            Some(_) => return None,
        };
        let token = reader.shipment.as_ref().map(|s| s.token.as_str());
        let present: BTreeSet<&str> = receivers.iter().map(|s| s.capture.as_str()).collect();
        let agree = receivers.iter().all(|s| match &s.shipment {
            Some(Shipment {
                token: t,
                role: ShipRole::Receives { reader: r, .. },
            }) => Some(t.as_str()) == token && *r == reader.capture,
            _ => false,
        });
        if named != present || !agree {
            return None;
        }
        let mut ordered = vec![reader.clone()];
        ordered.extend(receivers.into_iter().cloned());
        ordered[1..].sort_by(|a, b| a.capture.cmp(&b.capture));
        Some(Self {
            sides: ordered,
            placement: TablePlacement::default(),
        })
    }

    /// Whether `other` runs the same tables on the same captures (secrets
    /// and addresses aside).
    pub(crate) fn same_split(&self, other: &Sides) -> bool {
        let split = |s: &Sides| -> Vec<(String, Tables)> {
            s.sides
                .iter()
                .map(|side| (side.capture.clone(), side.tables.clone()))
                .collect()
        };
        split(self) == split(other)
    }

    /// The captures of the run, the reader first.
    pub(crate) fn captures(&self) -> Vec<String> {
        self.sides.iter().map(|s| s.capture.clone()).collect()
    }

    /// The reading capture.
    pub(crate) fn reader(&self) -> &str {
        &self.sides[0].capture
    }
}

/// The live captures (registered, not drained) and their addresses.
pub(crate) async fn live_captures(
    store: &dyn MetaStore,
) -> Result<BTreeMap<String, String>, MetaError> {
    let drained = crate::drained(store).await?;
    let mut live = BTreeMap::new();
    for kv in store.list(&keys::capture_prefix()).await?.kvs {
        if let Some(MetaKey::Capture { capture }) = MetaKey::parse(&kv.key)
            && !drained.contains(&capture)
            && let Ok(info) = keys::decode::<CaptureInfo>(&kv.key, &kv.value)
        {
            live.insert(capture, info.address);
        }
    }
    Ok(live)
}

/// A secret for one run's shipment: 32 hex digits from the system's random
/// source.
pub(crate) fn new_token() -> String {
    let mut bytes = [0u8; 16];
    if let Err(e) = getrandom::fill(&mut bytes) {
        // Without randomness the secret is guessable; the run still works.
        tracing::error!(error = %e, "No random bytes for a shipment secret; using the clock.");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes = now.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(entries: &[(&str, &str)]) -> TablePlacement {
        TablePlacement {
            version: 1,
            tables: entries
                .iter()
                .map(|(t, c)| (t.to_string(), c.to_string()))
                .collect(),
        }
    }

    fn live(ids: &[&str]) -> BTreeMap<String, String> {
        ids.iter()
            .enumerate()
            .map(|(i, c)| (c.to_string(), format!("10.0.0.{i}:8300")))
            .collect()
    }

    #[test]
    fn tables_on_other_live_captures_are_shipped_there_and_the_rest_stay() {
        let p = placement(&[
            ("shop.orders", "b"),
            ("shop.items", "b"),
            ("shop.users", "c"),
            ("shop.gone", "d"),
            ("shop.home", "a"),
        ]);
        let sides = Sides::plan("a".into(), p, &live(&["a", "b", "c"]), || "s".repeat(32));
        assert_eq!(sides.captures(), ["a", "b", "c"]);
        let reads = &sides.sides[0];
        assert_eq!(reads.tables, Tables::All);
        let Some(Shipment {
            token,
            role: ShipRole::Reads { receivers },
        }) = &reads.shipment
        else {
            panic!("{reads:?}")
        };
        assert_eq!(token, &"s".repeat(32));
        assert_eq!(
            receivers,
            &[
                Receiver {
                    capture: "b".into(),
                    tables: vec!["shop.items".into(), "shop.orders".into()]
                },
                Receiver {
                    capture: "c".into(),
                    tables: vec!["shop.users".into()]
                },
            ]
        );
        let b = &sides.sides[1];
        assert_eq!(
            b.tables,
            Tables::Only(vec!["shop.items".into(), "shop.orders".into()])
        );
        assert_eq!(
            b.shipment.as_ref().unwrap().role,
            ShipRole::Receives {
                reader: "a".into(),
                address: "10.0.0.0:8300".into()
            }
        );
        // The adopted form of the same run is the same run.
        let found: Vec<(String, Assignment)> = sides
            .sides
            .iter()
            .rev()
            .map(|s| (s.capture.clone(), s.assignment(&record())))
            .collect();
        let adopted = Sides::adopted(&found).expect("one run");
        assert_eq!(adopted.sides, sides.sides);
        // A receiver whose reader does not name it is not one run.
        assert!(Sides::adopted(&found[..1]).is_none());
        assert!(Sides::adopted(&found[1..]).is_none());
    }

    fn record() -> Assignment {
        Assignment {
            version: 1,
            changefeed_epoch: crate::Epoch(4),
            tables: Tables::All,
            checkpoint_ts: sluice_core::CheckpointTs::new(9),
            info_revision: Revision(3),
            desired: sluice_protocol::Desired::Run,
            shipment: None,
        }
    }

    #[test]
    fn without_tables_elsewhere_the_run_is_whole_and_written_as_version_one() {
        let sides = Sides::plan(
            "a".into(),
            placement(&[("shop.t", "a"), ("shop.u", "gone")]),
            &live(&["a", "b"]),
            || unreachable!("no secret for a whole run"),
        );
        assert_eq!(sides.sides, Sides::whole("a".into()).sides);
        let a = sides.sides[0].assignment(&record());
        assert_eq!((a.version, a.shipment), (WHOLE_ASSIGNMENT_VERSION, None));
        let whole = [("a".to_string(), record())];
        assert_eq!(Sides::adopted(&whole).unwrap().captures(), ["a"]);
        let two = [("a".to_string(), record()), ("b".to_string(), record())];
        assert!(Sides::adopted(&two).is_none(), "two whole runs");
    }

    #[test]
    fn rebalance_moves_tables_from_the_most_loaded_capture_while_it_helps() {
        let captures: BTreeSet<String> = ["a", "b", "c"].iter().map(|c| c.to_string()).collect();
        let tables: BTreeMap<String, (String, u64)> = [
            ("s.t1", "a", 900),
            ("s.t2", "a", 100),
            ("s.t3", "a", 50),
            ("s.t4", "a", 0),
            ("s.t5", "b", 10),
            ("s.gone", "z", 5000),
        ]
        .into_iter()
        .map(|(t, c, r)| (t.to_string(), (c.to_string(), r)))
        .collect();
        let by_count = plan_rebalance(Measure::Tables, &captures, &tables);
        // a 4, b 1, c 0 -> 2, 2, 1 (the first by name goes first; a table
        // on a capture that is not live is left alone).
        assert_eq!(
            by_count,
            [
                ("s.t1".into(), "a".into(), "c".into()),
                ("s.t2".into(), "a".into(), "b".into()),
            ]
        );
        let by_rows = plan_rebalance(Measure::Rows, &captures, &tables);
        // a 1050, b 10, c 0: t1 to c (a 150, b 10, c 900); moving it on
        // would not help, and an idle table never moves.
        assert_eq!(by_rows, [("s.t1".into(), "a".into(), "c".into())]);
        // Balanced already: nothing.
        let even: BTreeMap<String, (String, u64)> = [("s.x", "a", 5), ("s.y", "b", 5)]
            .into_iter()
            .map(|(t, c, r)| (t.to_string(), (c.to_string(), r)))
            .collect();
        assert!(plan_rebalance(Measure::Rows, &captures, &even).is_empty());
        let two: BTreeSet<String> = ["a", "b"].iter().map(|c| c.to_string()).collect();
        assert!(plan_rebalance(Measure::Rows, &two, &even).is_empty());
        assert!(plan_rebalance(Measure::Tables, &two, &even).is_empty());
    }

    #[test]
    fn table_names_are_checked() {
        for bad in [
            "orders",
            ".t",
            "db.",
            "",
            "db.t\n",
            &format!("d.{}", "x".repeat(300)),
        ] {
            assert!(
                matches!(validate_table(bad), Err(MoveError::BadTable(_))),
                "{bad:?}"
            );
        }
        validate_table("shop.orders").unwrap();
        validate_table("shop.my.table").unwrap();
        assert_eq!(new_token().len(), 32);
        assert_ne!(new_token(), new_token());
    }
}
