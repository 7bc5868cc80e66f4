//! CloudStack's API errors: `{"<command>response":{"uuidList":[],"errorcode":431,
//! "cserrorcode":4350,"errortext":"..."}}` with the HTTP status equal to `errorcode`.

use serde_json::{Value, json};

/// `ApiErrorCode.UNAUTHORIZED`.
pub const UNAUTHORIZED: u16 = 401;
/// `ApiErrorCode.PARAM_ERROR`.
pub const PARAM_ERROR: u16 = 431;
/// `ApiErrorCode.UNSUPPORTED_ACTION_ERROR`.
pub const UNSUPPORTED_ACTION_ERROR: u16 = 432;
/// `ApiErrorCode.INTERNAL_ERROR` (also every failed job's `jobresultcode`).
pub const INTERNAL_ERROR: u16 = 530;
/// `ApiErrorCode.INSUFFICIENT_CAPACITY_ERROR`.
pub const INSUFFICIENT_CAPACITY_ERROR: u16 = 533;
/// `ApiErrorCode.RESOURCE_UNAVAILABLE_ERROR`.
pub const RESOURCE_UNAVAILABLE_ERROR: u16 = 534;
/// `ApiErrorCode.RESOURCE_ALLOCATION_ERROR`.
pub const RESOURCE_ALLOCATION_ERROR: u16 = 535;

/// `CSExceptionErrorCode` of `InvalidParameterValueException`.
pub const CS_INVALID_PARAMETER: u32 = 4350;
/// `CSExceptionErrorCode` of `CloudRuntimeException`.
pub const CS_CLOUD_RUNTIME: u32 = 4250;
/// `CSExceptionErrorCode` of `InsufficientServerCapacityException`.
pub const CS_INSUFFICIENT_SERVER_CAPACITY: u32 = 4335;
/// `CSExceptionErrorCode` of `ResourceUnavailableException`.
pub const CS_RESOURCE_UNAVAILABLE: u32 = 4380;
/// `CSExceptionErrorCode` of `ResourceAllocationException`.
pub const CS_RESOURCE_ALLOCATION: u32 = 4370;

/// The text CloudStack answers a request that does not verify.
pub const UNAUTHORIZED_TEXT: &str = "unable to verify user credentials and/or request signature";

/// An API error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// `errorcode`, also the HTTP status.
    pub code: u16,
    /// `cserrorcode` (absent for 401, as CloudStack sends it).
    pub cs_code: Option<u32>,
    /// `errortext`.
    pub text: String,
}

impl ApiError {
    /// 401, CloudStack's text.
    pub fn unauthorized() -> Self {
        Self {
            code: UNAUTHORIZED,
            cs_code: None,
            text: UNAUTHORIZED_TEXT.into(),
        }
    }

    /// 431 (`InvalidParameterValueException`).
    pub fn param(text: impl Into<String>) -> Self {
        Self {
            code: PARAM_ERROR,
            cs_code: Some(CS_INVALID_PARAMETER),
            text: text.into(),
        }
    }

    /// 431 for a required parameter that is missing.
    pub fn missing(command: &str, name: &str) -> Self {
        Self::param(format!(
            "Unable to execute API command {} due to missing parameter {name}",
            command.to_lowercase()
        ))
    }

    /// 431 for a UUID that names nothing (CloudStack's parameter processing).
    pub fn invalid_id(command: &str, name: &str, value: &str) -> Self {
        Self::param(format!(
            "Unable to execute API command {} due to invalid value. Invalid parameter {name} \
             value={value} due to incorrect long value format, or entity does not exist or due \
             to incorrect parameter annotation for the field in api cmd class.",
            command.to_lowercase()
        ))
    }

    /// 432: a command this emulator does not implement.
    pub fn unsupported(command: &str) -> Self {
        Self {
            code: UNSUPPORTED_ACTION_ERROR,
            cs_code: Some(CS_CLOUD_RUNTIME),
            text: format!("The CloudStack emulator does not implement the command {command}"),
        }
    }

    /// The `cserrorcode` CloudStack pairs with an `errorcode` in job results.
    pub fn cs_code_for(code: u16) -> u32 {
        match code {
            PARAM_ERROR => CS_INVALID_PARAMETER,
            INSUFFICIENT_CAPACITY_ERROR => CS_INSUFFICIENT_SERVER_CAPACITY,
            RESOURCE_UNAVAILABLE_ERROR => CS_RESOURCE_UNAVAILABLE,
            RESOURCE_ALLOCATION_ERROR => CS_RESOURCE_ALLOCATION,
            _ => CS_CLOUD_RUNTIME,
        }
    }

    /// The error object (without the response wrapper).
    pub fn body(&self) -> Value {
        let mut body = json!({
            "uuidList": [],
            "errorcode": self.code,
            "errortext": self.text,
        });
        if let Some(cs) = self.cs_code {
            body["cserrorcode"] = json!(cs);
        }
        body
    }

    /// The whole document under `response_name`.
    pub fn document(&self, response_name: &str) -> Value {
        json!({ response_name: self.body() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_shaped_like_cloudstacks() {
        let doc = ApiError::missing("deployVirtualMachine", "zoneid")
            .document("deployvirtualmachineresponse");
        assert_eq!(
            doc,
            json!({"deployvirtualmachineresponse": {
                "uuidList": [], "errorcode": 431, "cserrorcode": 4350,
                "errortext": "Unable to execute API command deployvirtualmachine due to missing parameter zoneid"
            }})
        );
        let doc = ApiError::unauthorized().document("listzonesresponse");
        assert_eq!(doc["listzonesresponse"].get("cserrorcode"), None);
        assert_eq!(doc["listzonesresponse"]["errorcode"], 401);
    }
}
