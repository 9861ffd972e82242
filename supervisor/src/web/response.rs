//! Response bodies and the JSON error shape every failure uses: `{"error": code, "message": ...}`.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::header::{
    HeaderMap, HeaderValue, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, WWW_AUTHENTICATE,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use hyper::{Response, StatusCode};
use serde::Serialize;

use super::actions::ActionError;

pub type Body = BoxBody<Bytes, Infallible>;

pub const JSON: &str = "application/json";

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// The page loads nothing but its own files and may not be framed (clickjacking).
const POLICY: &str =
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// Headers every response carries: live state is never cached, and the browser is told not to
/// guess types, load foreign content or frame the page.
pub fn common_headers(headers: &mut HeaderMap, content_type: &'static str) {
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
}

/// A complete response with `content_type`.
pub fn bytes_response(
    status: StatusCode,
    content_type: &'static str,
    bytes: impl Into<Bytes>,
) -> Response<Body> {
    let mut response = Response::new(full(bytes));
    *response.status_mut() = status;
    common_headers(response.headers_mut(), content_type);
    response
}

pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(bytes) => bytes_response(status, JSON, bytes),
        Err(e) => ApiError::internal(format!("encoding the response: {e}")).into_response(),
    }
}

/// An API failure, answered as JSON with a machine code and a human message.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
    message: &'a str,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into() }
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", message)
    }
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed", message)
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad-request", message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large", message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    pub fn into_response(self) -> Response<Body> {
        let body = ErrorBody { error: self.code, message: &self.message };
        let bytes = serde_json::to_vec(&body).unwrap_or_else(|_| b"{\"error\":\"internal\"}".to_vec());
        let mut response = bytes_response(self.status, JSON, bytes);
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<ActionError> for ApiError {
    fn from(e: ActionError) -> Self {
        let message = e.to_string();
        match e {
            ActionError::Locked(_) => Self::new(StatusCode::LOCKED, "locked", message),
            ActionError::NotFound(_) => Self::new(StatusCode::NOT_FOUND, "not-found", message),
            ActionError::Invalid(_) => Self::new(StatusCode::BAD_REQUEST, "bad-request", message),
            ActionError::Conflict(_) => Self::new(StatusCode::CONFLICT, "conflict", message),
            ActionError::NotImplemented(_) => {
                Self::new(StatusCode::NOT_IMPLEMENTED, "not-implemented", message)
            }
            ActionError::Failed(_) => Self::new(StatusCode::INTERNAL_SERVER_ERROR, "failed", message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_errors_map_to_statuses() {
        let cases = [
            (ActionError::Locked("ota".into()), StatusCode::LOCKED),
            (ActionError::NotFound("x".into()), StatusCode::NOT_FOUND),
            (ActionError::Invalid("x".into()), StatusCode::BAD_REQUEST),
            (ActionError::Conflict("x".into()), StatusCode::CONFLICT),
            (ActionError::NotImplemented("x".into()), StatusCode::NOT_IMPLEMENTED),
            (ActionError::Failed("x".into()), StatusCode::INTERNAL_SERVER_ERROR),
        ];
        for (error, status) in cases {
            assert_eq!(ApiError::from(error).status, status);
        }
    }
}
