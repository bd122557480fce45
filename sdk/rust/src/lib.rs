//! # sluice-sdk: write Sluice plugins in Rust
//!
//! A Sluice plugin is a WebAssembly component built for `wasm32-wasip2` that
//! implements the `sink` or the `filter` world of the `sluice:plugin` WIT package.
//! This crate hides the bindings: implement [`Sink`] (or [`Filter`]) on a type, call
//! [`export_sink!`] (or [`export_filter!`]) once, and build with
//! `cargo build --target wasm32-wasip2 --release`.
//!
//! Batches are column-oriented on the wire; read them through [`BatchView`],
//! [`TableView`], [`Row`], [`Image`] and [`Value`], which borrow from the batch and
//! never copy. Test the logic natively with [`testing::SinkHarness`]. A sink reaches
//! the network through [`http`] and [`tcp`] (and databases through [`sql`]), each with
//! a test double for native tests.
//!
//! ```
//! use sluice_sdk::{BatchView, Error, Sink, Value};
//!
//! /// Counts rows per operation and remembers the highest id seen.
//! #[derive(Default)]
//! pub struct Counter {
//!     rows: u64,
//!     max_id: i64,
//!     acknowledged: u64,
//! }
//!
//! #[derive(serde::Deserialize)]
//! #[serde(deny_unknown_fields)]
//! pub struct Config {
//!     #[serde(default)]
//!     id_column: Option<String>,
//! }
//!
//! impl Sink for Counter {
//!     type Config = Config;
//!
//!     fn open(_config: Config) -> Result<Self, Error> {
//!         Ok(Counter::default())
//!     }
//!
//!     fn write(&mut self, batch: BatchView<'_>) -> Result<(), Error> {
//!         for table in batch.tables() {
//!             for row in table.rows() {
//!                 self.rows += 1;
//!                 if let Some(Value::Int(id)) = row.image().get("id") {
//!                     self.max_id = self.max_id.max(id);
//!                 }
//!             }
//!         }
//!         Ok(())
//!     }
//!
//!     fn flush(&mut self, ts: u64) -> Result<(), Error> {
//!         // Nothing is buffered, so everything written is already "durable".
//!         self.acknowledged = ts;
//!         Ok(())
//!     }
//! }
//!
//! // In the plugin crate (a `cdylib`): sluice_sdk::export_sink!(Counter);
//!
//! // Native test, no WebAssembly:
//! use sluice_sdk::testing::{schema, SinkHarness};
//! use sluice_sdk::{ColumnType, TableBatchBuilder};
//!
//! let users = schema(1, "app", "users", &[("id", ColumnType::Int, true), ("name", ColumnType::Text, false)]);
//! let mut rows = TableBatchBuilder::new(&users);
//! rows.insert(100, &[Value::Int(7), Value::Text("ada")]);
//! rows.update(101, &[Value::Int(7), Value::Text("ada")], &[Value::Int(7), Value::Text("ada l.")]);
//! let mut sink = SinkHarness::<Counter>::open("{}").unwrap();
//! sink.write(&[&users], vec![rows.finish()]).unwrap();
//! sink.flush(101).unwrap();
//! assert_eq!(sink.sink().rows, 2);
//! assert_eq!(sink.sink().max_id, 7);
//! ```

// The generated bindings name this crate by its absolute path.
extern crate self as sluice_sdk;

mod bindings;
mod build;
pub mod host;
pub mod http;
mod plugin;
pub mod sql;
pub mod tcp;
pub mod testing;
mod text;
mod types;
mod view;

pub use build::{TableBatchBuilder, append_value};
pub use plugin::{Filter, FilterInstance, Sink, SinkInstance, parse_config};
pub use text::{civil_from_days, date_text, datetime_text, glob_match};
pub use types::{
    Batch, ByteValues, Column, ColumnData, ColumnType, ColumnValues, DdlEvent, Error,
    FLAG_NO_FK_CHECKS, FLAG_REPLAY, FLAG_SPLIT, Op, QualifiedName, TableBatch, TableSchema,
};
pub use view::{BatchView, Image, Row, Rows, Schemas, TableView, Value};

#[doc(hidden)]
pub mod __private {
    pub use crate::bindings::filter_world;
    pub use crate::bindings::sink_world;
    pub use wit_bindgen;
}

