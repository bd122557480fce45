//! Moving running changefeeds between captures: `changefeed move` names the
//! capture one is to run on, `changefeed rebalance` evens the number of
//! changefeeds per capture, and a drain empties a capture.
//!
//! A request is a record in the meta store (`/sluice/v1/move/{tenant}/{cf}`,
//! a [`MoveTo`]); the owner's follower of the changefeed's assignment sees it
//! (`Relocations`), stops the run where it is (written, flushed and saved,
//! as a pause does), and the owner places the next run (a new epoch) on the
//! named capture (`preferred`) and deletes the record. One capture runs the
//! changefeed at a time: the next run is placed only after the stopped one
//! reported its end (or its capture's lease ended).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sluice_meta::keys::{self, MetaKey};
use sluice_meta::{Compare, MetaError, MetaStore, Op, Revision, Txn, WatchEventKind, WatchStream};

use crate::tables::{self, Sides, TablePlacement};
use crate::{Assignment, ChangefeedId, Desired, Tables};

/// The record of a move request: where the changefeed is to run next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveTo {
    /// The capture's id.
    pub to: String,
}

/// One changefeed moved from one capture to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The changefeed.
    pub changefeed: ChangefeedId,
    /// Where it runs now.
    pub from: String,
    /// Where it is to run.
    pub to: String,
}

/// Why a move cannot be asked for.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// The meta store failed.
    #[error(transparent)]
    Store(#[from] MetaError),
    /// No live capture has that id.
    #[error("no live capture {0}; `sluice cli capture list` shows them")]
    NoCapture(String),
    /// The capture is being drained.
    #[error("capture {0} is being drained: it takes no new work")]
    Draining(String),
    /// The changefeed runs nowhere now.
    #[error(
        "changefeed {0} is not running on any capture (paused, finished, failed or waiting to \
         restart): only running work moves"
    )]
    NotRunning(ChangefeedId),
    /// The table named cannot be placed.
    #[error("{0}")]
    BadTable(String),
}

/// The live captures (those not being drained), each with the changefeeds
/// assigned to run there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// Capture id → its changefeeds.
    pub captures: BTreeMap<String, Vec<ChangefeedId>>,
    /// Captures being drained (not in `captures`).
    pub draining: BTreeSet<String>,
    /// Changefeeds with a move asked for and not carried out yet.
    pub moving: BTreeSet<ChangefeedId>,
    /// The tables of split changefeeds that run on a capture other than the
    /// reader: changefeed → `schema.table` → capture.
    pub tables: BTreeMap<ChangefeedId, BTreeMap<String, String>>,
}

impl Placement {
    /// Reads the captures, assignments, drains and pending moves.
    pub async fn read(store: &dyn MetaStore) -> Result<Self, MetaError> {
        let draining = crate::drained(store).await?;
        let mut captures: BTreeMap<String, Vec<ChangefeedId>> = BTreeMap::new();
        let mut tables: BTreeMap<ChangefeedId, BTreeMap<String, String>> = BTreeMap::new();
        for kv in store.list(&keys::capture_prefix()).await?.kvs {
            if let Some(MetaKey::Capture { capture }) = MetaKey::parse(&kv.key)
                && !draining.contains(&capture)
            {
                captures.insert(capture, Vec::new());
            }
        }
        for kv in store.list(&keys::assignments_prefix()).await?.kvs {
            if let Some(MetaKey::Assignment {
                capture,
                tenant,
                changefeed,
            }) = MetaKey::parse(&kv.key)
                && captures.contains_key(&capture)
                && let Ok(a) = keys::decode::<Assignment>(&kv.key, &kv.value)
                && a.desired == Desired::Run
                && let Ok(id) = ChangefeedId::new(tenant, changefeed)
            {
                match (&a.shipment, &a.tables) {
                    // A receiver runs some tables; the changefeed is where it is read.
                    (
                        Some(sluice_protocol::Shipment {
                            role: sluice_protocol::ShipRole::Receives { .. },
                            ..
                        }),
                        Tables::Only(only),
                    ) => {
                        let placed = tables.entry(id).or_default();
                        for t in only {
                            placed.insert(t.clone(), capture.clone());
                        }
                    }
                    _ => captures.get_mut(&capture).expect("checked").push(id),
                }
            }
        }
        let prefix = keys::move_prefix();
        let moving = store
            .list(&prefix)
            .await?
            .kvs
            .iter()
            .filter_map(|kv| {
                let (tenant, name) = kv.key.strip_prefix(&prefix)?.split_once('/')?;
                ChangefeedId::new(tenant, name).ok()
            })
            .collect();
        Ok(Self {
            captures,
            draining,
            moving,
            tables,
        })
    }

