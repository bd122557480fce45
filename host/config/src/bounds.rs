//! The ranges of the changefeed config's numbers, checked when a config is
//! validated (documented in docs/configuration.md). The datagen source's own
//! ranges are in [`crate::source`].

/// Largest changefeed file, in bytes.
pub const MAX_FILE_BYTES: usize = 128 << 10;
/// Most filters in a chain.
pub const MAX_FILTERS: usize = 16;
/// Largest plugin options (`config`), as JSON bytes.
pub const MAX_PLUGIN_CONFIG_BYTES: usize = 64 << 10;
/// Most entries in `capabilities.tcp` and in `capabilities.http`.
pub const MAX_GRANTS: usize = 64;
/// Longest `capabilities.http` entry.
pub const MAX_GRANT_CHARS: usize = 255;
/// Smallest plugin memory quota: 1 MiB.
pub const MIN_MEMORY: u64 = 1 << 20;
/// Largest plugin memory quota: 4 GiB (a 32-bit linear memory's reach).
pub const MAX_MEMORY: u64 = 4 << 30;
/// Plugin call deadlines: 1 ms ..= 10 minutes.
pub const MAX_TIMEOUT_MS: u64 = 10 * 60 * 1000;
/// Fewest host resources per plugin instance.
pub const MIN_RESOURCES: u64 = 16;
/// Most host resources per plugin instance.
pub const MAX_RESOURCES: u64 = 65_536;
/// `pipeline.max-batch-rows`: 1 ..= 65536.
pub const MAX_BATCH_ROWS: usize = 65_536;
/// Smallest `pipeline.max-batch-bytes`: 1 KiB.
pub const MIN_BATCH_BYTES: u64 = 1 << 10;
/// Largest `pipeline.max-batch-bytes`: 256 MiB.
pub const MAX_BATCH_BYTES: u64 = 256 << 20;
/// `pipeline.event-cache-count`: 1 ..= 1048576.
pub const MAX_EVENT_CACHE: usize = 1 << 20;
/// Smallest `pipeline.event-cache-bytes`: 1 MiB.
pub const MIN_EVENT_CACHE_BYTES: u64 = 1 << 20;
/// Largest `pipeline.event-cache-bytes`: 1 GiB.
pub const MAX_EVENT_CACHE_BYTES: u64 = 1 << 30;
/// `pipeline.max-retries`: 0 ..= 1000.
pub const MAX_RETRIES: u32 = 1_000;
/// Intervals in `[pipeline]`: at most one hour.
pub const MAX_INTERVAL_MS: u64 = 3_600_000;
/// Most `filter.rules`.
pub const MAX_FILTER_RULES: usize = 256;
/// Longest table pattern (in `filter.rules` or a `matcher`), in characters.
pub const MAX_PATTERN_CHARS: usize = 256;
/// Most `filter.ignore-txn-start-ts` values.
pub const MAX_IGNORE_TXNS: usize = 10_000;
/// Most `[[filter.event-filters]]` entries.
pub const MAX_EVENT_FILTERS: usize = 256;
/// Most `matcher` patterns of one event filter.
pub const MAX_EVENT_MATCHERS: usize = 64;
/// Most `ignore-event` names of one event filter.
pub const MAX_IGNORE_EVENTS: usize = 32;
