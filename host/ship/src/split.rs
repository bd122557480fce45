//! The reading capture's source: [`Split`] wraps the changefeed's source,
//! keeps the events of the tables this capture runs and ships the others' to
//! the captures that run them. A run's local tables move on untouched: a
//! table on the reading capture pays nothing for the shipping.
//!
//! DDLs: a statement about one capture's tables goes to that capture, which
//! applies it. A statement about the tables of several captures (a rename or
//! drop of several tables, a statement about a database) is a barrier across
//! them, applied once, by the reading capture: the receivers are told that
//! everything below it was shipped (a resolved ts just below it) and get
//! nothing more; the reading capture's pipeline applies it only once every
//! receiver made durable everything below it
//! (`Pipeline::with_tables_elsewhere`), and tells this source when it did
//! ([`Split::with_applied`]); only then do the receivers get what follows it.
//!
//! With a redo log ([`Split::logging_every_table`]), every event goes on to
//! this capture's pipeline whole, so that its log has every table's, and the
//! pipeline runs only this capture's tables ([`Routes`] says which); the
//! outboxes hold what they are sent until the log has it
//! ([`crate::Shipping::open_after_log`]).

use std::collections::HashMap;

use sluice_core::{
    Checkpoint, DdlEvent, ResumeError, RunPart, RunTransaction, Source, SourceEvent, SourceStats,
    TableChanges, TableSchema, TransactionRun,
};

use crate::error::ShipError;
use crate::frame::Encoder;
use crate::outbox::OutboxHandle;

/// Why a split source stopped.
#[derive(Debug, thiserror::Error)]
pub enum SplitError<E: std::error::Error + 'static> {
    /// The source failed.
    #[error(transparent)]
    Source(E),
    /// A shipment could not go on.
    #[error(transparent)]
    Ship(#[from] ShipError),
}

/// One receiving capture: its outbox and its encoder.
struct Destination {
    outbox: OutboxHandle,
    encoder: Encoder,
    /// A large transaction's parts are being shipped: its later parts go too,
    /// with rows or not, so that the receiver sees its end.
    in_large: bool,
}

/// Which capture runs each of a split changefeed's tables: one of the
/// receivers (by their index), or this one.
#[derive(Debug, Default)]
pub struct Routes {
    /// `schema.table` → the receiver that runs it.
    by_name: HashMap<String, usize>,
    /// Per receiver, the databases its tables are in (a statement about a
    /// database goes to every capture with a table in it).
    databases: Vec<std::collections::HashSet<String>>,
}

impl Routes {
    /// Whether this capture runs the table `schema.table`.
    pub fn runs_here(&self, qualified_name: &str) -> bool {
        !self.by_name.contains_key(qualified_name)
    }

    /// Whether this capture applies `ddl`: all but a statement about one
    /// receiver's tables only, which that receiver applies.
    pub fn applies_here(&self, ddl: &DdlEvent) -> bool {
        !matches!(self.ddl_destinations(ddl), (remote, false) if remote.len() == 1)
    }

    /// Where a DDL's tables run: every receiver running a table it names
    /// (or, for a statement about a database, a table in it), and whether
    /// this capture runs one (it names a table run here, or none).
    fn ddl_destinations(&self, ddl: &DdlEvent) -> (Vec<usize>, bool) {
        let mut names: Vec<String> = ddl
            .tables
            .iter()
            .map(|(schema, table)| format!("{schema}.{table}"))
            .collect();
        if !ddl.table_name.is_empty() {
            names.push(format!("{}.{}", ddl.schema_name, ddl.table_name));
        }
        if names.is_empty() {
            // About a database: every capture with a table in it, and this one.
            let remote = (0..self.databases.len())
                .filter(|&i| self.databases[i].contains(&ddl.schema_name))
                .collect();
            return (remote, true);
        }
        let mut remote = Vec::new();
        let mut local = false;
        for name in &names {
            match self.by_name.get(name) {
                Some(&i) if !remote.contains(&i) => remote.push(i),
                Some(_) => {}
                None => local = true,
            }
        }
        (remote, local)
    }
}

/// A source whose tables are split between this capture and others.
pub struct Split<S> {
    inner: S,
    destinations: Vec<Destination>,
    routes: std::sync::Arc<Routes>,
    /// (table id, schema version) → where its rows go (`None`: here).
    by_id: HashMap<(u32, u32), Option<usize>>,
    /// The commit ts of the last DDL the pipeline applied (or passed).
    applied: Option<tokio::sync::watch::Receiver<u64>>,
    /// Where the commit ts of each DDL across captures kept here goes.
    across: tokio::sync::watch::Sender<u64>,
    /// A DDL across captures was kept here: nothing more is shipped until the
    /// pipeline applied it.
    barrier: Option<u64>,
    /// Every event goes on whole (see the module docs).
    whole: bool,
}