    /// Where `id` runs, if it is assigned to a live capture.
    pub fn capture_of(&self, id: &ChangefeedId) -> Option<&str> {
        self.captures
            .iter()
            .find(|(_, feeds)| feeds.contains(id))
            .map(|(c, _)| c.as_str())
    }

    /// The moves that even out the changefeeds per capture (by count): from
    /// the most loaded capture to the least, one at a time, until no two
    /// differ by more than one. Changefeeds with a move pending are left
    /// alone (and not counted); among a capture's changefeeds the last by
    /// name moves first, and none moves twice.
    pub fn rebalance(&self) -> Vec<Move> {
        let mut candidates: BTreeMap<&str, Vec<&ChangefeedId>> = BTreeMap::new();
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for (capture, feeds) in &self.captures {
            let mut feeds: Vec<&ChangefeedId> =
                feeds.iter().filter(|f| !self.moving.contains(f)).collect();
            feeds.sort();
            count.insert(capture, feeds.len());
            candidates.insert(capture, feeds);
        }
        let mut moves = Vec::new();
        // Ties: the first by id gives, the first by id takes.
        while let Some((&most, &high)) = count
            .iter()
            .max_by_key(|(c, n)| (**n, std::cmp::Reverse(**c)))
        {
            let (&least, &low) = count
                .iter()
                .min_by_key(|(c, n)| (**n, **c))
                .expect("not empty");
            if high <= low + 1 {
                break;
            }
            let Some(feed) = candidates.get_mut(most).and_then(Vec::pop) else {
                break;
            };
            *count.get_mut(most).expect("counted") -= 1;
            *count.get_mut(least).expect("counted") += 1;
            moves.push(Move {
                changefeed: feed.clone(),
                from: most.to_string(),
                to: least.to_string(),
            });
        }
        moves
    }
}

/// Asks for `id` to run on capture `to` (it must be live and not drained, and
/// `id` running on a live capture). Moving to where it runs already answers
/// the move and withdraws any other pending one.
pub async fn request_move(
    store: &dyn MetaStore,
    id: &ChangefeedId,
    to: &str,
) -> Result<Move, MoveError> {
    let key = keys::changefeed_move(id.tenant(), id.name())?;
    let placement = Placement::read(store).await?;
    if placement.draining.contains(to) {
        return Err(MoveError::Draining(to.to_string()));
    }
    if !placement.captures.contains_key(to) {
        return Err(MoveError::NoCapture(to.to_string()));
    }
    let from = placement
        .capture_of(id)
        .ok_or_else(|| MoveError::NotRunning(id.clone()))?
        .to_string();
    if from == to {
        store.delete(&key).await?;
    } else {
        ask(store, id, to).await?;
    }
    Ok(Move {
        changefeed: id.clone(),
        from,
        to: to.to_string(),
    })
}

/// Writes the move record of `id` to `to`.
pub async fn ask(store: &dyn MetaStore, id: &ChangefeedId, to: &str) -> Result<(), MetaError> {
    let key = keys::changefeed_move(id.tenant(), id.name())?;
    let value = keys::encode(&MoveTo { to: to.to_string() })?;
    store.put(&key, value, None).await?;
    Ok(())
}

