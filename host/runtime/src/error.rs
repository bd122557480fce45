//! Errors of this crate, grouped by what the caller does next.

/// Loading a plugin failed: reject the upload or the changefeed, with this message.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The bytes do not start with the WebAssembly magic `\0asm` and a version:
    /// the upload is some other file (a native library, an archive, an empty or
    /// truncated download).
    #[error("not a WebAssembly file (it does not start with \\0asm)")]
    NotWasm,
    /// A core WebAssembly module rather than a component, typically built for
    /// `wasm32-wasip1` or `wasm32-unknown-unknown`; the message says how to rebuild
    /// it.
    #[error(
        "this is a core WebAssembly module, not a component; build the plugin with \
         `cargo build --target wasm32-wasip2` (or wrap it with `wasm-tools component new`)"
    )]
    CoreModule,
    /// wasmtime could not validate or compile the component (malformed, or using a
    /// proposal the engine does not enable); holds wasmtime's full error chain.
    #[error("not a valid WebAssembly component: {0}")]
    Invalid(String),
    /// The component does not export the world's interface, or one of its
    /// functions.
    #[error(
        "component does not implement the sluice:plugin {world} world: missing export `{export}`"
    )]
    MissingExport {
        /// The world the plugin was loaded as: `"sink"` or `"filter"`.
        world: &'static str,
        /// The missing interface (`sluice:plugin/sink-api@0.2.0`) or function
        /// (`sluice:plugin/sink-api@0.2.0#flush`); a plugin built against another
        /// version of `wit/plugin.wit` shows up here.
        export: String,
    },
    /// The component was built against another version of the contract
    /// (`wit/plugin.wit`): it must be rebuilt with this host's SDK.
    #[error(
        "the plugin was built for the contract {found}, but this host implements sluice:plugin@{expected}: rebuild it against the current wit/plugin.wit (with the Rust SDK: update sluice-sdk and build again)"
    )]
    ContractVersion {
        /// The contract version the plugin exports (`sluice:plugin@0.1.0`).
        found: String,
        /// The version this host implements.
        expected: &'static str,
    },
    /// The component has the exports but does not fit the world: a function has the
    /// wrong signature, it imports something the host does not provide, or it was
    /// loaded as the other kind of plugin.
    #[error("component does not fit the sluice:plugin {world} world: {reason}")]
    WrongWorld {
        /// The world it was checked against: `"sink"` or `"filter"`.
        world: &'static str,
        /// What does not fit, from wasmtime's linker or from the kind check.
        reason: String,
    },
    /// A granted database cannot be used (its DSN is not valid, or is not
    /// of a supported kind).
    #[error(transparent)]
    Grant(#[from] crate::sql::GrantError),
    /// [`PluginRuntime::load_file`](crate::PluginRuntime::load_file) could not read
    /// the file.
    #[error("reading the plugin file {path} failed")]
    Io {
        /// The file, as given.
        path: String,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
}

/// The runtime itself could not be set up (bad engine settings, no cache dir).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// wasmtime refused the engine settings built from
    /// [`RuntimeConfig`](crate::RuntimeConfig) (for example limits the pooling
    /// allocator cannot reserve), linking the host interfaces failed, or the epoch
    /// thread could not be started. Fix the settings: only a failed thread start
    /// may pass on a retry.
    #[error("invalid runtime settings: {0}")]
    Config(String),
    /// The precompile cache directory
    /// ([`RuntimeConfig::cache_dir`](crate::RuntimeConfig::cache_dir)) could not be
    /// created. Fix its permissions, or run without a cache.
    #[error("precompile cache at {path} is unusable")]
    Cache {
        /// The cache directory.
        path: String,
        /// Why it could not be created.
        #[source]
        source: std::io::Error,
    },
}