impl<S: Source> Split<S> {
    /// `inner`'s events, the tables each outbox names (`schema.table`)
    /// shipped to it, the rest kept.
    pub fn new(inner: S, destinations: Vec<(OutboxHandle, Vec<String>)>) -> Self {
        let mut routes = Routes::default();
        let destinations = destinations
            .into_iter()
            .enumerate()
            .map(|(i, (outbox, tables))| {
                routes.databases.push(
                    tables
                        .iter()
                        .filter_map(|t| t.split_once('.').map(|(db, _)| db.to_string()))
                        .collect(),
                );
                for t in tables {
                    routes.by_name.insert(t, i);
                }
                Destination {
                    outbox,
                    encoder: Encoder::new(),
                    in_large: false,
                }
            })
            .collect();
        Self {
            inner,
            destinations,
            routes: std::sync::Arc::new(routes),
            by_id: HashMap::new(),
            applied: None,
            across: tokio::sync::watch::channel(0).0,
            barrier: None,
            whole: false,
        }
    }

    /// Every event goes on to this capture's pipeline whole, the receivers'
    /// tables too, for its redo log to have them; the pipeline runs only
    /// this capture's tables ([`Split::routes`]). The outboxes should be
    /// opened with [`crate::Shipping::open_after_log`], so that a receiver
    /// gets only what the log has.
    pub fn logging_every_table(mut self) -> Self {
        self.whole = true;
        self
    }

    /// Which capture runs each table.
    pub fn routes(&self) -> std::sync::Arc<Routes> {
        self.routes.clone()
    }

    /// The commit ts of the last DDL across captures kept here, to watch:
    /// the pipeline applies it only once every receiver flushed what is
    /// below it (at most one is pending: nothing is read past it until the
    /// pipeline applied it).
    pub fn across(&self) -> tokio::sync::watch::Receiver<u64> {
        self.across.subscribe()
    }

    /// Holds what follows a DDL across captures until `applied` (the commit
    /// ts of the last DDL the pipeline applied) reaches it. Without it, what
    /// follows is shipped at once (the receivers may then write rows above
    /// the DDL before the reading capture applied it).
    pub fn with_applied(mut self, applied: tokio::sync::watch::Receiver<u64>) -> Self {
        self.applied = Some(applied);
        self
    }

    /// Waits until the pipeline applied the DDL across captures kept last.
    async fn pass_barrier(&mut self) -> Result<(), ShipError> {
        let (Some(ts), Some(applied)) = (self.barrier, self.applied.as_mut()) else {
            return Ok(());
        };
        applied
            .wait_for(|&a| a >= ts)
            .await
            .map_err(|_| ShipError::Lost("the pipeline stopped before it applied a DDL".into()))?;
        self.barrier = None;
        Ok(())
    }

    /// What the receivers report, to watch: (flushed, saved) ts. The
    /// reading capture's checkpoint never passes the lowest saved one.
    pub fn durable_watches(&self) -> Vec<tokio::sync::watch::Receiver<(u64, u64)>> {
        self.destinations
            .iter()
            .map(|d| d.outbox.durable())
            .collect()
    }

    fn destination(&mut self, schema: &TableSchema) -> Option<usize> {
        let by_name = &self.routes.by_name;
        *self
            .by_id
            .entry((schema.table_id, schema.version))
            .or_insert_with(|| by_name.get(&schema.qualified_name()).copied())
    }

    /// Writes each receiver's parts of `parts` (of a run of `transactions`)
    /// into its encoder; the parts of this capture's tables are skipped.
    fn encode_parts(&mut self, transactions: &[RunTransaction], parts: &[RunPart]) {
        let by_id = &self.by_id;
        for (i, d) in self.destinations.iter_mut().enumerate() {
            let mine: Vec<_> = parts
                .iter()
                .filter(|p| {
                    let s = p.changes.schema();
                    by_id.get(&(s.table_id, s.version)) == Some(&Some(i))
                })
                .collect();
            if !mine.is_empty() {
                d.encoder.run(transactions, &mine);
            }
        }
    }

