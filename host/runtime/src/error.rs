//! Errors of this crate, grouped by what the caller does next.

/// Loading a plugin failed: reject the upload or the changefeed, with this message.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("not a WebAssembly file (it does not start with \\0asm)")]
    NotWasm,
    #[error(
        "this is a core WebAssembly module, not a component; build the plugin with \
         `cargo build --target wasm32-wasip2` (or wrap it with `wasm-tools component new`)"
    )]
    CoreModule,
    #[error("not a valid WebAssembly component: {0}")]
    Invalid(String),
    #[error(
        "component does not implement the sluice:plugin {world} world: missing export `{export}`"
    )]
    MissingExport { world: &'static str, export: String },
    #[error("component does not fit the sluice:plugin {world} world: {reason}")]
    WrongWorld { world: &'static str, reason: String },
    #[error("reading the plugin file {path} failed")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The runtime itself could not be set up (bad engine settings, no cache dir).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("invalid runtime settings: {0}")]
    Config(String),
    #[error("precompile cache at {path} is unusable")]
    Cache {
        path: String,
        #[source]
        source: std::io::Error,
    },
}