/// What `changefeed rebalance` evens over the captures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spread {
    /// The number of changefeeds each runs.
    Changefeeds,
    /// The rows per second their runs handed to sinks, as last measured.
    Rows,
}

impl Placement {
    /// The moves that even the rows per second over the captures: `rates`
    /// is each changefeed's, as its runs last measured (one not named counts
    /// 0 and stays). From the most loaded capture to the least, the busiest
    /// changefeed whose move makes their difference smaller, while one does
    /// (at most [`tables::MAX_REBALANCE_MOVES`]); changefeeds with a move
    /// pending are left alone.
    pub fn rebalance_rows(&self, rates: &BTreeMap<ChangefeedId, u64>) -> Vec<Move> {
        let mut named: BTreeMap<String, &ChangefeedId> = BTreeMap::new();
        let mut on: BTreeMap<String, (String, u64)> = BTreeMap::new();
        for (capture, feeds) in &self.captures {
            for feed in feeds.iter().filter(|f| !self.moving.contains(f)) {
                let rate = rates.get(feed).copied().unwrap_or(0);
                on.insert(feed.to_string(), (capture.clone(), rate));
                named.insert(feed.to_string(), feed);
            }
        }
        let live: BTreeSet<String> = self.captures.keys().cloned().collect();
        tables::plan_rebalance(tables::Measure::Rows, &live, &on)
            .into_iter()
            .map(|(feed, from, to)| Move {
                changefeed: named[&feed].clone(),
                from,
                to,
            })
            .collect()
    }
}

/// Plans the moves that even `spread` ([`Placement::rebalance`] or
/// [`Placement::rebalance_rows`]) and asks for them.
pub async fn rebalance(store: &dyn MetaStore, spread: Spread) -> Result<Vec<Move>, MetaError> {
    let placement = Placement::read(store).await?;
    let moves = match spread {
        Spread::Changefeeds => placement.rebalance(),
        Spread::Rows => placement.rebalance_rows(&crate::changefeed_rates(store).await?),
    };
    for m in &moves {
        ask(store, &m.changefeed, &m.to).await?;
    }
    Ok(moves)
}

/// Where a move asks `id` to run next, and the record's revision (for
/// [`done`]).
pub(crate) async fn preferred(
    store: &dyn MetaStore,
    id: &ChangefeedId,
) -> Result<Option<(String, Revision)>, MetaError> {
    let key = keys::changefeed_move(id.tenant(), id.name())?;
    Ok(store.get(&key).await?.and_then(|kv| {
        keys::decode::<MoveTo>(&kv.key, &kv.value)
            .ok()
            .map(|m| (m.to, kv.mod_revision))
    }))
}

/// Deletes the move record of `id` once the owner placed the work (only the
/// record read then, under the owner's `guard`).
pub(crate) async fn done(
    store: &dyn MetaStore,
    guard: &Compare,
    id: &ChangefeedId,
    revision: Revision,
) -> Result<(), MetaError> {
    let key = keys::changefeed_move(id.tenant(), id.name())?;
    store
        .txn(
            Txn::new()
                .when([guard.clone(), Compare::mod_revision(&key, revision)])
                .and_then([Op::delete(&key)]),
        )
        .await?;
    Ok(())
}

/// What takes running work off its captures: a drain of one of them, a
/// move of the changefeed to another capture, a change of its table
/// placement, or a capture its placement names coming (back) while its
/// tables run elsewhere. Followed by the owner's follower of the assignment
/// while the work runs.
pub(crate) struct Relocations {
    drains: WatchStream,
    moves: WatchStream,
    placements: WatchStream,
    registrations: WatchStream,
    drain_keys: BTreeSet<String>,
    move_key: String,
    placement_key: String,
    /// The capture that reads the changefeed.
    reader: String,
    /// The captures the run has a side on.
    running_on: BTreeSet<String>,
    /// Every capture being drained (kept up to date from `drains`).
    drained: BTreeSet<String>,
    /// The table placement the run was split by.
    placed: TablePlacement,
}