    /// Sends what the encoders hold.
    async fn send(&mut self) -> Result<(), ShipError> {
        for d in &mut self.destinations {
            if !d.encoder.is_empty() {
                let through = d.encoder.through();
                d.outbox.send(d.encoder.take(), through).await?;
            }
        }
        Ok(())
    }
}

impl<S: Source> Source for Split<S> {
    type Error = SplitError<S::Error>;

    async fn next_event(&mut self) -> Result<SourceEvent, Self::Error> {
        self.pass_barrier().await?;
        loop {
            let event = self.inner.next_event().await.map_err(SplitError::Source)?;
            match event {
                SourceEvent::Transaction(mut txn) => {
                    let mut shipped: Vec<Vec<&TableChanges>> =
                        vec![Vec::new(); self.destinations.len()];
                    let mut kept = Vec::with_capacity(txn.tables.len());
                    let tables = std::mem::take(&mut txn.tables);
                    let mut routes = Vec::with_capacity(tables.len());
                    for t in &tables {
                        routes.push(self.destination(t.schema()));
                    }
                    for (t, route) in tables.iter().zip(&routes) {
                        if let Some(i) = route {
                            shipped[*i].push(t);
                        }
                    }
                    for (i, d) in self.destinations.iter_mut().enumerate() {
                        if !shipped[i].is_empty() || d.in_large {
                            d.encoder.transaction(&txn, &shipped[i]);
                            d.in_large = txn.more;
                        }
                    }
                    drop(shipped);
                    if self.whole {
                        kept = tables;
                    } else {
                        for (t, route) in tables.into_iter().zip(routes) {
                            if route.is_none() {
                                kept.push(t);
                            }
                        }
                    }
                    txn.tables = kept;
                    self.send().await?;
                    return Ok(SourceEvent::Transaction(txn));
                }
                SourceEvent::Ddl(ddl) => {
                    let (remote, local) = self.routes.ddl_destinations(&ddl);
                    if let ([one], false) = (&remote[..], local) {
                        // One receiver's tables only: it applies it (logged
                        // here first, with every table's events).
                        self.destinations[*one].encoder.ddl(&ddl);
                        self.send().await?;
                        if self.whole {
                            return Ok(SourceEvent::Ddl(ddl));
                        }
                        continue;
                    }
                    // Applied here. Every receiver is told that what is below
                    // it was shipped (the pipeline applies no DDL before the
                    // receivers made that durable); those it concerns get
                    // nothing more until it is applied.
                    let below = ddl.commit_ts.get().saturating_sub(1);
                    for d in &mut self.destinations {
                        d.encoder.resolved(below);
                    }
                    self.send().await?;
                    if !remote.is_empty() {
                        self.barrier = Some(ddl.commit_ts.get());
                        self.across.send_replace(ddl.commit_ts.get());
                    }
                    return Ok(SourceEvent::Ddl(ddl));
                }
                SourceEvent::Resolved(ts) => {
                    for d in &mut self.destinations {
                        d.encoder.resolved(ts.get());
                    }
                    self.send().await?;
                    return Ok(SourceEvent::Resolved(ts));
                }
                SourceEvent::End => {
                    for d in &mut self.destinations {
                        d.encoder.end();
                    }
                    self.send().await?;
                    return Ok(SourceEvent::End);
                }
            }
        }
    }

    async fn next_run(
        &mut self,
        max_transactions: usize,
        max_bytes: usize,
    ) -> Result<Option<TransactionRun>, Self::Error> {
        self.pass_barrier().await?;
        let Some(mut run) = self
            .inner
            .next_run(max_transactions, max_bytes)
            .await
            .map_err(SplitError::Source)?
        else {
            return Ok(None);
        };
        if self.destinations.is_empty() {
            return Ok(Some(run));
        }
        for part in &run.parts {
            self.destination(part.changes.schema());
        }
        if self.whole {
            // Shipped by reference: the run goes on whole, for the log.
            self.encode_parts(&run.transactions, &run.parts);
            self.send().await?;
            return Ok(Some(run));
        }
        let by_id = &self.by_id;
        let taken = run.take_parts(|s| by_id.get(&(s.table_id, s.version)) == Some(&None));
        if !taken.is_empty() {
            self.encode_parts(&run.transactions, &taken);
            self.send().await?;
        }
        Ok(Some(run))
    }

    fn resume(&mut self, from: &Checkpoint) -> Result<(), ResumeError> {
        self.inner.resume(from)
    }

    fn stats(&self) -> Option<std::sync::Arc<SourceStats>> {
        self.inner.stats()
    }
}
