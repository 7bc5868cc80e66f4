//! The faults tests inject: whole-response faults (what a broken proxy, a slow or hostile
//! endpoint does) and async job behaviour (latency, failures).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A response fault, served instead of (or before) the API's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum HttpFault {
    /// `200 application/json` with a body that is not JSON (a truncated document).
    MalformedJson,
    /// An HTML error page, as a proxy or the servlet container serves, with this status.
    HtmlError {
        /// HTTP status, e.g. 502.
        status: u16,
    },
    /// `200 application/json`: a valid CloudStack-shaped document of about `bytes` bytes.
    Huge {
        /// Body size.
        bytes: usize,
    },
    /// The normal answer, after `millis` milliseconds.
    Slow {
        /// Delay before the response starts.
        millis: u64,
    },
    /// `302 Found` to `location` (another host).
    Redirect {
        /// The `Location` header.
        location: String,
    },
}

/// When a fault applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultRule {
    /// Only requests for this command (CloudStack's spelling, e.g. `listZones`); `None`: all.
    #[serde(default)]
    pub command: Option<String>,
    /// The fault.
    pub fault: HttpFault,
    /// How many requests it applies to; `None`: until cleared.
    #[serde(default)]
    pub times: Option<u32>,
}

impl FaultRule {
    /// `fault` on every request until cleared.
    pub fn always(fault: HttpFault) -> Self {
        Self {
            command: None,
            fault,
            times: None,
        }
    }

    /// `fault` on the next `times` requests for `command`.
    pub fn for_command(command: &str, fault: HttpFault, times: u32) -> Self {
        Self {
            command: Some(command.to_string()),
            fault,
            times: Some(times),
        }
    }
}

/// How long async jobs stay pending (status 0): until both hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobLatency {
    /// `queryAsyncJobResult` calls answered pending first (0: no poll needed).
    pub polls: u32,
    /// Time since the job started, in milliseconds.
    pub millis: u64,
}

impl JobLatency {
    /// Pending for `polls` queries, however long.
    pub fn polls(polls: u32) -> Self {
        Self { polls, millis: 0 }
    }

    /// Pending for `duration`, however often queried.
    pub fn duration(duration: Duration) -> Self {
        Self {
            polls: 0,
            millis: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

impl Default for JobLatency {
    /// 200 ms: a deployed VM boots (and its Node appears) whether or not anyone polls.
    fn default() -> Self {
        Self {
            polls: 0,
            millis: 200,
        }
    }
}

/// A failure for the next async job of a command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobFailure {
    /// The command whose next job fails (e.g. `deployVirtualMachine`); `None`: the next job.
    #[serde(default)]
    pub command: Option<String>,
    /// The job result's `errorcode` (530 internal, 533 insufficient capacity, 534 resource
    /// unavailable, 535 resource allocation).
    pub errorcode: u16,
    /// The job result's `errortext`.
    pub errortext: String,
}

impl JobFailure {
    /// The next `deployVirtualMachine` fails with `errorcode` and `errortext`.
    pub fn deploy(errorcode: u16, errortext: impl Into<String>) -> Self {
        Self {
            command: Some("deployVirtualMachine".into()),
            errorcode,
            errortext: errortext.into(),
        }
    }
}

/// The active faults.
#[derive(Debug, Clone, Default)]
pub(crate) struct Faults {
    pub rules: Vec<FaultRule>,
    pub job_failures: Vec<JobFailure>,
}

impl Faults {
    /// The fault for a request of `command`, counting it against its rule.
    pub fn take_http(&mut self, command: Option<&str>) -> Option<HttpFault> {
        let index = self
            .rules
            .iter()
            .position(|r| r.command.is_none() || r.command.as_deref() == command)?;
        let rule = &mut self.rules[index];
        let fault = rule.fault.clone();
        if let Some(times) = &mut rule.times {
            *times = times.saturating_sub(1);
            if *times == 0 {
                self.rules.remove(index);
            }
        }
        Some(fault)
    }

    /// The planned failure for the next job of `command`, if any.
    pub fn take_job_failure(&mut self, command: &str) -> Option<JobFailure> {
        let index = self
            .job_failures
            .iter()
            .position(|f| f.command.as_deref().is_none_or(|c| c == command))?;
        Some(self.job_failures.remove(index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_count_down_and_match_commands() {
        let mut faults = Faults::default();
        faults.rules.push(FaultRule::for_command(
            "listZones",
            HttpFault::MalformedJson,
            2,
        ));
        assert_eq!(faults.take_http(Some("listTemplates")), None);
        assert_eq!(
            faults.take_http(Some("listZones")),
            Some(HttpFault::MalformedJson)
        );
        assert_eq!(
            faults.take_http(Some("listZones")),
            Some(HttpFault::MalformedJson)
        );
        assert_eq!(faults.take_http(Some("listZones")), None);
        faults
            .rules
            .push(FaultRule::always(HttpFault::HtmlError { status: 502 }));
        for _ in 0..3 {
            assert_eq!(
                faults.take_http(None),
                Some(HttpFault::HtmlError { status: 502 })
            );
        }
    }

    #[test]
    fn job_failures_apply_once_to_their_command() {
        let mut faults = Faults::default();
        faults.job_failures.push(JobFailure::deploy(530, "boom"));
        assert_eq!(faults.take_job_failure("createTags"), None);
        assert_eq!(
            faults
                .take_job_failure("deployVirtualMachine")
                .map(|f| f.errorcode),
            Some(530)
        );
        assert_eq!(faults.take_job_failure("deployVirtualMachine"), None);
    }

    #[test]
    fn knobs_read_from_admin_json() {
        let rule: FaultRule = serde_json::from_str(
            r#"{"command":"deployVirtualMachine","fault":{"kind":"slow","millis":1500},"times":1}"#,
        )
        .unwrap();
        assert_eq!(rule.fault, HttpFault::Slow { millis: 1500 });
        let rule: FaultRule =
            serde_json::from_str(r#"{"fault":{"kind":"redirect","location":"http://x/"}}"#)
                .unwrap();
        assert_eq!(rule.times, None);
    }
}
