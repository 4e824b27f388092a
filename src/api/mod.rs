//! HTTP APIs: the node's local API (SPEC §5) and the gateway's (SPEC §6). One error
//! type ([`error::ApiError`]) maps every failure to status + code; one extractor
//! ([`json::JsonBody`]) turns every malformed body into that shape.

pub mod error;
pub mod json;
pub mod node;

pub use error::{ApiError, ApiResult};