impl Relocations {
    /// Watches from `after` on; also answers why the work must leave already
    /// (a drain or move asked for before).
    pub(crate) async fn watch(
        store: &dyn MetaStore,
        sides: &Sides,
        id: &ChangefeedId,
        after: Revision,
    ) -> Result<(Self, Option<String>), MetaError> {
        let captures = sides.captures();
        let move_key = keys::changefeed_move(id.tenant(), id.name())?;
        let placement_key = keys::table_placement(id.tenant(), id.name())?;
        let drain_keys = captures
            .iter()
            .map(|c| keys::drain(c))
            .collect::<Result<BTreeSet<_>, _>>()?;
        let drains = store.watch(&keys::drain_prefix(), Some(after)).await?;
        let moves = store.watch(&move_key, Some(after)).await?;
        let placements = store.watch(&placement_key, Some(after)).await?;
        let registrations = store.watch(&keys::capture_prefix(), Some(after)).await?;
        let drained = crate::drained(store).await?;
        let relocations = Self {
            drains,
            moves,
            placements,
            registrations,
            drain_keys,
            move_key,
            placement_key,
            reader: sides.reader().to_string(),
            running_on: captures.iter().cloned().collect(),
            drained,
            placed: sides.placement.clone(),
        };
        let already = match captures.iter().find(|c| relocations.drained.contains(*c)) {
            Some(c) => Some(Self::drained(c)),
            None => match store.get(&relocations.move_key).await? {
                Some(kv) => relocations.moved(&kv),
                None => {
                    let now = store.get(&relocations.placement_key).await?;
                    match relocations.tables_moved(now.as_ref()) {
                        Some(why) => Some(why),
                        None => tables::live_captures(store)
                            .await?
                            .keys()
                            .find_map(|c| relocations.arrived(c)),
                    }
                }
            },
        };
        Ok((relocations, already))
    }

    /// Why the run must end now that capture `capture` is live (registered,
    /// not drained): the placement puts tables there and the run has no side
    /// on it (it was placed while that capture was gone), so the next run
    /// gives them back to it.
    fn arrived(&self, capture: &str) -> Option<String> {
        (!self.running_on.contains(capture)
            && !self.drained.contains(capture)
            && self.placed.tables.values().any(|c| c == capture))
        .then(|| format!("capture {capture}, where tables of the changefeed are placed, is live"))
    }

    fn drained(capture: &str) -> String {
        format!("capture {capture} is being drained")
    }

    fn moved(&self, kv: &sluice_meta::KeyValue) -> Option<String> {
        let to = keys::decode::<MoveTo>(&kv.key, &kv.value).ok()?.to;
        (to != self.reader).then(|| format!("the changefeed moves to capture {to}"))
    }

    /// Why the run must end if the table placement is now `kv` (none: no
    /// record): it differs from the one the run was split by.
    fn tables_moved(&self, kv: Option<&sluice_meta::KeyValue>) -> Option<String> {
        let now = kv.map(tables::decode).unwrap_or_default();
        (now.tables != self.placed.tables).then(|| "tables of the changefeed move".to_string())
    }

