//! The CloudStack API client: signed requests (signature version 3 with `expires`, JSON
//! answers), paged lists, async jobs polled with the host's sleep, and the few commands the
//! provider uses (lists, deploy, destroy, reboot, tags). The transport (`wasi:http` in the component) and the clock (the `host`
//! import) are traits, so the whole client runs natively in tests against a scripted cloud.

use cloudstack_sign::Credentials;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::ApiError;
use crate::api::model::{DiskOffering, Network, ServiceOffering, Template, VirtualMachine, Zone};
use crate::api::response::{self, JobStart, JobStatus, Raw};
use crate::catalog::Cloud;
use crate::endpoint::Endpoint;

/// How long a signed request stays valid (`expires`), in seconds.
pub const EXPIRES_SECONDS: i64 = 300;
/// Items per page of a list.
pub const PAGE_SIZE: usize = 500;
/// The most pages read of one list (a runaway `count` cannot loop forever).
pub const MAX_PAGES: usize = 100;

/// `GET` or `POST` (a form body; used for deploys, whose user data may not fit a URL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Parameters in the query string.
    Get,
    /// Parameters in an `application/x-www-form-urlencoded` body.
    Post,
}

/// One HTTP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// `http` or `https`.
    pub scheme: String,
    /// `host[:port]`.
    pub authority: String,
    /// Path and, for `GET`, the query.
    pub path_and_query: String,
    /// The form body, for `POST`.
    pub body: Option<String>,
    /// The command, for errors and counting.
    pub command: String,
}

/// Why a request got no HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportError {
    /// The host refused it (egress grants).
    Denied(String),
    /// The body was larger than the limit.
    TooLarge(usize),
    /// Connection, DNS, TLS, timeout...
    Failed(String),
}

/// Sends requests.
pub trait Transport {
    /// Sends `request` and reads the whole answer.
    fn send(&mut self, request: &Request) -> Result<Raw, TransportError>;
}

/// Time.
pub trait Clock {
    /// Milliseconds since the Unix epoch.
    fn now_millis(&self) -> u64;
    /// Suspends the call.
    fn sleep_millis(&self, millis: u64);
}

/// A client for one endpoint and account.
pub struct Client<T, C> {
    endpoint: Endpoint,
    credentials: Credentials,
    transport: T,
    clock: C,
    calls: u32,
}

impl<T: Transport, C: Clock> Client<T, C> {
    /// A client.
    pub fn new(endpoint: Endpoint, credentials: Credentials, transport: T, clock: C) -> Self {
        Self {
            endpoint,
            credentials,
            transport,
            clock,
            calls: 0,
        }
    }

