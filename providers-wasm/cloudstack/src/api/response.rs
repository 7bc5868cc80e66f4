//! The shapes of CloudStack's JSON answers: every answer is one object `{"<command>response":
//! {...}}`; lists are `{"count": n, "<item>": [...]}` (or `{}` when empty); async commands
//! answer `{"jobid": ..., "id": ...}` and `queryAsyncJobResult` reports `jobstatus` 0 (pending),
//! 1 (done, `jobresult` holds the object) or 2 (failed, `jobresult` holds `errorcode` and
//! `errortext`); errors are `{"errorcode": ..., "cserrorcode": ..., "errortext": ...}` with
//! the HTTP status equal to `errorcode`.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ApiError;

/// An HTTP answer as the transport hands it over.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Raw {
    /// HTTP status.
    pub status: u16,
    /// `Content-Type`, if any.
    pub content_type: Option<String>,
    /// `Location`, if any.
    pub location: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

/// At most this much of a body is quoted in an error.
const QUOTE: usize = 120;

/// A short, single-line, printable excerpt of a body for an error message.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(QUOTE * 4)]);
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if out.chars().count() > QUOTE {
        out = out.chars().take(QUOTE).collect::<String>() + "...";
    }
    out
}

fn looks_like_html(raw: &Raw) -> bool {
    raw.content_type
        .as_deref()
        .is_some_and(|c| c.to_ascii_lowercase().contains("html"))
        || raw
            .body
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'<')
}

/// The HTML page's `<title>`, if it has one.
fn html_title(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let lower = text.to_ascii_lowercase();
    let start = lower.find("<title>")? + "<title>".len();
    let end = start + lower[start..].find("</title>")?;
    Some(excerpt(text[start..end].as_bytes()))
}

/// The error document inside `inner`, if it is one.
fn error_of(command: &str, inner: &Value) -> Option<ApiError> {
    let code = inner.get("errorcode")?;
    let code = code
        .as_u64()
        .or_else(|| code.as_str().and_then(|s| s.parse().ok()))
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(0);
    Some(ApiError::CloudStack {
        command: command.to_string(),
        code,
        cs_code: inner
            .get("cserrorcode")
            .and_then(Value::as_u64)
            .and_then(|c| u32::try_from(c).ok()),
        text: inner
            .get("errortext")
            .and_then(Value::as_str)
            .unwrap_or("(no errortext)")
            .to_string(),
    })
}

/// The inner object of `command`'s answer, or the error the answer describes.
pub fn inner(command: &str, raw: &Raw) -> Result<Value, ApiError> {
    let not_cs = |detail: String| ApiError::NotCloudStack {
        command: command.to_string(),
        status: raw.status,
        detail,
    };
    if (300..400).contains(&raw.status) {
        return Err(ApiError::Redirect {
            command: command.to_string(),
            status: raw.status,
            location: raw.location.clone().unwrap_or_default(),
        });
    }
    if looks_like_html(raw) {
        let what = html_title(&raw.body).unwrap_or_else(|| excerpt(&raw.body));
        return Err(not_cs(format!("an HTML page ({what})")));
    }
    let doc: Value = serde_json::from_slice(&raw.body).map_err(|e| {
        if raw.body.is_empty() {
            not_cs("an empty body".to_string())
        } else {
            not_cs(format!("malformed JSON ({e}): {}", excerpt(&raw.body)))
        }
    })?;
    let Some(object) = doc.as_object() else {
        return Err(not_cs(format!(
            "a JSON {} instead of an object",
            kind(&doc)
        )));
    };
    // `<command>response`, or `errorresponse` (unknown commands); some versions answer
    // errors under another name, so take the only member when there is one.
    let expected = format!("{}response", command.to_ascii_lowercase());
    let inner = object
        .get(&expected)
        .or_else(|| object.get("errorresponse"))
        .or_else(|| {
            (object.len() == 1)
                .then(|| object.values().next())
                .flatten()
        });
    let Some(inner) = inner else {
        return Err(not_cs(format!(
            "no {expected:?} object: {}",
            excerpt(&raw.body)
        )));
    };
    if let Some(error) = error_of(command, inner) {
        return Err(error);
    }
    if !(200..300).contains(&raw.status) {
        return Err(not_cs(format!(
            "an HTTP error without an errorcode: {}",
            excerpt(&raw.body)
        )));
    }
    if !inner.is_object() {
        return Err(not_cs(format!("{expected:?} is a JSON {}", kind(inner))));
    }
    Ok(inner.clone())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// One page of a list answer: the items under `key` and the total `count`.
pub fn list<T: DeserializeOwned>(
    command: &str,
    inner: &Value,
    key: &str,
) -> Result<(Vec<T>, usize), ApiError> {
    let bad = |detail: String| ApiError::NotCloudStack {
        command: command.to_string(),
        status: 200,
        detail,
    };
    let count = inner
        .get("count")
        .and_then(Value::as_u64)
        .and_then(|c| usize::try_from(c).ok())
        .unwrap_or(0);
    let items = match inner.get(key) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                serde_json::from_value(item.clone()).map_err(|e| bad(format!("{key}[{i}]: {e}")))
            })
            .collect::<Result<Vec<T>, _>>()?,
        Some(other) => return Err(bad(format!("{key:?} is a JSON {}", kind(other)))),
    };
    let count = count.max(items.len());
    Ok((items, count))
}

