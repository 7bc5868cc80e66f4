//! Typed access to the host's `kube` import.
//!
//! The import moves objects as JSON text; these helpers serialize requests and deserialize answers
//! with serde, so a provider works with its own structs or with `serde_json::Value`:
//!
//! ```ignore
//! use capstan_provider_sdk::kube::{self, Cluster, Target};
//! let nodes = Target::new(Cluster::Workload, "v1", "Node");
//! let node: serde_json::Value = kube::get(&nodes.object("worker-1"))?;
//! ```
//!
//! Every call is checked by the host against the provider's grants; a call outside them fails with
//! [`KubeError::PermissionDenied`].

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::bindings::capstan::provider::kube as raw;
pub use crate::bindings::capstan::provider::kube::{
    Cluster, KubeError, ListOptions, ObjectRef, PatchType, Target,
};

/// A failed kube call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The host or the API server refused the call.
    #[error("{}: {}", .0.kind(), .0.message())]
    Kube(#[from] KubeError),
    /// The request body could not be serialized.
    #[error("encoding the request: {0}")]
    Encode(#[source] serde_json::Error),
    /// The answer did not have the expected shape.
    #[error("decoding the answer: {0}")]
    Decode(#[source] serde_json::Error),
}

impl Error {
    /// Whether the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Kube(KubeError::NotFound(_)))
    }

    /// The kube error, if the call reached the host.
    pub fn kube_error(&self) -> Option<&KubeError> {
        match self {
            Error::Kube(e) => Some(e),
            _ => None,
        }
    }

    /// The provider error a failed call becomes, in `create` (`launch = true`) or any other
    /// export:
    ///
    /// - `not-found` → `not-found`
    /// - `conflict`, `unavailable` → `retryable`
    /// - `permission-denied` → create: `create-failed{PermissionDenied}`; otherwise `invalid` (an
    ///   admin must widen the grants, retrying will not help)
    /// - `invalid` → create: `create-failed{ObjectRejected}`; otherwise `invalid`
    /// - `other` → create: `create-failed{KubeError}`; otherwise `retryable`
    /// - an answer that does not decode → `retryable`; a request that does not encode → `invalid`
    pub fn into_provider_error(self, launch: bool) -> crate::ProviderError {
        use crate::ProviderError;
        let text = self.to_string();
        match self {
            Error::Kube(KubeError::NotFound(_)) => ProviderError::NotFound(text),
            Error::Kube(KubeError::Conflict(_) | KubeError::Unavailable(_)) => {
                ProviderError::Retryable(text)
            }
            Error::Kube(KubeError::PermissionDenied(_)) if launch => {
                ProviderError::create_failed("PermissionDenied", text)
            }
            Error::Kube(KubeError::Invalid(_)) if launch => {
                ProviderError::create_failed("ObjectRejected", text)
            }
            Error::Kube(KubeError::Other(_)) if launch => {
                ProviderError::create_failed("KubeError", text)
            }
            Error::Kube(KubeError::PermissionDenied(_) | KubeError::Invalid(_)) => {
                ProviderError::Invalid(text)
            }
            Error::Kube(KubeError::Other(_)) | Error::Decode(_) => ProviderError::Retryable(text),
            Error::Encode(_) => ProviderError::Invalid(text),
        }
    }
}

impl KubeError {
    /// The kebab-case WIT case name (`permission-denied`, `not-found`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            KubeError::PermissionDenied(_) => "permission-denied",
            KubeError::NotFound(_) => "not-found",
            KubeError::Conflict(_) => "conflict",
            KubeError::Invalid(_) => "invalid",
            KubeError::Unavailable(_) => "unavailable",
            KubeError::Other(_) => "other",
        }
    }

    /// The message the host or the server gave.
    pub fn message(&self) -> &str {
        match self {
            KubeError::PermissionDenied(m)
            | KubeError::NotFound(m)
            | KubeError::Conflict(m)
            | KubeError::Invalid(m)
            | KubeError::Unavailable(m)
            | KubeError::Other(m) => m,
        }
    }
}

impl Target {
    /// A kind in a cluster: `Target::new(Cluster::Workload, "v1", "Node")`. Cluster-scoped (or all
    /// namespaces, for lists) until [`namespaced`](Self::namespaced).
    pub fn new(cluster: Cluster, api_version: &str, kind: &str) -> Self {
        Self {
            cluster,
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: None,
        }
    }

