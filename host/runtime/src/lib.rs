//! `sluice-runtime`: loads plugin components and runs them sandboxed. This is the
//! only crate that names wasmtime.
//!
//! - [`PluginRuntime`] owns the engine (pooling allocator, epoch interruption), the
//!   linkers and the precompile cache.
//! - [`PluginComponent`] is a loaded, checked, precompiled plugin of one world.
//! - [`WasmSink`] and [`WasmFilter`] run instances of a component behind the
//!   `sluice-core` traits with a memory quota, a CPU deadline per call, host-call
//!   timeouts and only the capabilities granted. A trap, OOM or timeout drops the
//!   instance and reports [`sluice_core::PluginError::Stopped`]; the next call gets
//!   a fresh instance.
//! - [`CpuShares`] shares the plugin threads between tenants by weight, with a
//!   concurrency limit and a CPU cap per tenant.

mod bindings;
mod cache;
mod component;
mod config;
mod convert;
mod declared;
mod error;
mod filter;
mod instance;
mod runtime;
mod share;
mod sink;
mod sql;
mod state;
mod stderr;
mod thread;

pub use cache::{mark_used, trim_cache_dir};
pub use component::{CONTRACT_VERSION, PluginComponent, PluginKind};
pub use config::{
    Capabilities, DEFAULT_CACHE_MAX_BYTES, PluginLimits, PluginSettings, RuntimeConfig, reaches,
};
pub use declared::{LIMITS_SECTION, with_declared_memory};
pub use error::{LoadError, RuntimeError};
pub use filter::WasmFilter;
pub use runtime::PluginRuntime;
pub use share::{BURST, CpuShares, DEFAULT_WEIGHT, ShareConfig, ShareUsage, TenantShare, Turn};
pub use sink::WasmSink;
pub use sql::{GrantError, MAX_GROUPS, MAX_QUERY_ROWS, MAX_STATEMENTS, SqlPools};
pub use state::{LATENCY_BUCKETS, LatencyHistogram, PluginStats};
pub use thread::live_plugin_threads;
