//! Host-side bindings for the two worlds (private to this crate).

pub mod sink {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "sluice:plugin/sink",
        exports: { default: async },
        imports: {
            "sluice:plugin/sql.execute": async,
            "sluice:plugin/sql.query": async,
        },
    });
}

pub mod filter {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "sluice:plugin/filter",
        exports: { default: async },
        with: {
            "sluice:plugin/types": crate::bindings::sink::sluice::plugin::types,
            "sluice:plugin/host": crate::bindings::sink::sluice::plugin::host,
        },
    });
}

pub use sink::sluice::plugin::host;
pub use sink::sluice::plugin::sql;
pub use sink::sluice::plugin::types;
