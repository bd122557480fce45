//! Loading and checking a plugin component.

use std::sync::Arc;

use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use crate::bindings;
use crate::cache::digest;
use crate::error::LoadError;
use crate::runtime::PluginRuntime;
use crate::state::PluginState;

/// The version of `wit/plugin.wit` this host implements.
pub const CONTRACT_VERSION: &str = "0.2.0";

/// Which world a plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PluginKind {
    /// The `sink` world: exports `sluice:plugin/sink-api` (validate-config, open,
    /// write, flush, apply-ddl, close) and delivers rows downstream; run it with
    /// [`WasmSink`](crate::WasmSink).
    Sink,
    /// The `filter` world: exports `sluice:plugin/filter-api` (validate-config,
    /// open, transform) and rewrites batches between the source and the sink; run
    /// it with [`WasmFilter`](crate::WasmFilter).
    Filter,
}

impl PluginKind {
    /// The world's name in `wit/plugin.wit`.
    pub fn world(self) -> &'static str {
        match self {
            PluginKind::Sink => "sink",
            PluginKind::Filter => "filter",
        }
    }

    /// The exported interface and its functions.
    fn exports(self) -> (&'static str, &'static [&'static str]) {
        match self {
            PluginKind::Sink => (
                "sluice:plugin/sink-api@0.2.0",
                &[
                    "validate-config",
                    "open",
                    "write",
                    "flush",
                    "apply-ddl",
                    "close",
                ],
            ),
            PluginKind::Filter => (
                "sluice:plugin/filter-api@0.2.0",
                &["validate-config", "open", "transform"],
            ),
        }
    }
}

#[derive(Clone)]
pub(crate) enum Pre {
    Sink(bindings::sink::SinkPre<PluginState>),
    Filter(bindings::filter::FilterPre<PluginState>),
}

/// A checked, compiled plugin, ready to instantiate. Cheap to clone.
#[derive(Clone)]
pub struct PluginComponent {
    pub(crate) runtime: PluginRuntime,
    pub(crate) kind: PluginKind,
    pub(crate) digest: String,
    pub(crate) pre: Arc<Pre>,
    /// The memory the plugin declares it needs (its `sluice:limits` section).
    pub(crate) declared_memory: Option<u64>,
}

impl std::fmt::Debug for PluginComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginComponent")
            .field("kind", &self.kind)
            .field("digest", &self.digest)
            .finish()
    }
}

impl PluginComponent {
    pub(crate) fn load(
        runtime: &PluginRuntime,
        kind: PluginKind,
        bytes: &[u8],
    ) -> Result<Self, LoadError> {
        if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
            return Err(LoadError::NotWasm);
        }
        if bytes[4..8] == [1, 0, 0, 0] {
            return Err(LoadError::CoreModule);
        }
        let declared_memory =
            crate::declared::declared_memory(bytes).map_err(LoadError::Invalid)?;
        let inner = &runtime.inner;
        let engine = &inner.engine;
        let digest = digest(bytes);
        // Every changefeed running these bytes shares one compiled component
        // (its code mapped once, one memory image), as long as one holds it.
        let key = (digest.clone(), kind);
        if let Some(pre) = inner.loaded(&key) {
            return Ok(Self {
                runtime: runtime.clone(),
                kind,
                digest,
                pre,
                declared_memory,
            });
        }
        let cached = inner.cache.as_ref().and_then(|c| c.get(engine, &digest));
        let component = match cached {
            Some(c) => c,
            None => {
                let artifact = engine
                    .precompile_component(bytes)
                    .map_err(|e| LoadError::Invalid(format!("{e:#}")))?;
                if let Some(cache) = &inner.cache {
                    cache.put(&digest, &artifact);
                }
                // SAFETY: `artifact` was produced just above by this engine's
                // `precompile_component`; it is not outside input.
                unsafe { Component::deserialize(engine, &artifact) }
                    .map_err(|e| LoadError::Invalid(format!("{e:#}")))?
            }
        };

        let world = kind.world();
        let ty = component.component_type();
        let (interface, functions) = kind.exports();
        let instance = ty.exports(engine).find_map(|(name, item)| match item.ty {
            ComponentItem::ComponentInstance(i) if name == interface => Some(i),
            _ => None,
        });
        let Some(instance) = instance else {
            // An export of the same interface at another version: a plugin
            // built against an older (or newer) contract.
            let base = interface.split('@').next().unwrap_or(interface);
            if let Some(other) = ty
                .exports(engine)
                .map(|(name, _)| name.to_string())
                .find(|name| name.split('@').next() == Some(base))
            {
                return Err(LoadError::ContractVersion {
                    found: format!("sluice:plugin@{}", other.split('@').nth(1).unwrap_or("?")),
                    expected: CONTRACT_VERSION,
                });
            }
            return Err(LoadError::MissingExport {
                world,
                export: interface.to_string(),
            });
        };
        let exported: Vec<String> = instance
            .exports(engine)
            .map(|(name, _)| name.to_string())
            .collect();
        if let Some(missing) = functions.iter().find(|f| !exported.iter().any(|x| x == *f)) {
            return Err(LoadError::MissingExport {
                world,
                export: format!("{interface}#{missing}"),
            });
        }
        let wrong = |e: wasmtime::Error| LoadError::WrongWorld {
            world,
            reason: format!("{e:#}"),
        };
        let pre = match kind {
            PluginKind::Sink => {
                let pre = inner
                    .sink_linker
                    .instantiate_pre(&component)
                    .map_err(wrong)?;
                Pre::Sink(bindings::sink::SinkPre::new(pre).map_err(wrong)?)
            }
            PluginKind::Filter => {
                let pre = inner
                    .filter_linker
                    .instantiate_pre(&component)
                    .map_err(wrong)?;
                Pre::Filter(bindings::filter::FilterPre::new(pre).map_err(wrong)?)
            }
        };
        let pre = inner.keep_loaded(key, pre);
        Ok(Self {
            runtime: runtime.clone(),
            kind,
            digest,
            pre,
            declared_memory,
        })
    }

    /// The linear memory the plugin declares it needs, in bytes (its
    /// `sluice:limits` section): the default quota of a changefeed that gives
    /// none (`sluice_config::Limits::resolve_memory`).
    pub fn declared_memory(&self) -> Option<u64> {
        self.declared_memory
    }

    /// The world this plugin implements.
    pub fn kind(&self) -> PluginKind {
        self.kind
    }

    /// Whether `self` and `other` run one compiled component (loads of the
    /// same bytes share it while one of them is held).
    pub fn shares_code_with(&self, other: &PluginComponent) -> bool {
        Arc::ptr_eq(&self.pre, &other.pre)
    }

    /// Hex sha256 of the component's bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }
}
