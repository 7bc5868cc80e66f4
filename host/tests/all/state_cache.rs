//! The host's caches ([`capstan::state::Cache`]) against the real API server.

use std::time::Duration;

use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::lifecycle::{Names, cluster};

/// What no decision reads is not kept: the server's `managedFields` are there on the object, not
/// in the cache (they are often the largest part of a Pod or Node).
#[tokio::test]
async fn the_caches_keep_no_managed_fields() {
    let (_cp, client) = cluster().await;
    let names = Names::new("slimcache");
    let name = names.name("ns");
    let api: Api<Namespace> = Api::all(client.clone());
    let created = api
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await
        .unwrap();
    assert!(
        created
            .metadata
            .managed_fields
            .is_some_and(|f| !f.is_empty()),
        "the API server records field managers"
    );
    let cache = capstan::state::Cache::<Namespace>::default();
    let watch = tokio::spawn(cache.run(api.clone(), watcher::Config::default()));
    let store = cache.store();
    let cached = wait_until(
        Duration::from_secs(30),
        "the namespace in the cache",
        || {
            let store = store.clone();
            let name = name.clone();
            async move { Ok::<_, std::convert::Infallible>(store.get(&ObjectRef::new(&name))) }
        },
    )
    .await
    .unwrap();
    watch.abort();
    assert_eq!(cached.metadata.uid, created.metadata.uid);
    assert_eq!(cached.metadata.managed_fields, None);
    let _ = api.delete(&name, &DeleteParams::default()).await;
}
