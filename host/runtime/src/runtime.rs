//! The engine, its linkers and the epoch ticker.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::bindings;
use crate::cache::PrecompileCache;
use crate::component::{PluginComponent, PluginKind, Pre};
use crate::config::RuntimeConfig;
use crate::error::{LoadError, RuntimeError};
use crate::share::CpuShares;
use crate::state::PluginState;

/// Owns the wasmtime engine. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct PluginRuntime {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) engine: Engine,
    pub(crate) sink_linker: Linker<PluginState>,
    pub(crate) filter_linker: Linker<PluginState>,
    pub(crate) cache: Option<PrecompileCache>,
    pub(crate) shares: CpuShares,
    /// The components loaded and still held, by digest and world.
    loaded: std::sync::Mutex<HashMap<(String, PluginKind), Weak<Pre>>>,
    stop_ticker: Arc<AtomicBool>,
}

impl Inner {
    /// The component `key` names, if something still holds it.
    pub(crate) fn loaded(&self, key: &(String, PluginKind)) -> Option<Arc<Pre>> {
        self.loaded
            .lock()
            .expect("not poisoned")
            .get(key)
            .and_then(Weak::upgrade)
    }

    /// Keeps `pre` findable under `key` while held (one that another load
    /// made meanwhile wins, so both share it); drops entries nothing holds.
    pub(crate) fn keep_loaded(&self, key: (String, PluginKind), pre: Pre) -> Arc<Pre> {
        let mut loaded = self.loaded.lock().expect("not poisoned");
        if let Some(held) = loaded.get(&key).and_then(Weak::upgrade) {
            return held;
        }
        loaded.retain(|_, w| w.strong_count() > 0);
        let pre = Arc::new(pre);
        loaded.insert(key, Arc::downgrade(&pre));
        pre
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

impl PluginRuntime {
    /// Build the engine and start its epoch ticker.
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        let mut pool = PoolingAllocationConfig::default();
        // Every component is held to per-component maximums (checked when it is
        // loaded), and the totals are those maximums times the instance slots: so
        // no component can take memories, tables or core instances that another
        // needs; only whole instance slots run out. (A Rust wasm32-wasip2
        // component has a handful of core instances, one memory and a few tables.)
        let n = config.max_instances;
        pool.total_component_instances(n)
            .max_memories_per_component(config.max_memories_per_component)
            .max_tables_per_component(config.max_tables_per_component)
            .max_core_instances_per_component(config.max_core_instances_per_component)
            .total_core_instances(n.saturating_mul(config.max_core_instances_per_component))
            .total_memories(n.saturating_mul(config.max_memories_per_component))
            .total_tables(n.saturating_mul(config.max_tables_per_component))
            .total_stacks(n)
            .max_memory_size(config.max_memory_bytes as usize);

        // wasmtime compiles a component's functions on rayon's global pool:
        // its threads run at compile priority too (if something built the
        // pool before, it keeps its threads' priority).
        let _ = rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("sluice-compile-{i}"))
            .start_handler(|_| crate::thread::lower_priority(crate::thread::COMPILE_NICE))
            .build_global();
        let mut wasm = Config::new();
        wasm.wasm_component_model(true)
            .epoch_interruption(true)
            .concurrency_support(false)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&wasm).map_err(|e| RuntimeError::Config(format!("{e:#}")))?;

        let mut sink_linker = linker(&engine)?;
        bindings::sql::add_to_linker::<_, HasSelf<_>>(&mut sink_linker, |s| s)
            .map_err(|e| RuntimeError::Config(format!("linking the sql interface: {e:#}")))?;
        let filter_linker = linker(&engine)?;
        let cache = config
            .cache_dir
            .as_deref()
            .map(|dir| PrecompileCache::open(dir, &engine, config.cache_max_bytes))
            .transpose()?;

        let stop_ticker = Arc::new(AtomicBool::new(false));
        {
            let engine = engine.clone();
            let stop = stop_ticker.clone();
            let tick = config.epoch_tick;
            std::thread::Builder::new()
                .name("sluice-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(tick);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| RuntimeError::Config(format!("cannot start the epoch thread: {e}")))?;
        }

        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                sink_linker,
                filter_linker,
                cache,
                shares: match config.plugin_turns {
                    Some(n) => CpuShares::new(n),
                    None => CpuShares::per_core(),
                },
                loaded: std::sync::Mutex::default(),
                stop_ticker,
            }),
        })
    }

    /// How plugin threads are shared between tenants: configure a tenant's
    /// weight, concurrency and CPU cap here; read what each used.
    pub fn shares(&self) -> &CpuShares {
        &self.inner.shares
    }

    /// [`PluginRuntime::load`] on a thread of its own at a low priority (as
    /// wasmtime's compile threads run): an upload compiles there, so one
    /// tenant's uploads take what the node leaves idle rather than the cores
    /// its neighbours' rows need. (A changefeed's start loads on the caller's
    /// blocking pool: it usually finds the precompiled artifact.) The outer
    /// error says the thread could not start or the compile panicked.
    pub async fn load_in_background(
        &self,
        kind: PluginKind,
        bytes: Vec<u8>,
    ) -> std::io::Result<Result<PluginComponent, LoadError>> {
        let runtime = self.clone();
        crate::thread::at_compile_priority(move || runtime.load(kind, &bytes))
            .await?
            .ok_or_else(|| std::io::Error::other("compiling the plugin panicked"))
    }

    /// Check `bytes` as a plugin of `kind`, precompile it (or take it from the
    /// cache) and prepare it for instantiation.
    pub fn load(&self, kind: PluginKind, bytes: &[u8]) -> Result<PluginComponent, LoadError> {
        PluginComponent::load(self, kind, bytes)
    }

    /// [`PluginRuntime::load`] from a file.
    pub fn load_file(&self, kind: PluginKind, path: &Path) -> Result<PluginComponent, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Io {
            path: path.display().to_string(),
            source,
        })?;
        self.load(kind, &bytes)
    }
}

fn linker(engine: &Engine) -> Result<Linker<PluginState>, RuntimeError> {
    let mut linker = Linker::new(engine);
    let err = |e: wasmtime::Error| RuntimeError::Config(format!("linking host interfaces: {e:#}"));
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(err)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(err)?;
    bindings::host::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).map_err(err)?;
    Ok(linker)
}
