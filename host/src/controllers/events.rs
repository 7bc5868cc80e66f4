//! Kubernetes Events for every transition and failure, through kube-rs's `Recorder` (which
//! aggregates repeats into series). Failing to record an Event is logged, never fatal.
//!
//! Reasons are bounded like metric labels: at most [`MAX_REASONS`] distinct reasons per kind of
//! object, and [`OTHER_REASON`] (with the original reason leading the note) for the rest, so a
//! reason that ever came from a provider cannot grow the recorder's cache or the Event stream's
//! vocabulary without end.
//!
//! Events are written in the background, as client-go's broadcaster does: a reconcile or a
//! provisioning pass hands an Event to a queue of [`QUEUE`] and goes on, and [`WRITERS`] writers
//! send them to the API server. Past the queue's bound, new Events are dropped (and counted in
//! the log), so a burst — 20,000 pods nominated in one pass — never holds the host back, where
//! writing each in turn held a provisioning pass for seconds per claim. The writers take at most
//! [`EVENTS_QPS`] a second (bursts of [`EVENTS_BURST`]), so Events never take the client's whole
//! rate limit from the writes that do the work.
//!
//! Events a loop would repeat every pass (`DisruptionBlocked` every 3 s while a budget or a pod
//! holds a node) go through [`Events::normal_once_per`]: the same object, reason and note is
//! published once per window, as Karpenter's recorder dedupes. Unlike Karpenter's (keyed on the
//! object and reason only), a changed note is published at once, so the newest cause shows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;

use crate::capability::host::truncate;
use crate::metrics::BoundedValues;
use crate::ratelimit::TokenBucket;

/// Distinct Event reasons per kind of object (the host's own are a few dozen).
pub const MAX_REASONS: usize = 128;
/// The reason of Events past the bound.
pub const OTHER_REASON: &str = "Other";

/// Events waiting to be written; past this many, new ones are dropped.
pub const QUEUE: usize = 4096;
/// Events written at once.
pub const WRITERS: usize = 8;
/// Events written per second at most, on average (bursts of [`EVENTS_BURST`]): Events share the
/// client's rate limit (`--kube-client-qps`, 200 by default) with the host's real work, and
/// during a large drift they would take most of it (every eviction is an Event), delaying the
/// writes that move disruptions on.
pub const EVENTS_QPS: u32 = 50;
/// Events written at once after a quiet spell, before [`EVENTS_QPS`] paces them.
pub const EVENTS_BURST: u32 = 200;

/// Past this many remembered Events, expired ones are dropped on the next publish.
const DEDUPE_PRUNE_AT: usize = 4096;

/// Which repeated Events were published when: (object, reason, note) → when the window ends.
#[derive(Debug, Default)]
pub struct Dedupe {
    until: HashMap<(String, String, String), Instant>,
    /// The size at which expired entries are dropped next: twice what the last prune left (at
    /// least [`DEDUPE_PRUNE_AT`]), so pruning stays linear overall with thousands of live ones.
    prune_at: usize,
}

impl Dedupe {
    /// Whether an Event keyed `key` should be published at `now`: not when the same one was
    /// within `window` before. Remembers it when it should.
    pub fn admit(&mut self, key: (String, String, String), now: Instant, window: Duration) -> bool {
        if self.until.get(&key).is_some_and(|until| *until > now) {
            return false;
        }
        if self.until.len() >= self.prune_at.max(DEDUPE_PRUNE_AT) {
            self.until.retain(|_, until| *until > now);
            self.prune_at = 2 * self.until.len();
        }
        self.until.insert(key, now + window);
        true
    }
}

/// What makes an Event a repeat of one published before (see [`Events::normal_once_per`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeat {
    /// The same object, reason and note.
    SameNote,
    /// The same object and reason.
    AnyNote,
}

/// The Event recorder of the controllers.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
    reasons: Arc<BoundedValues>,
    dedupe: Arc<Mutex<Dedupe>>,
    /// The writers' queue (`None` outside a Tokio runtime: written in place).
    queue: Option<mpsc::Sender<(Event, ObjectReference)>>,
    dropped: Arc<AtomicU64>,
}

