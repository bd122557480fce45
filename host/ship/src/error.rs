//! How shipping fails, grouped by what the caller does next.

/// Why a shipment could not go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShipError {
    /// The receiver was refused (unknown run, wrong secret, already
    /// attached, a window out of range): fix the request; retrying the same
    /// one does not help.
    #[error("shipment refused: {0}")]
    Refused(String),
    /// The stream between the captures broke, or the other side went away:
    /// the run ends and the changefeed runs again from its checkpoint.
    #[error("shipment lost: {0}")]
    Lost(String),
    /// A frame did not decode or its rows do not fit their schema: nothing of
    /// it is handed on.
    #[error("malformed shipment: {0}")]
    Malformed(String),
}

impl ShipError {
    /// Whether running again may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Lost(_))
    }
}

impl From<ShipError> for tonic::Status {
    fn from(e: ShipError) -> Self {
        match e {
            ShipError::Refused(m) => tonic::Status::failed_precondition(m),
            ShipError::Lost(m) => tonic::Status::unavailable(m),
            ShipError::Malformed(m) => tonic::Status::invalid_argument(m),
        }
    }
}