/// What an async command answered: the job, and the object's UUID when it creates one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStart {
    /// The job's UUID.
    pub job_id: String,
    /// The created object's UUID (deploy), if given.
    pub id: Option<String>,
}

/// Reads an async command's answer.
pub fn job_start(command: &str, inner: &Value) -> Result<JobStart, ApiError> {
    let text = |k: &str| inner.get(k).and_then(Value::as_str).map(str::to_string);
    let job_id = text("jobid").ok_or_else(|| ApiError::NotCloudStack {
        command: command.to_string(),
        status: 200,
        detail: "an async command's answer without a jobid".to_string(),
    })?;
    Ok(JobStart {
        job_id,
        id: text("id"),
    })
}

/// An async job's state.
#[derive(Debug, Clone, PartialEq)]
pub enum JobStatus {
    /// Still running.
    Pending,
    /// Done; the result object.
    Succeeded(Value),
    /// Failed.
    Failed {
        /// `errorcode`.
        code: u16,
        /// `errortext`.
        text: String,
    },
}

/// Reads `queryAsyncJobResult`'s answer.
pub fn job_status(inner: &Value) -> Result<JobStatus, ApiError> {
    let bad = |detail: String| ApiError::NotCloudStack {
        command: "queryAsyncJobResult".to_string(),
        status: 200,
        detail,
    };
    let status = inner
        .get("jobstatus")
        .and_then(Value::as_u64)
        .ok_or_else(|| bad("no jobstatus".to_string()))?;
    let result = inner.get("jobresult").cloned().unwrap_or(Value::Null);
    match status {
        0 => Ok(JobStatus::Pending),
        1 => Ok(JobStatus::Succeeded(result)),
        2 => {
            let code = result
                .get("errorcode")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(530);
            let text = result
                .get("errortext")
                .and_then(Value::as_str)
                .unwrap_or("(no errortext)")
                .to_string();
            Ok(JobStatus::Failed { code, text })
        }
        other => Err(bad(format!("jobstatus {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::model::Zone;
    use serde_json::json;

    fn raw(status: u16, body: &str) -> Raw {
        Raw {
            status,
            content_type: Some("application/json".into()),
            location: None,
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn lists() {
        let r = raw(
            200,
            r#"{"listzonesresponse":{"count":2,"zone":[{"id":"a","name":"za"},{"id":"b","name":"zb"}]}}"#,
        );
        let page = inner("listZones", &r).unwrap();
        let (zones, count): (Vec<Zone>, _) = list("listZones", &page, "zone").unwrap();
        assert_eq!((zones.len(), count, zones[1].name.as_str()), (2, 2, "zb"));
        let empty = inner("listZones", &raw(200, r#"{"listzonesresponse":{}}"#)).unwrap();
        let (zones, count): (Vec<Zone>, _) = list("listZones", &empty, "zone").unwrap();
        assert_eq!((zones.len(), count), (0, 0));
        let bad = inner(
            "listZones",
            &raw(
                200,
                r#"{"listzonesresponse":{"count":1,"zone":[{"name":"x"}]}}"#,
            ),
        )
        .unwrap();
        let err = list::<Zone>("listZones", &bad, "zone").unwrap_err();
        assert!(err.to_string().contains("zone[0]"), "{err}");
    }

    #[test]
    fn errors() {
        let r = raw(
            431,
            r#"{"deployvirtualmachineresponse":{"uuidList":[],"errorcode":431,"cserrorcode":4350,"errortext":"bad zone"}}"#,
        );
        assert_eq!(
            inner("deployVirtualMachine", &r).unwrap_err(),
            ApiError::CloudStack {
                command: "deployVirtualMachine".into(),
                code: 431,
                cs_code: Some(4350),
                text: "bad zone".into()
            }
        );
        let r = raw(
            401,
            r#"{"errorresponse":{"errorcode":401,"errortext":"unable to verify user credentials"}}"#,
        );
        assert!(inner("listZones", &r).unwrap_err().is_auth());
        let r = raw(500, r#"{"listzonesresponse":{}}"#);
        assert!(matches!(
            inner("listZones", &r),
            Err(ApiError::NotCloudStack { status: 500, .. })
        ));
    }

    #[test]
    fn not_cloudstack() {
        let html = Raw {
            status: 502,
            content_type: Some("text/html".into()),
            location: None,
            body: b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
                .to_vec(),
        };
        let e = inner("listZones", &html).unwrap_err().to_string();
        assert!(
            e.contains("HTTP 502") && e.contains("an HTML page (502 Bad Gateway)"),
            "{e}"
        );
        let e = inner("listZones", &raw(200, r#"{"listzonesresponse":{"count":"#)).unwrap_err();
        assert!(e.to_string().contains("malformed JSON"), "{e}");
        let e = inner("listZones", &raw(200, "")).unwrap_err();
        assert!(e.to_string().contains("empty body"), "{e}");
        let e = inner("listZones", &raw(200, "[1]")).unwrap_err();
        assert!(e.to_string().contains("array"), "{e}");
        let e = inner("listZones", &raw(200, r#"{"a":1,"b":2}"#)).unwrap_err();
        assert!(e.to_string().contains("listzonesresponse"), "{e}");
        let redirect = Raw {
            status: 302,
            location: Some("https://evil.example/".into()),
            ..Raw::default()
        };
        let e = inner("listZones", &redirect).unwrap_err();
        assert!(matches!(e, ApiError::Redirect { status: 302, .. }));
        assert!(e.to_string().contains("evil.example"));
        let long = format!("{{\"x\": \"{}", "y".repeat(10_000));
        let e = inner("listZones", &raw(200, &long))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 400, "{}", e.len());
    }

    #[test]
    fn jobs() {
        let start = job_start("deployVirtualMachine", &json!({"id": "vm", "jobid": "j"})).unwrap();
        assert_eq!(
            start,
            JobStart {
                job_id: "j".into(),
                id: Some("vm".into())
            }
        );
        assert!(job_start("x", &json!({})).is_err());
        assert_eq!(
            job_status(&json!({"jobstatus": 0})).unwrap(),
            JobStatus::Pending
        );
        assert_eq!(
            job_status(&json!({"jobstatus": 1, "jobresult": {"virtualmachine": {"id": "vm"}}}))
                .unwrap(),
            JobStatus::Succeeded(json!({"virtualmachine": {"id": "vm"}}))
        );
        assert_eq!(
            job_status(&json!({"jobstatus": 2, "jobresultcode": 530, "jobresult": {"errorcode": 533, "errortext": "no room"}})).unwrap(),
            JobStatus::Failed { code: 533, text: "no room".into() }
        );
        assert!(job_status(&json!({"jobstatus": 7})).is_err());
        assert!(job_status(&json!({})).is_err());
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_bodies(status in 0u16..700, body in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let r = Raw { status, content_type: None, location: None, body };
            let _ = inner("listVirtualMachines", &r);
        }

        #[test]
        fn error_documents_keep_their_code(code in 400u16..600, text in "[ -~]{0,40}") {
            let body = serde_json::to_string(&json!({"listzonesresponse": {"errorcode": code, "errortext": text}})).unwrap();
            match inner("listZones", &raw(code, &body)) {
                Err(ApiError::CloudStack { code: c, text: t, .. }) => {
                    proptest::prop_assert_eq!(c, code);
                    proptest::prop_assert_eq!(t, text);
                }
                other => proptest::prop_assert!(false, "{other:?}"),
            }
        }
    }
}
