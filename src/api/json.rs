//! A JSON body extractor whose every rejection is our documented error shape
//! (axum's own rejections answer plain text).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// `Json<T>` that answers `415 unsupported_media_type`, `413 payload_too_large` or
/// `400 bad_request` (with the serde path of the offending field) in our shape.
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let ct_ok = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                let mime = v.split(';').next().unwrap_or("").trim();
                mime.eq_ignore_ascii_case("application/json")
            })
            .unwrap_or(false);
        if !ct_ok {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as Content-Type: application/json",
            ));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    "request body exceeds the configured limit",
                )
            } else {
                ApiError::bad_request("could not read the request body")
            }
        })?;
        parse(&bytes).map(JsonBody)
    }
}

/// Parse JSON bytes into `T`, naming the failing field on error.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if std::str::from_utf8(bytes).is_err() {
        return Err(ApiError::bad_request("body is not valid UTF-8"));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error(de)
}

fn serde_path_to_error<'de, T: DeserializeOwned>(
    de: &mut serde_json::Deserializer<serde_json::de::SliceRead<'de>>,
) -> Result<T, ApiError> {
    let v = T::deserialize(&mut *de).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                "body is not valid JSON"
            }
            _ => "body has the wrong shape",
        };
        ApiError::bad_request(format!("{what}: {e}"))
    })?;
    de.end()
        .map_err(|_| ApiError::bad_request("trailing data after the JSON body"))?;
    Ok(v)
}

/// `Query<T>` whose rejection is our `bad_request` JSON.
pub struct QueryParams<T>(pub T);

impl<S, T> axum::extract::FromRequestParts<S> for QueryParams<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| QueryParams(q.0))
            .map_err(|e| ApiError::bad_request(format!("bad query string: {}", e.body_text())))
    }
}
