//! The host's caches ([`capstan::state::Cache`]) against the real API server.

use std::time::Duration;

use capstan_test_support::wait_until;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::lifecycle::{Names, RUN_LABEL, cluster};

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

/// A cache's generation grows once the store holds a change (created, labelled, deleted), and
/// stays put while nothing changes: consolidation skips preparing a search on an unchanged one.
#[tokio::test]
async fn a_caches_generation_grows_with_each_change_it_holds_and_only_then() {
    let (_cp, client) = cluster().await;
    let names = Names::new("gencache");
    let name = names.name("ns");
    let api: Api<Namespace> = Api::all(client.clone());
    let cache = capstan::state::Cache::<Namespace>::default();
    let watch = tokio::spawn(cache.run(
        api.clone(),
        watcher::Config::default().labels(&names.selector()),
    ));
    cache.store().wait_until_ready().await.unwrap();
    let listed = cache.generation();
    assert!(listed > 0, "the first list is a change the store took");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(cache.generation(), listed, "nothing changed");

    let mut meta = ObjectMeta {
        name: Some(name.clone()),
        ..ObjectMeta::default()
    };
    meta.labels = Some([(RUN_LABEL.to_owned(), names.run.clone())].into());
    api.create(
        &PostParams::default(),
        &Namespace {
            metadata: meta,
            ..Namespace::default()
        },
    )
    .await
    .unwrap();
    let store = cache.store();
    wait_until(
        Duration::from_secs(30),
        "the namespace in the cache",
        || {
            let (store, name) = (store.clone(), name.clone());
            async move { Ok::<_, std::convert::Infallible>(store.get(&ObjectRef::new(&name))) }
        },
    )
    .await
    .unwrap();
    let created = cache.generation();
    assert!(created > listed, "{created} after {listed}");

    api.delete(&name, &DeleteParams::default()).await.unwrap();
    // A namespace lingers while it terminates; the cache takes its deletion timestamp first.
    wait_until(
        Duration::from_secs(30),
        "the deletion in the cache",
        || async {
            Ok::<_, std::convert::Infallible>((cache.generation() > created).then_some(()))
        },
    )
    .await
    .unwrap();
    watch.abort();
}
