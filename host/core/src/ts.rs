//! Timestamp newtypes. A commit ts is TSO-shaped: physical milliseconds shifted left
//! by 18 bits, or-ed with a logical counter. Mixing the three kinds fails to compile.

use serde::{Deserialize, Serialize};

macro_rules! ts_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(u64);

        impl $name {
            /// The zero timestamp.
            pub const ZERO: Self = Self(0);

            /// The timestamp with raw value `raw`.
            pub const fn new(raw: u64) -> Self {
                Self(raw)
            }

            /// The raw value.
            pub const fn get(self) -> u64 {
                self.0
            }

            /// Physical part in milliseconds since the Unix epoch.
            pub const fn physical_millis(self) -> u64 {
                self.0 >> 18
            }

            /// Logical part.
            pub const fn logical(self) -> u64 {
                self.0 & ((1 << 18) - 1)
            }

            /// Compose from physical milliseconds and a logical counter.
            pub const fn compose(physical_millis: u64, logical: u64) -> Self {
                Self((physical_millis << 18) | (logical & ((1 << 18) - 1)))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

ts_type!(
    /// The commit ts of one upstream transaction; strictly increasing per source.
    CommitTs
);
ts_type!(
    /// No event with a commit ts <= this will arrive any more.
    ResolvedTs
);
ts_type!(
    /// Every event with commit ts <= this is durable downstream; only moves forward.
    CheckpointTs
);

/// `impl From<$from> for $to`, the raw value carried over, with why it holds.
macro_rules! ts_from {
    ($($(#[$doc:meta])* $from:ident => $to:ident;)*) => {
        $(
            impl From<$from> for $to {
                $(#[$doc])*
                fn from(ts: $from) -> Self {
                    $to(ts.0)
                }
            }
        )*
    };
}

ts_from! {
    /// Once a source has emitted every row of a transaction, its commit ts is resolved.
    CommitTs => ResolvedTs;
    /// A flush acknowledged up to a resolved ts makes it the checkpoint.
    ResolvedTs => CheckpointTs;
    /// Every change up to this transaction is downstream.
    CommitTs => CheckpointTs;
    /// Where replication resumes: after the checkpoint.
    CheckpointTs => CommitTs;
    /// Rows committed up to the resolved ts.
    ResolvedTs => CommitTs;
    /// What is downstream is resolved.
    CheckpointTs => ResolvedTs;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compose_round_trips_physical_and_logical() {
        let ts = CommitTs::compose(1_700_000_000_000, 42);
        assert_eq!(ts.physical_millis(), 1_700_000_000_000);
        assert_eq!(ts.logical(), 42);
        assert!(CommitTs::compose(1, 0) > CommitTs::compose(0, 262_143));
    }
}
