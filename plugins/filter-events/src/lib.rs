//! `filter-events`: drops the row changes of the tables that match a rule's
//! patterns when their kind (insert, update, delete) is one the rule ignores.

mod config;
mod drop_events;

pub use config::{Config, Event, Rule};
pub use drop_events::DropEvents;

sluice_sdk::export_filter!(DropEvents);