    /// API requests sent so far.
    pub fn calls(&self) -> u32 {
        self.calls
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Sends `command` with `params` and returns the inner answer object.
    pub fn call(
        &mut self,
        command: &str,
        params: &[(String, String)],
        method: Method,
    ) -> Result<Value, ApiError> {
        let mut all: Vec<(&str, &str)> = vec![("command", command), ("response", "json")];
        all.extend(params.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let expires = i64::try_from(self.clock.now_millis() / 1000)
            .unwrap_or(i64::MAX - EXPIRES_SECONDS)
            + EXPIRES_SECONDS;
        let query = cloudstack_sign::sign(&all, &self.credentials, expires);
        let (path_and_query, body) = match method {
            Method::Get => (format!("{}?{query}", self.endpoint.path), None),
            Method::Post => (self.endpoint.path.clone(), Some(query)),
        };
        let request = Request {
            method,
            scheme: self.endpoint.scheme.clone(),
            authority: self.endpoint.authority.clone(),
            path_and_query,
            body,
            command: command.to_string(),
        };
        self.calls += 1;
        let raw = self.transport.send(&request).map_err(|e| match e {
            TransportError::Denied(detail) => ApiError::Denied {
                authority: self.endpoint.authority.clone(),
                detail,
            },
            TransportError::TooLarge(limit) => ApiError::TooLarge {
                command: command.to_string(),
                limit,
            },
            TransportError::Failed(detail) => ApiError::Transport {
                command: command.to_string(),
                authority: self.endpoint.authority.clone(),
                detail,
            },
        })?;
        response::inner(command, &raw)
    }

    /// Every item of a list command (`key` names the items), page by page.
    pub fn list<I: DeserializeOwned>(
        &mut self,
        command: &str,
        params: &[(String, String)],
        key: &str,
    ) -> Result<Vec<I>, ApiError> {
        let mut out = Vec::new();
        for page in 1..=MAX_PAGES {
            let mut p = params.to_vec();
            p.push(("page".into(), page.to_string()));
            p.push(("pagesize".into(), PAGE_SIZE.to_string()));
            let inner = self.call(command, &p, Method::Get)?;
            let (items, count): (Vec<I>, usize) = response::list(command, &inner, key)?;
            let got = items.len();
            out.extend(items);
            if got < PAGE_SIZE || out.len() >= count {
                break;
            }
        }
        Ok(out)
    }

    /// Starts an async command.
    pub fn start(
        &mut self,
        command: &str,
        params: &[(String, String)],
        method: Method,
    ) -> Result<JobStart, ApiError> {
        let inner = self.call(command, params, method)?;
        response::job_start(command, &inner)
    }

    /// One look at a job.
    pub fn job(&mut self, job_id: &str) -> Result<JobStatus, ApiError> {
        let inner = self.call(
            "queryAsyncJobResult",
            &[("jobid".into(), job_id.into())],
            Method::Get,
        )?;
        response::job_status(&inner)
    }

    /// Polls a job until it is done, sleeping `poll_millis` at first and backing off to four
    /// times that, for at most `timeout_millis`. A failed job is [`ApiError::JobFailed`].
    pub fn wait(
        &mut self,
        command: &str,
        job_id: &str,
        poll_millis: u64,
        timeout_millis: u64,
    ) -> Result<Value, ApiError> {
        let start = self.clock.now_millis();
        let mut delay = poll_millis.max(1);
        loop {
            match self.job(job_id)? {
                JobStatus::Succeeded(result) => return Ok(result),
                JobStatus::Failed { code, text } => {
                    return Err(ApiError::JobFailed {
                        command: command.to_string(),
                        job_id: job_id.to_string(),
                        code,
                        text,
                    });
                }
                JobStatus::Pending => {}
            }
            let waited = self.clock.now_millis().saturating_sub(start);
            if waited >= timeout_millis {
                return Err(ApiError::JobTimeout {
                    command: command.to_string(),
                    job_id: job_id.to_string(),
                    waited_ms: waited,
                });
            }
            self.clock
                .sleep_millis(delay.min(timeout_millis - waited).max(1));
            delay = (delay * 3 / 2).min(poll_millis.max(1) * 4);
        }
    }

    /// What the cloud has: four lists (five with a disk offering), no per-item calls.
    pub fn cloud(&mut self, with_disk_offerings: bool) -> Result<Cloud, ApiError> {
        let zones: Vec<Zone> = self.list("listZones", &[], "zone")?;
        let service_offerings: Vec<ServiceOffering> =
            self.list("listServiceOfferings", &[], "serviceoffering")?;
        let templates: Vec<Template> = self.list(
            "listTemplates",
            &[("templatefilter".into(), "executable".into())],
            "template",
        )?;
        let networks: Vec<Network> = self.list("listNetworks", &[], "network")?;
        let disk_offerings: Vec<DiskOffering> = if with_disk_offerings {
            self.list("listDiskOfferings", &[], "diskoffering")?
        } else {
            Vec::new()
        };
        Ok(Cloud {
            zones,
            service_offerings,
            templates,
            networks,
            disk_offerings,
        })
    }

    /// VMs with every tag of `tags` (one list, the tags included: no per-VM `listTags`).
    pub fn vms_tagged(
        &mut self,
        tags: &[(String, String)],
    ) -> Result<Vec<VirtualMachine>, ApiError> {
        let mut params = vec![("listall".to_string(), "true".to_string())];
        params.extend(crate::tags::map_params("tags", tags));
        self.list("listVirtualMachines", &params, "virtualmachine")
    }

    /// The VM with this UUID, `None` once it is gone (expunged: an empty list, or CloudStack's
    /// 431 for an unknown UUID).
    pub fn vm(&mut self, id: &str) -> Result<Option<VirtualMachine>, ApiError> {
        let params = vec![
            ("id".to_string(), id.to_string()),
            ("listall".to_string(), "true".to_string()),
        ];
        match self.list::<VirtualMachine>("listVirtualMachines", &params, "virtualmachine") {
            Ok(vms) => Ok(vms.into_iter().find(|vm| vm.id == id)),
            Err(ApiError::CloudStack { code: 431, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The VMs in `zone_id` named exactly `name` (CloudStack's `name` filter is a substring
    /// match, so the exact name is checked here).
    pub fn vms_named(
        &mut self,
        zone_id: Option<&str>,
        name: &str,
    ) -> Result<Vec<VirtualMachine>, ApiError> {
        let mut params = vec![
            ("name".to_string(), name.to_string()),
            ("listall".to_string(), "true".to_string()),
        ];
        if let Some(zone) = zone_id {
            params.push(("zoneid".to_string(), zone.to_string()));
        }
        let vms: Vec<VirtualMachine> =
            self.list("listVirtualMachines", &params, "virtualmachine")?;
        Ok(vms
            .into_iter()
            .filter(|vm| vm.name.eq_ignore_ascii_case(name))
            .collect())
    }

    /// Starts destroying a VM with `expunge=true`.
    pub fn destroy(&mut self, vm_id: &str) -> Result<JobStart, ApiError> {
        self.start(
            "destroyVirtualMachine",
            &[
                ("id".into(), vm_id.into()),
                ("expunge".into(), "true".into()),
            ],
            Method::Get,
        )
    }

    /// Starts rebooting a VM (`rebootVirtualMachine`).
    pub fn reboot(&mut self, vm_id: &str) -> Result<JobStart, ApiError> {
        self.start(
            "rebootVirtualMachine",
            &[("id".into(), vm_id.into())],
            Method::Get,
        )
    }

    /// Starts removing tags from a VM (each key with its value).
    pub fn delete_tags(
        &mut self,
        vm_id: &str,
        tags: &[(String, String)],
    ) -> Result<JobStart, ApiError> {
        self.vm_tags("deleteTags", vm_id, tags)
    }

    /// Starts tagging a VM.
    pub fn create_tags(
        &mut self,
        vm_id: &str,
        tags: &[(String, String)],
    ) -> Result<JobStart, ApiError> {
        self.vm_tags("createTags", vm_id, tags)
    }

    /// `createTags` or `deleteTags` on one VM.
    fn vm_tags(
        &mut self,
        command: &str,
        vm_id: &str,
        tags: &[(String, String)],
    ) -> Result<JobStart, ApiError> {
        let mut params = vec![
            ("resourceids".to_string(), vm_id.to_string()),
            ("resourcetype".to_string(), "UserVm".to_string()),
        ];
        params.extend(crate::tags::map_params("tags", tags));
        self.start(command, &params, Method::Get)
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A scripted cloud for native tests: answers each request from a closure, checks every
    //! signature as CloudStack does, and keeps time virtual.

    use std::cell::{Cell, RefCell};
    use std::rc::Rc;

    use super::*;

    /// The decoded parameters of a request.
    pub type Params = Vec<(String, String)>;
    /// The commands sent, with their parameters.
    pub type Log = Rc<RefCell<Vec<(String, Params)>>>;

    /// A transport whose answers come from `answer(command, params)`.
    pub struct FakeCloud<F> {
        pub answer: F,
        pub secret: String,
        pub log: Log,
        pub clock: FakeClock,
    }

    #[derive(Clone, Default)]
    pub struct FakeClock(pub Rc<Cell<u64>>);

    impl Clock for FakeClock {
        fn now_millis(&self) -> u64 {
            self.0.get()
        }
        fn sleep_millis(&self, millis: u64) {
            self.0.set(self.0.get() + millis);
        }
    }

    /// `{"<command>response": inner}` with status 200.
    pub fn ok(command: &str, inner: Value) -> Result<Raw, TransportError> {
        let body = serde_json::json!({ format!("{}response", command.to_lowercase()): inner });
        Ok(Raw {
            status: 200,
            content_type: Some("application/json".into()),
            location: None,
            body: body.to_string().into_bytes(),
        })
    }

    /// CloudStack's error document.
    pub fn error(command: &str, code: u16, text: &str) -> Result<Raw, TransportError> {
        let body = serde_json::json!({ format!("{}response", command.to_lowercase()):
            {"uuidList": [], "errorcode": code, "errortext": text} });
        Ok(Raw {
            status: code,
            content_type: Some("application/json".into()),
            location: None,
            body: body.to_string().into_bytes(),
        })
    }

    pub fn get<'a>(p: &'a Params, name: &str) -> Option<&'a str> {
        p.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    impl<F> Transport for FakeCloud<F>
    where
        F: FnMut(&str, &Params) -> Result<Raw, TransportError>,
    {
        fn send(&mut self, request: &Request) -> Result<Raw, TransportError> {
            let query = match request.method {
                Method::Get => request
                    .path_and_query
                    .split_once('?')
                    .map(|(_, q)| q.to_string())
                    .unwrap_or_default(),
                Method::Post => request.body.clone().unwrap_or_default(),
            };
            let params = cloudstack_sign::parse_query(&query);
            let secret = self.secret.clone();
            let now = i64::try_from(self.clock.now_millis()).unwrap_or(0);
            if cloudstack_sign::verify(&params, now, |_| Some(secret)).is_err() {
                return error(
                    &request.command,
                    401,
                    "unable to verify user credentials and/or request signature",
                );
            }
            let command = get(&params, "command").unwrap_or_default().to_string();
            self.log
                .borrow_mut()
                .push((command.clone(), params.clone()));
            (self.answer)(&command, &params)
        }
    }

    /// A client on a fake cloud; the log of requests comes back too.
    pub fn client<F>(answer: F) -> (Client<FakeCloud<F>, FakeClock>, Log)
    where
        F: FnMut(&str, &Params) -> Result<Raw, TransportError>,
    {
        let log = Rc::new(RefCell::new(Vec::new()));
        let clock = FakeClock(Rc::new(Cell::new(1_767_323_045_000)));
        let cloud = FakeCloud {
            answer,
            secret: "secret".into(),
            log: Rc::clone(&log),
            clock: clock.clone(),
        };
        let endpoint = Endpoint::parse("http://127.0.0.1:8080/client/api").unwrap();
        (
            Client::new(endpoint, Credentials::new("key", "secret"), cloud, clock),
            log,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::fake::*;
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_are_signed_and_ask_for_json() {
        let (mut c, log) = client(|cmd, p| {
            assert_eq!(get(p, "response"), Some("json"));
            assert_eq!(get(p, "signatureVersion"), Some("3"));
            assert!(get(p, "expires").is_some());
            ok(cmd, json!({"count": 1, "zone": [{"id": "z", "name": "a"}]}))
        });
        let zones: Vec<Zone> = c.list("listZones", &[], "zone").unwrap();
        assert_eq!(zones.len(), 1);
        assert_eq!(c.calls(), 1);
        assert_eq!(log.borrow()[0].0, "listZones");
        assert_eq!(get(&log.borrow()[0].1, "pagesize"), Some("500"));
    }

    #[test]
    fn a_wrong_secret_is_a_clear_auth_error() {
        let (mut c, _) = client(|cmd, _| ok(cmd, json!({})));
        c.credentials = Credentials::new("key", "wrong");
        let e = c.call("listZones", &[], Method::Get).unwrap_err();
        assert!(e.is_auth(), "{e:?}");
        assert_eq!(e.reason(), "CloudStackAuthFailed");
    }

    #[test]
    fn lists_page_until_count() {
        let (mut c, log) = client(|cmd, p| {
            let page: usize = get(p, "page").unwrap().parse().unwrap();
            let n = if page < 3 { PAGE_SIZE } else { 7 };
            let items: Vec<Value> = (0..n)
                .map(|i| json!({"id": format!("{page}-{i}"), "name": "n"}))
                .collect();
            ok(cmd, json!({"count": 2 * PAGE_SIZE + 7, "zone": items}))
        });
        let zones: Vec<Zone> = c.list("listZones", &[], "zone").unwrap();
        assert_eq!(zones.len(), 2 * PAGE_SIZE + 7);
        assert_eq!(log.borrow().len(), 3);
    }

    #[test]
    fn jobs_are_polled_with_sleeps_until_done_or_failed_or_late() {
        let polls = std::cell::Cell::new(0);
        let (mut c, _) = client(|cmd, p| {
            assert_eq!(get(p, "jobid"), Some("j"));
            polls.set(polls.get() + 1);
            if polls.get() < 4 {
                ok(cmd, json!({"jobstatus": 0}))
            } else {
                ok(
                    cmd,
                    json!({"jobstatus": 1, "jobresult": {"virtualmachine": {"id": "v"}}}),
                )
            }
        });
        let before = c.clock().now_millis();
        let result = c.wait("deployVirtualMachine", "j", 100, 60_000).unwrap();
        assert_eq!(result["virtualmachine"]["id"], "v");
        let slept = c.clock().now_millis() - before;
        assert_eq!(slept, 100 + 150 + 225, "backs off");

        let (mut c, _) = client(|cmd, _| {
            ok(
                cmd,
                json!({"jobstatus": 2, "jobresult": {"errorcode": 533, "errortext": "no capacity"}}),
            )
        });
        let e = c
            .wait("deployVirtualMachine", "j", 100, 60_000)
            .unwrap_err();
        assert!(e.is_insufficient_capacity(), "{e:?}");

        let (mut c, log) = client(|cmd, _| ok(cmd, json!({"jobstatus": 0})));
        let e = c.wait("destroyVirtualMachine", "j", 100, 1000).unwrap_err();
        assert!(
            matches!(
                e,
                ApiError::JobTimeout {
                    waited_ms: 1000,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(log.borrow().len() <= 10);
    }

    #[test]
    fn gone_vms_are_none() {
        let (mut c, _) = client(|cmd, p| match get(p, "id") {
            Some("gone") => ok(cmd, json!({})),
            Some("unknown") => error(cmd, 431, "entity does not exist"),
            _ => ok(
                cmd,
                json!({"count": 1, "virtualmachine": [{"id": "here", "name": "a"}]}),
            ),
        });
        assert!(c.vm("gone").unwrap().is_none());
        assert!(c.vm("unknown").unwrap().is_none());
        assert!(c.vm("here").unwrap().is_some());
    }

    #[test]
    fn the_cloud_is_four_lists() {
        let (mut c, log) = client(|cmd, p| {
            if cmd == "listTemplates" {
                assert_eq!(get(p, "templatefilter"), Some("executable"));
            }
            ok(cmd, json!({}))
        });
        let cloud = c.cloud(false).unwrap();
        assert!(cloud.zones.is_empty());
        let cmds: Vec<String> = log.borrow().iter().map(|(c, _)| c.clone()).collect();
        assert_eq!(
            cmds,
            vec![
                "listZones",
                "listServiceOfferings",
                "listTemplates",
                "listNetworks"
            ]
        );
    }

    #[test]
    fn transport_failures_keep_their_kind() {
        let (mut c, _) = client(|_, _| Err(TransportError::Denied("HTTP-request-denied".into())));
        assert!(matches!(
            c.call("listZones", &[], Method::Get),
            Err(ApiError::Denied { .. })
        ));
        let (mut c, _) = client(|_, _| Err(TransportError::TooLarge(1024)));
        assert!(matches!(
            c.call("listZones", &[], Method::Get),
            Err(ApiError::TooLarge { limit: 1024, .. })
        ));
        let (mut c, _) = client(|_, _| Err(TransportError::Failed("connection refused".into())));
        let e = c.call("listZones", &[], Method::Get).unwrap_err();
        assert!(
            e.to_string().contains("connection refused")
                && e.to_string().contains("127.0.0.1:8080")
        );
    }

    #[test]
    fn posts_carry_the_parameters_in_the_body() {
        let (mut c, _) = client(|cmd, p| {
            assert_eq!(get(p, "userdata"), Some("YQ=="));
            ok(cmd, json!({"id": "v", "jobid": "j"}))
        });
        let start = c
            .start(
                "deployVirtualMachine",
                &[("userdata".into(), "YQ==".into())],
                Method::Post,
            )
            .unwrap();
        assert_eq!(start.id.as_deref(), Some("v"));
    }
}