/// Export a [`Sink`] implementation as the component's `sink` world.
///
/// Call it once, at the crate root of a `cdylib` plugin crate. It expands to
/// nothing on native targets, so the same crate also builds for native tests.
#[macro_export]
macro_rules! export_sink {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
        #[doc(hidden)]
        pub struct __SluiceSinkExport;

        ::std::thread_local! {
            static __SLUICE_SINK: ::std::cell::RefCell<::std::option::Option<$crate::SinkInstance<$ty>>> =
                const { ::std::cell::RefCell::new(::std::option::Option::None) };
        }

        fn __sluice_with_sink<R>(
            f: impl FnOnce(&mut $crate::SinkInstance<$ty>) -> ::std::result::Result<R, $crate::Error>,
        ) -> ::std::result::Result<R, $crate::Error> {
            __SLUICE_SINK.with(|slot| match slot.borrow_mut().as_mut() {
                ::std::option::Option::Some(instance) => f(instance),
                ::std::option::Option::None => ::std::result::Result::Err($crate::Error::fatal(
                    "the host called the sink before open",
                )),
            })
        }

        impl $crate::__private::sink_world::exports::sluice::plugin::sink_api::Guest for __SluiceSinkExport {
            fn validate_config(config: ::std::string::String) -> ::std::result::Result<(), $crate::Error> {
                $crate::SinkInstance::<$ty>::validate(&config)
            }
            fn open(config: ::std::string::String) -> ::std::result::Result<(), $crate::Error> {
                let instance = $crate::SinkInstance::<$ty>::open(&config)?;
                __SLUICE_SINK.with(|slot| *slot.borrow_mut() = ::std::option::Option::Some(instance));
                ::std::result::Result::Ok(())
            }
            fn write(batch: $crate::Batch) -> ::std::result::Result<(), $crate::Error> {
                __sluice_with_sink(|s| s.write(batch))
            }
            fn flush(ts: u64) -> ::std::result::Result<(), $crate::Error> {
                __sluice_with_sink(|s| s.flush(ts))
            }
            fn apply_ddl(ddl: $crate::DdlEvent) -> ::std::result::Result<(), $crate::Error> {
                __sluice_with_sink(|s| s.apply_ddl(&ddl))
            }
            fn close() -> ::std::result::Result<(), $crate::Error> {
                __sluice_with_sink(|s| s.close())
            }
        }

        $crate::__private::sink_world::__export_sink_world!(
            __SluiceSinkExport with_types_in $crate::__private::sink_world
        );
        };
    };
}

/// Export a [`Filter`] implementation as the component's `filter` world.
///
/// Call it once, at the crate root of a `cdylib` plugin crate. It expands to
/// nothing on native targets, so the same crate also builds for native tests.
#[macro_export]
macro_rules! export_filter {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
        #[doc(hidden)]
        pub struct __SluiceFilterExport;

        ::std::thread_local! {
            static __SLUICE_FILTER: ::std::cell::RefCell<::std::option::Option<$crate::FilterInstance<$ty>>> =
                const { ::std::cell::RefCell::new(::std::option::Option::None) };
        }

        impl $crate::__private::filter_world::exports::sluice::plugin::filter_api::Guest for __SluiceFilterExport {
            fn validate_config(config: ::std::string::String) -> ::std::result::Result<(), $crate::Error> {
                $crate::FilterInstance::<$ty>::validate(&config)
            }
            fn open(config: ::std::string::String) -> ::std::result::Result<(), $crate::Error> {
                let instance = $crate::FilterInstance::<$ty>::open(&config)?;
                __SLUICE_FILTER.with(|slot| *slot.borrow_mut() = ::std::option::Option::Some(instance));
                ::std::result::Result::Ok(())
            }
            fn transform(batch: $crate::Batch) -> ::std::result::Result<$crate::Batch, $crate::Error> {
                __SLUICE_FILTER.with(|slot| match slot.borrow_mut().as_mut() {
                    ::std::option::Option::Some(instance) => instance.transform(batch),
                    ::std::option::Option::None => ::std::result::Result::Err($crate::Error::fatal(
                        "the host called the filter before open",
                    )),
                })
            }
        }

        $crate::__private::filter_world::__export_filter_world!(
            __SluiceFilterExport with_types_in $crate::__private::filter_world
        );
        };
    };
}