    /// The next reason for the work to leave; `None` once a watch ended
    /// (compacted, a lost connection): list and watch again.
    pub(crate) async fn next(&mut self) -> Option<String> {
        loop {
            tokio::select! {
                event = self.drains.next() => match event? {
                    Ok(ev) => {
                        let capture = ev.kv.key.rsplit('/').next().unwrap_or_default();
                        if ev.kind == WatchEventKind::Put {
                            self.drained.insert(capture.to_string());
                            if self.drain_keys.contains(&ev.kv.key) {
                                return Some(Self::drained(capture));
                            }
                        } else {
                            self.drained.remove(capture);
                        }
                    }
                    Err(_) => return None,
                },
                event = self.registrations.next() => match event? {
                    Ok(ev) if ev.kind == WatchEventKind::Put => {
                        if let Some(MetaKey::Capture { capture }) = MetaKey::parse(&ev.kv.key)
                            && keys::decode::<sluice_protocol::CaptureInfo>(&ev.kv.key, &ev.kv.value).is_ok()
                            && let Some(why) = self.arrived(&capture)
                        {
                            return Some(why);
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return None,
                },
                event = self.moves.next() => match event? {
                    Ok(ev) if ev.kind == WatchEventKind::Put && ev.kv.key == self.move_key => {
                        if let Some(why) = self.moved(&ev.kv) {
                            return Some(why);
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return None,
                },
                event = self.placements.next() => match event? {
                    Ok(ev) if ev.kv.key == self.placement_key => {
                        let now = (ev.kind == WatchEventKind::Put).then_some(&ev.kv);
                        if let Some(why) = self.tables_moved(now) {
                            return Some(why);
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return None,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> ChangefeedId {
        ChangefeedId::new("default", name).unwrap()
    }

    fn placement(loads: &[(&str, &[&str])]) -> Placement {
        Placement {
            captures: loads
                .iter()
                .map(|(c, feeds)| (c.to_string(), feeds.iter().map(|f| id(f)).collect()))
                .collect(),
            ..Placement::default()
        }
    }

    fn plan(p: &Placement) -> Vec<(String, String, String)> {
        p.rebalance()
            .into_iter()
            .map(|m| (m.changefeed.name().to_string(), m.from, m.to))
            .collect()
    }

    #[test]
    fn rebalance_by_rows_moves_the_busiest_changefeed_that_helps() {
        let p = placement(&[("a", &["hot", "warm", "idle"]), ("b", &["cool"])]);
        let rates: BTreeMap<ChangefeedId, u64> = [("hot", 9000), ("warm", 3000), ("cool", 1000)]
            .into_iter()
            .map(|(f, r)| (id(f), r))
            .collect();
        let moves: Vec<_> = p
            .rebalance_rows(&rates)
            .into_iter()
            .map(|m| (m.changefeed.name().to_string(), m.from, m.to))
            .collect();
        // a: 12000, b: 1000. The busiest that narrows the gap goes first:
        // `hot` (9000 < 11000), leaving 3000 / 10000; then `cool` comes back
        // (1000 < 7000): 4000 / 9000, and no single move narrows it more.
        assert_eq!(
            moves,
            [
                ("hot".into(), "a".into(), "b".into()),
                ("cool".into(), "b".into(), "a".into())
            ]
        );
        // A changefeed with a move pending is left alone (and not counted).
        let mut pending = p.clone();
        pending.moving.insert(id("cool"));
        let moves: Vec<_> = pending
            .rebalance_rows(&rates)
            .into_iter()
            .map(|m| m.changefeed.name().to_string())
            .collect();
        assert_eq!(moves, ["hot"]);
    }

    #[test]
    fn rebalance_evens_counts_moving_the_fewest_changefeeds() {
        let p = placement(&[
            ("a", &["f1", "f2", "f3", "f4", "f5"]),
            ("b", &[]),
            ("c", &["f6"]),
        ]);
        let moves = plan(&p);
        assert_eq!(
            moves,
            [
                ("f5".into(), "a".into(), "b".into()),
                ("f4".into(), "a".into(), "b".into()),
                ("f3".into(), "a".into(), "c".into()),
            ]
        );
        // 3, 2, 1 -> within one of each other after the moves.
        let balanced = placement(&[("a", &["f1", "f2"]), ("b", &["f3"]), ("c", &["f4", "f5"])]);
        assert!(plan(&balanced).is_empty());
        assert!(plan(&placement(&[])).is_empty());
        assert!(plan(&placement(&[("a", &["f1", "f2", "f3"])])).is_empty());
    }

    #[test]
    fn rebalance_leaves_pending_moves_alone() {
        let mut p = placement(&[("a", &["f1", "f2", "f3", "f4"]), ("b", &[])]);
        p.moving.insert(id("f4"));
        p.moving.insert(id("f3"));
        // f1 and f2 counted only: within one of b's none.
        assert_eq!(plan(&p), [("f2".into(), "a".into(), "b".into())]);
    }
}
