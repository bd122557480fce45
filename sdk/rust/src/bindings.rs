//! Bindings generated from `wit/` (private; the SDK's own types wrap them).

#![allow(
    missing_docs,
    clippy::all,
    unsafe_op_in_unsafe_fn,
    reason = "wit-bindgen's generated code is not ours to document or restyle; only \
              missing_docs fires with today's wit-bindgen, but another version may \
              trip clippy or unsafe_op_in_unsafe_fn, so this is an allow, not an expect"
)]

pub mod sink_world {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "sluice:plugin/sink",
        pub_export_macro: true,
        export_macro_name: "__export_sink_world",
        default_bindings_module: "::sluice_sdk::__private::sink_world",
        runtime_path: "::sluice_sdk::__private::wit_bindgen::rt",
        type_section_suffix: "sluice-sink",
    });
}

pub mod filter_world {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "sluice:plugin/filter",
        pub_export_macro: true,
        export_macro_name: "__export_filter_world",
        default_bindings_module: "::sluice_sdk::__private::filter_world",
        runtime_path: "::sluice_sdk::__private::wit_bindgen::rt",
        type_section_suffix: "sluice-filter",
        with: {
            "sluice:plugin/types@0.2.0": crate::bindings::sink_world::sluice::plugin::types,
            "sluice:plugin/host@0.2.0": crate::bindings::sink_world::sluice::plugin::host,
        },
    });
}
