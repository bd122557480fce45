//! `sluice-core`: the event model, timestamp newtypes, ids and the host-side traits
//! (`Source`, `Sink`, `Filter`). No I/O happens here; every other host crate depends
//! on this one, and this one on no other.

mod batch;
mod error;
mod event;
mod fence;
mod traits;
mod ts;
mod validator;

pub use batch::{
    Batch, BatchBuilder, ByteValues, Column, ColumnData, ColumnSize, ColumnType, ColumnValues,
    FLAG_NO_FK_CHECKS, FLAG_REPLAY, FLAG_SPLIT, Row, TableBatch, TableSchema,
};
pub use error::{BatchError, MAX_MESSAGE_BYTES, PluginError, bounded_text};
pub use event::{
    ChangesPool, Checkpoint, DdlEvent, Op, RowWriter, RunPart, RunShape, RunTransaction, Segment,
    SourcePosition, TableChanges, Transaction, TransactionRun, Value,
};
pub use fence::{FenceClosed, WriteFence};
pub use traits::{Filter, ResumeError, Sink, Source, SourceEvent, SourceStats};
pub use ts::{CheckpointTs, CommitTs, ResolvedTs};
pub use validator::{MAX_REPORTED_MISMATCHES, ValidatorReport};
