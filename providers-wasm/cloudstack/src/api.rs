//! CloudStack's API as data: the objects the provider reads ([`model`]), the shapes of its
//! answers ([`response`]: lists, async jobs, errors) and what its failures mean for the
//! contract ([`error`]). Pure; the HTTP calls live in [`crate::client`].

pub mod error;
pub mod model;
pub mod response;

pub use error::{ApiError, Context};
