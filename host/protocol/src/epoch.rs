//! Epochs: every (re)start of a changefeed runs under a new, larger epoch, and
//! whatever a pipeline reports or writes carries the epoch it was started with.
//! Anything from another epoch is fenced, so a pipeline that outlived a restart
//! (a slow shutdown, a partitioned capture) cannot move the changefeed.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The incarnation a pipeline runs under. `Epoch(0)` means never started.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Epoch(pub u64);

impl Epoch {
    /// Before the first start.
    pub const NONE: Self = Self(0);

    /// The epoch of the next start.
    pub const fn next(self) -> Self {
        Self(self.0 + 1)
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Lets a write (a checkpoint, an error report, a status update) through only if it
/// comes from the current epoch. An older writer was superseded by a restart; a newer
/// one means `current` was read from a stale copy of the changefeed, and this reader
/// must not act on it either.
pub fn fence(writer: Epoch, current: Epoch) -> Result<(), Fenced> {
    if writer == current {
        Ok(())
    } else {
        Err(Fenced { writer, current })
    }
}

/// A write from a pipeline whose epoch is not the changefeed's current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenced {
    /// The epoch the writer runs under.
    pub writer: Epoch,
    /// The changefeed's epoch as this reader knows it.
    pub current: Epoch,
}

impl fmt::Display for Fenced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.writer < self.current {
            write!(
                f,
                "write from epoch {} fenced: the changefeed was restarted and now runs at epoch {}",
                self.writer, self.current
            )
        } else {
            write!(
                f,
                "write from epoch {} fenced: this copy of the changefeed is at epoch {}, older \
                 than the writer; reload it",
                self.writer, self.current
            )
        }
    }
}

impl std::error::Error for Fenced {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_current_epoch_passes_the_fence() {
        assert_eq!(fence(Epoch(3), Epoch(3)), Ok(()));
        let err = fence(Epoch(2), Epoch(3)).unwrap_err();
        assert_eq!(
            err,
            Fenced {
                writer: Epoch(2),
                current: Epoch(3)
            }
        );
        assert_eq!(
            err.to_string(),
            "write from epoch 2 fenced: the changefeed was restarted and now runs at epoch 3"
        );
        assert_eq!(
            fence(Epoch(4), Epoch(3)).unwrap_err().to_string(),
            "write from epoch 4 fenced: this copy of the changefeed is at epoch 3, older than \
             the writer; reload it"
        );
    }
}