    /// The same kind in one namespace.
    pub fn namespaced(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_string());
        self
    }

    /// One object of this kind.
    pub fn object(&self, name: &str) -> ObjectRef {
        ObjectRef {
            target: self.clone(),
            name: name.to_string(),
            subresource: None,
        }
    }
}

impl ObjectRef {
    /// A subresource (`status`, `scale`) of the object.
    pub fn subresource(mut self, subresource: &str) -> Self {
        self.subresource = Some(subresource.to_string());
        self
    }
}

impl ListOptions {
    /// Objects matching a label selector (`app=web,tier!=db`).
    pub fn labels(selector: &str) -> Self {
        Self {
            label_selector: Some(selector.to_string()),
            ..Self::default()
        }
    }
}

fn decode<T: DeserializeOwned>(json: &str) -> Result<T, Error> {
    serde_json::from_str(json).map_err(Error::Decode)
}

fn encode<T: Serialize + ?Sized>(body: &T) -> Result<String, Error> {
    serde_json::to_string(body).map_err(Error::Encode)
}

/// Reads one object.
pub fn get<T: DeserializeOwned>(object: &ObjectRef) -> Result<T, Error> {
    decode(&raw::get(object)?)
}

/// Reads one object; `None` when it does not exist.
pub fn get_opt<T: DeserializeOwned>(object: &ObjectRef) -> Result<Option<T>, Error> {
    match raw::get(object) {
        Ok(json) => decode(&json).map(Some),
        Err(KubeError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Items a page when [`list`] reads a list a page at a time (contract 0.3).
#[cfg(feature = "v0_3")]
pub const PAGE_SIZE: u32 = 500;

/// A `...List` as far as [`list`] reads it.
#[derive(serde::Deserialize)]
struct List<T> {
    #[serde(default = "Vec::new")]
    items: Vec<T>,
    #[cfg(feature = "v0_3")]
    #[serde(default)]
    metadata: ListMeta,
}

#[cfg(feature = "v0_3")]
#[derive(Default, serde::Deserialize)]
struct ListMeta {
    /// The next page's token, when the server cut the list short.
    #[serde(default, rename = "continue")]
    continue_token: Option<String>,
}

/// Lists objects, returning the list's `items`: at most `options.limit` of them when it is set,
/// else all of them. Under contract 0.3 (the `v0_3` feature) "all" is read [`PAGE_SIZE`] items a
/// call, so neither one answer of the host (16 MiB at most) nor the raw JSON of the whole list in
/// the guest's memory bounds how many objects a provider can list; only the decoded `T`s are kept.
pub fn list<T: DeserializeOwned>(target: &Target, options: &ListOptions) -> Result<Vec<T>, Error> {
    #[cfg(feature = "v0_3")]
    if options.limit.is_none() {
        return read_pages(options, |page| raw::list(target, page));
    }
    let list: List<T> = decode(&raw::list(target, options)?)?;
    Ok(list.items)
}

/// Reads a list [`PAGE_SIZE`] items at a time through `fetch` (the `kube` import, or a test's
/// server), following each page's `metadata.continue`. An expired token fails the whole list
/// (`conflict`), as the API server leaves no consistent way to resume it.
#[cfg(feature = "v0_3")]
fn read_pages<T: DeserializeOwned>(
    options: &ListOptions,
    mut fetch: impl FnMut(&ListOptions) -> Result<String, KubeError>,
) -> Result<Vec<T>, Error> {
    let mut page = ListOptions {
        limit: Some(PAGE_SIZE),
        continue_token: None,
        ..options.clone()
    };
    let mut items = Vec::new();
    loop {
        let list: List<T> = decode(&fetch(&page)?)?;
        items.extend(list.items);
        match list.metadata.continue_token {
            Some(token) if !token.is_empty() => page.continue_token = Some(token),
            _ => return Ok(items),
        }
    }
}

/// Creates `body` (with apiVersion, kind and metadata) and returns what the server stored.
pub fn create<B: Serialize + ?Sized, T: DeserializeOwned>(
    target: &Target,
    body: &B,
) -> Result<T, Error> {
    decode(&raw::create(target, &encode(body)?)?)
}

/// Applies an RFC 7386 JSON merge patch.
pub fn patch_merge<P: Serialize + ?Sized, T: DeserializeOwned>(
    object: &ObjectRef,
    patch: &P,
) -> Result<T, Error> {
    decode(&raw::patch(
        object,
        PatchType::Merge,
        &encode(patch)?,
        None,
    )?)
}

/// Applies an RFC 6902 JSON patch (a list of operations).
pub fn patch_json<P: Serialize + ?Sized, T: DeserializeOwned>(
    object: &ObjectRef,
    operations: &P,
) -> Result<T, Error> {
    decode(&raw::patch(
        object,
        PatchType::Json,
        &encode(operations)?,
        None,
    )?)
}

/// Server-side apply of `body` as `field_manager`.
pub fn apply<B: Serialize + ?Sized, T: DeserializeOwned>(
    object: &ObjectRef,
    body: &B,
    field_manager: &str,
) -> Result<T, Error> {
    decode(&raw::patch(
        object,
        PatchType::Apply,
        &encode(body)?,
        Some(field_manager),
    )?)
}

/// Deletes the object; [`KubeError::NotFound`] when it is already gone.
pub fn delete(object: &ObjectRef) -> Result<(), Error> {
    Ok(raw::delete(object)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_builders() {
        let t = Target::new(Cluster::Management, "cluster.x-k8s.io/v1beta1", "Machine")
            .namespaced("default");
        let o = t.object("m-1").subresource("scale");
        assert_eq!(o.target.namespace.as_deref(), Some("default"));
        assert_eq!(o.name, "m-1");
        assert_eq!(o.subresource.as_deref(), Some("scale"));
        assert_eq!(
            ListOptions::labels("a=b").label_selector.as_deref(),
            Some("a=b")
        );
    }

    /// A fake API server's list of `count` names, `options.limit` a page, the token an offset.
    #[cfg(feature = "v0_3")]
    fn serve(count: usize, options: &ListOptions) -> Result<String, KubeError> {
        let start: usize = options
            .continue_token
            .as_deref()
            .map_or(0, |t| t.parse().unwrap());
        let end = options
            .limit
            .map_or(count, |limit| (start + limit as usize).min(count));
        let items: Vec<_> = (start..end)
            .map(|i| serde_json::json!({"metadata": {"name": format!("n{i}")}}))
            .collect();
        let token = if end < count {
            end.to_string()
        } else {
            String::new()
        };
        Ok(serde_json::json!({"metadata": {"continue": token}, "items": items}).to_string())
    }

    #[cfg(feature = "v0_3")]
    #[test]
    fn lists_are_read_a_page_at_a_time() {
        let count = 2 * PAGE_SIZE as usize + 7;
        let mut calls = Vec::new();
        let items: Vec<serde_json::Value> = read_pages(&ListOptions::labels("a=b"), |page| {
            calls.push(page.clone());
            serve(count, page)
        })
        .unwrap();
        assert_eq!(items.len(), count);
        assert_eq!(
            items[count - 1]["metadata"]["name"],
            format!("n{}", count - 1)
        );
        let tokens: Vec<Option<&str>> = calls.iter().map(|c| c.continue_token.as_deref()).collect();
        let (one, two) = (PAGE_SIZE.to_string(), (2 * PAGE_SIZE).to_string());
        assert_eq!(tokens, [None, Some(one.as_str()), Some(two.as_str())]);
        assert!(calls.iter().all(|c| c.limit == Some(PAGE_SIZE)));
        assert!(
            calls
                .iter()
                .all(|c| c.label_selector.as_deref() == Some("a=b"))
        );
    }

    #[cfg(feature = "v0_3")]
    #[test]
    fn an_expired_token_fails_the_list() {
        let mut calls = 0;
        let err = read_pages::<serde_json::Value>(&ListOptions::default(), |page| {
            calls += 1;
            match page.continue_token {
                None => serve(2 * PAGE_SIZE as usize, page),
                Some(_) => Err(KubeError::Conflict("the continue token expired".into())),
            }
        })
        .unwrap_err();
        assert!(matches!(err, Error::Kube(KubeError::Conflict(_))), "{err}");
        assert_eq!(calls, 2);
    }

    #[test]
    fn errors_name_their_kind() {
        let e = Error::from(KubeError::PermissionDenied("nodes create".into()));
        assert_eq!(e.to_string(), "permission-denied: nodes create");
        assert!(!e.is_not_found());
        assert!(Error::from(KubeError::NotFound(String::new())).is_not_found());
        assert_eq!(KubeError::Unavailable("x".into()).message(), "x");
    }
}