/// Writes queued Events, [`WRITERS`] at once, until every sender is gone.
async fn write_events(recorder: Recorder, mut queue: mpsc::Receiver<(Event, ObjectReference)>) {
    let pace = Arc::new(TokenBucket::new(EVENTS_QPS, EVENTS_BURST));
    futures::stream::poll_fn(move |cx| queue.poll_recv(cx))
        .for_each_concurrent(WRITERS, |(event, reference)| {
            let recorder = recorder.clone();
            let pace = Arc::clone(&pace);
            async move {
                tokio::time::sleep(pace.reserve()).await;
                write(&recorder, &event, &reference).await
            }
        })
        .await;
}

async fn write(recorder: &Recorder, event: &Event, reference: &ObjectReference) {
    if let Err(err) = recorder.publish(event, reference).await {
        tracing::debug!(
            kind = reference.kind.as_deref().unwrap_or_default(),
            name = reference.name.as_deref().unwrap_or_default(),
            reason = %event.reason,
            error = %err,
            "cannot record event"
        );
    }
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

impl Events {
    /// A recorder reporting as `controller`.
    pub fn new(client: Client, controller: &str) -> Self {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let recorder = Recorder::new(client, reporter);
        let queue = tokio::runtime::Handle::try_current().ok().map(|runtime| {
            let (tx, rx) = mpsc::channel(QUEUE);
            runtime.spawn(write_events(recorder.clone(), rx));
            tx
        });
        Self {
            recorder,
            reasons: Arc::new(BoundedValues::with_other(MAX_REASONS, OTHER_REASON)),
            dedupe: Arc::default(),
            queue,
            dropped: Arc::default(),
        }
    }

    /// The reason an Event about a `kind` gets for `reason` (see [`MAX_REASONS`]).
    pub fn reason<'a>(&self, kind: &str, reason: &'a str) -> &'a str {
        self.reasons.admit(kind, reason)
    }

    /// A `Normal` Event about `object`.
    pub async fn normal<K>(&self, object: &K, reason: &str, note: impl Into<String>)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(object, EventType::Normal, reason, note.into())
            .await;
    }

    /// A `Normal` Event about `object`, published at most once per `window` with this reason and,
    /// with [`Repeat::SameNote`], this note (a loop's repeated verdicts; see the module's
    /// documentation); with [`Repeat::AnyNote`] whatever its note (Karpenter's dedupe on the
    /// object alone: a pod's `Nominated`).
    pub async fn normal_once_per<K>(
        &self,
        window: Duration,
        repeat: Repeat,
        object: &K,
        reason: &str,
        note: impl Into<String>,
    ) where
        K: Resource<DynamicType = ()>,
    {
        let note = note.into();
        let key_note = (repeat == Repeat::SameNote).then_some(note.as_str());
        if self.admit(window, object, reason, key_note) {
            self.publish(object, EventType::Normal, reason, note).await;
        }
    }

    /// Whether an Event about `object` with `reason` (and `note`, when given) is due.
    fn admit<K>(&self, window: Duration, object: &K, reason: &str, note: Option<&str>) -> bool
    where
        K: Resource<DynamicType = ()>,
    {
        let reference = object.object_ref(&());
        let key = (
            format!(
                "{}/{}/{}/{}",
                reference.kind.as_deref().unwrap_or_default(),
                reference.namespace.as_deref().unwrap_or_default(),
                reference.name.as_deref().unwrap_or_default(),
                reference.uid.as_deref().unwrap_or_default(),
            ),
            reason.to_owned(),
            note.unwrap_or_default().to_owned(),
        );
        self.dedupe
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(key, Instant::now(), window)
    }

    /// A `Warning` Event about `object`.
    pub async fn warning<K>(&self, object: &K, reason: &str, note: impl Into<String>)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(object, EventType::Warning, reason, note.into())
            .await;
    }

    /// A `Warning` Event about `object` with its own `action`. Events with the same reason and
    /// action aggregate into one series (the first note kept); a distinct action keeps them apart.
    pub async fn warning_with_action<K>(
        &self,
        object: &K,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) where
        K: Resource<DynamicType = ()>,
    {
        self.publish_action(object, EventType::Warning, reason, action, note.into())
            .await;
    }

    /// A `Warning` Event about the object `reference` points at (for objects the host holds only
    /// as raw JSON, such as a NodePool that does not parse).
    pub async fn warning_about(
        &self,
        reference: &k8s_openapi::api::core::v1::ObjectReference,
        reason: &str,
        note: impl Into<String>,
    ) {
        self.publish_reference(
            reference.clone(),
            EventType::Warning,
            reason,
            reason,
            note.into(),
        )
        .await;
    }

    async fn publish<K>(&self, object: &K, type_: EventType, reason: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish_action(object, type_, reason, reason, note)
            .await;
    }

    /// An Event of `type_` about `object` with its own `action` (see
    /// [`Events::warning_with_action`]).
    pub async fn publish_action<K>(
        &self,
        object: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) where
        K: Resource<DynamicType = ()>,
    {
        self.publish_reference(object.object_ref(&()), type_, reason, action, note)
            .await;
    }

    async fn publish_reference(
        &self,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        mut note: String,
    ) {
        let name = reference.name.clone().unwrap_or_default();
        let kind = reference.kind.clone().unwrap_or_default();
        let admitted = self.reason(&kind, reason);
        let (reason, action) = if admitted == reason {
            (reason, action)
        } else {
            note = format!("{}: {note}", truncate(reason, 128));
            (admitted, admitted)
        };
        match type_ {
            EventType::Normal => tracing::info!(%kind, %name, reason, note = %note, "event"),
            EventType::Warning => tracing::warn!(%kind, %name, reason, note = %note, "event"),
        }
        let kept = truncate(&note, 1000).len();
        note.truncate(kept);
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: truncate(action, 128).to_owned(),
            secondary: None,
        };
        let Some(queue) = &self.queue else {
            write(&self.recorder, &event, &reference).await;
            return;
        };
        if let Err(mpsc::error::TrySendError::Full(_)) = queue.try_send((event, reference)) {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            // One line per thousand, not one per Event, while the queue is full.
            if dropped % 1000 == 1 {
                tracing::warn!(
                    dropped,
                    queue = QUEUE,
                    "events are coming faster than the API server takes them: dropping some"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_thousand_reasons_make_a_bounded_vocabulary() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let events = Events::new(Client::try_from(config).unwrap(), "test");
        let mut distinct = std::collections::HashSet::new();
        for i in 0..1000 {
            distinct.insert(events.reason("NodeClaim", &format!("Reason{i}")).to_owned());
        }
        assert_eq!(distinct.len(), MAX_REASONS + 1);
        assert!(distinct.contains(OTHER_REASON));
        assert_eq!(events.reason("NodeClaim", "Reason0"), "Reason0");
        assert_eq!(events.reason("NodePool", "Reason999"), "Reason999");
    }

    fn key(object: &str, note: &str) -> (String, String, String) {
        (object.into(), "DisruptionBlocked".into(), note.into())
    }

    #[test]
    fn a_repeated_event_is_published_once_per_window_and_a_changed_one_at_once() {
        let mut dedupe = Dedupe::default();
        let (start, window) = (Instant::now(), Duration::from_secs(120));
        assert!(dedupe.admit(key("n1", "pdb a"), start, window));
        for s in [3, 6, 60, 119] {
            let at = start + Duration::from_secs(s);
            assert!(!dedupe.admit(key("n1", "pdb a"), at, window), "{s} s");
        }
        let at = start + Duration::from_secs(9);
        assert!(dedupe.admit(key("n1", "pdb b"), at, window), "a new cause");
        assert!(dedupe.admit(key("n2", "pdb a"), at, window), "another node");
        assert!(
            dedupe.admit(key("n1", "pdb a"), start + window, window),
            "window over"
        );
    }

    #[test]
    fn expired_entries_are_pruned() {
        let mut dedupe = Dedupe::default();
        let (start, window) = (Instant::now(), Duration::from_secs(1));
        for i in 0..DEDUPE_PRUNE_AT {
            assert!(dedupe.admit(key(&format!("n{i}"), ""), start, window));
        }
        assert!(dedupe.admit(key("last", ""), start + window, window));
        assert_eq!(dedupe.until.len(), 1);
    }

    #[test]
    fn live_entries_past_the_bound_wait_until_the_map_doubles_and_stay_deduped() {
        let mut dedupe = Dedupe::default();
        let (now, window) = (Instant::now(), Duration::from_secs(60));
        for i in 0..(3 * DEDUPE_PRUNE_AT) {
            assert!(dedupe.admit(key(&format!("m{i}"), "b"), now, window));
        }
        assert_eq!(
            dedupe.until.len(),
            3 * DEDUPE_PRUNE_AT,
            "none expired, none dropped"
        );
        assert!(
            dedupe.prune_at >= 2 * DEDUPE_PRUNE_AT,
            "{}",
            dedupe.prune_at
        );
        assert!(
            !dedupe.admit(key("m0", "b"), now, window),
            "still within its window"
        );
    }
}
