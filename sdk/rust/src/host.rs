//! What the host offers a plugin: logging, metrics, a clock, and what it
//! runs for (the changefeed, its saved checkpoint).
//!
//! Inside the host these call the `sluice:plugin/host` imports. Natively (unit
//! tests, the [`crate::testing`] harness) logs go to stderr, metrics are recorded in
//! a thread-local you can inspect with [`native_counters`], and the clock is the
//! system clock.

#[cfg(target_arch = "wasm32")]
use crate::bindings::sink_world::sluice::plugin::host as imports;

/// Log severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Step-by-step detail (per row or per call). The host's default log filter
    /// hides it; an operator enables it with `SLUICE_LOG`.
    Trace,
    /// Detail for diagnosing a plugin, such as the resolved configuration. Hidden
    /// by the host's default log filter, like `Trace`.
    Debug,
    /// Normal events worth keeping: opened a connection, rotated a file. Shown by
    /// default.
    Info,
    /// Something unexpected the plugin handled itself (a retry, a skipped value).
    Warn,
    /// A failure the plugin could not handle; it usually also returns an
    /// [`Error`](crate::types::Error).
    Error,
}

/// Write a line to the host log.
pub fn log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    {
        let level = match level {
            Level::Trace => imports::Level::Trace,
            Level::Debug => imports::Level::Debug,
            Level::Info => imports::Level::Info,
            Level::Warn => imports::Level::Warn,
            Level::Error => imports::Level::Error,
        };
        imports::log(level, message);
    }
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[plugin {level:?}] {message}");
}

/// Log at info level.
pub fn info(message: &str) {
    log(Level::Info, message)
}

/// Log at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message)
}

/// Add `value` to the plugin counter `name`.
pub fn counter_add(name: &str, value: u64) {
    #[cfg(target_arch = "wasm32")]
    imports::counter_add(name, value);
    #[cfg(not(target_arch = "wasm32"))]
    native::COUNTERS.with(|c| *c.borrow_mut().entry(name.to_string()).or_default() += value);
}

/// Set the plugin gauge `name`.
pub fn gauge_set(name: &str, value: f64) {
    #[cfg(target_arch = "wasm32")]
    imports::gauge_set(name, value);
    #[cfg(not(target_arch = "wasm32"))]
    let _ = (name, value);
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn now_millis() -> u64 {
    #[cfg(target_arch = "wasm32")]
    {
        imports::now_millis()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// The changefeed this instance runs for (`tenant/name`): the same across
/// restarts, retries and swaps. Natively: what [`set_native_context`] set
/// (`test/changefeed` by default).
pub fn changefeed() -> String {
    #[cfg(target_arch = "wasm32")]
    {
        imports::changefeed()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        native::CONTEXT.with(|c| c.borrow().0.clone())
    }
}

/// The changefeed's checkpoint as last saved durably (0: none yet): after a
/// restart nothing at or below it is delivered again. Natively: what
/// [`set_native_context`] set (0 by default).
pub fn saved_checkpoint() -> u64 {
    #[cfg(target_arch = "wasm32")]
    {
        imports::saved_checkpoint()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        native::CONTEXT.with(|c| c.borrow().1)
    }
}

/// Sets what [`changefeed`] and [`saved_checkpoint`] return natively (tests).
#[cfg(not(target_arch = "wasm32"))]
pub fn set_native_context(changefeed: &str, saved_checkpoint: u64) {
    native::CONTEXT.with(|c| *c.borrow_mut() = (changefeed.to_string(), saved_checkpoint));
}

/// Counters recorded natively on this thread (not available inside the host).
#[cfg(not(target_arch = "wasm32"))]
pub fn native_counters() -> std::collections::BTreeMap<String, u64> {
    native::COUNTERS.with(|c| c.borrow().clone())
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    thread_local! {
        pub static COUNTERS: RefCell<BTreeMap<String, u64>> = const { RefCell::new(BTreeMap::new()) };
        pub static CONTEXT: RefCell<(String, u64)> = RefCell::new(("test/changefeed".to_string(), 0));
    }
}
