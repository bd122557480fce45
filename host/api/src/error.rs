//! The one place where domain errors become gRPC codes and HTTP statuses.

use axum::http::StatusCode;
use sluice_auth::AuthError;
use sluice_owner::OwnerError;
use sluice_registry::RegistryError;
use tonic::Status;

/// The gRPC status of an owner error.
pub fn status(e: OwnerError) -> Status {
    match e {
        OwnerError::Invalid(m) => Status::invalid_argument(m),
        OwnerError::NotFound(m) => Status::not_found(m),
        OwnerError::AlreadyExists(m) => Status::already_exists(m),
        OwnerError::Precondition(m) => Status::failed_precondition(m),
        OwnerError::Exhausted(m) => Status::resource_exhausted(m),
        OwnerError::DataLoss(m) => Status::data_loss(m),
        OwnerError::Unavailable(m) => Status::unavailable(m),
        OwnerError::Internal(m) => Status::internal(m),
    }
}

/// The HTTP status of an owner error.
pub fn http_status(e: &OwnerError) -> StatusCode {
    match e {
        OwnerError::Invalid(_) => StatusCode::BAD_REQUEST,
        OwnerError::NotFound(_) => StatusCode::NOT_FOUND,
        OwnerError::AlreadyExists(_) => StatusCode::CONFLICT,
        OwnerError::Precondition(_) => StatusCode::PRECONDITION_FAILED,
        OwnerError::Exhausted(_) => StatusCode::TOO_MANY_REQUESTS,
        OwnerError::DataLoss(_) | OwnerError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        OwnerError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The gRPC status of an authentication, authorization or tenancy error.
pub fn auth_status(e: AuthError) -> Status {
    match e {
        AuthError::Unauthenticated(m) => Status::unauthenticated(m),
        AuthError::Denied(m) => Status::permission_denied(m),
        AuthError::Invalid(m) => Status::invalid_argument(m),
        AuthError::NotFound(m) => Status::not_found(m),
        AuthError::AlreadyExists(m) => Status::already_exists(m),
        AuthError::InUse(m) => Status::failed_precondition(m),
        AuthError::Exhausted(m) => Status::resource_exhausted(m),
        e @ AuthError::Store(_) => Status::unavailable(chain(&e)),
        e @ AuthError::Io { .. } => Status::internal(chain(&e)),
    }
}

/// The HTTP status of an authentication, authorization or tenancy error.
pub fn auth_http_status(e: &AuthError) -> StatusCode {
    match e {
        AuthError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        AuthError::Denied(_) => StatusCode::FORBIDDEN,
        AuthError::Invalid(_) => StatusCode::BAD_REQUEST,
        AuthError::NotFound(_) => StatusCode::NOT_FOUND,
        AuthError::AlreadyExists(_) => StatusCode::CONFLICT,
        AuthError::InUse(_) => StatusCode::PRECONDITION_FAILED,
        AuthError::Exhausted(_) => StatusCode::TOO_MANY_REQUESTS,
        AuthError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        AuthError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An error with its causes, `: `-joined.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The gRPC status of a registry error (uploads, listings, lookups).
pub fn registry_status(e: RegistryError) -> Status {
    status(sluice_capture::registry_error(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_owner_error_has_its_code_and_status() {
        let cases = [
            (
                OwnerError::Invalid("x".into()),
                tonic::Code::InvalidArgument,
                400,
            ),
            (OwnerError::NotFound("x".into()), tonic::Code::NotFound, 404),
            (
                OwnerError::AlreadyExists("x".into()),
                tonic::Code::AlreadyExists,
                409,
            ),
            (
                OwnerError::Precondition("x".into()),
                tonic::Code::FailedPrecondition,
                412,
            ),
            (
                OwnerError::Exhausted("x".into()),
                tonic::Code::ResourceExhausted,
                429,
            ),
            (OwnerError::DataLoss("x".into()), tonic::Code::DataLoss, 500),
            (
                OwnerError::Unavailable("x".into()),
                tonic::Code::Unavailable,
                503,
            ),
            (OwnerError::Internal("x".into()), tonic::Code::Internal, 500),
        ];
        for (e, code, http) in cases {
            assert_eq!(http_status(&e).as_u16(), http, "{e:?}");
            let s = status(e);
            assert_eq!((s.code(), s.message()), (code, "x"));
        }
    }
}
