//! CEL device selectors (DeviceClass and request `selectors[].cel.expression`): compiled once per
//! expression text, evaluated against one device with Kubernetes' DRA CEL variables
//! (`device.driver`, `device.attributes`, `device.capacity`, `device.allowMultipleAllocations`)
//! and the `quantity()`/`semver()` library.

mod functions;
mod semver;

use std::collections::HashMap;
use std::sync::Arc;

use cel::{Context, Env, Program, Value};

use crate::template::{AttributeValue, Device, qualify};

pub use functions::{CelQuantity, CelSemver};
pub use semver::Semver;

/// Why a selector did not give a boolean.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The expression does not parse: every claim using it fails.
    #[error("CEL selector {expression:?} does not compile: {message}")]
    Compile {
        /// The expression text.
        expression: String,
        /// The parser's message.
        message: String,
    },
    /// Evaluation failed on a device (e.g. a missing attribute): that device does not match.
    #[error("CEL selector {expression:?} failed on device {device}: {message}")]
    Runtime {
        /// The expression text.
        expression: String,
        /// The device it was evaluated against.
        device: String,
        /// The interpreter's message.
        message: String,
    },
    /// The expression gave something other than a bool: that device does not match.
    #[error("CEL selector {expression:?} gave {got} on device {device}, not a bool")]
    NotBool {
        /// The expression text.
        expression: String,
        /// The device it was evaluated against.
        device: String,
        /// What it gave.
        got: String,
    },
}

impl SelectorError {
    /// Whether the error is in the expression itself rather than its evaluation on one device.
    pub fn is_compile(&self) -> bool {
        matches!(self, SelectorError::Compile { .. })
    }
}

/// A compiled selector, cheap to clone and shared by every request using the same text.
#[derive(Clone)]
pub struct CompiledSelector {
    expression: Arc<str>,
    program: Arc<Program>,
    env: Arc<Env>,
}

impl std::fmt::Debug for CompiledSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CompiledSelector")
            .field(&self.expression)
            .finish()
    }
}

/// Compiles selector expressions once each, keyed by their text.
pub struct SelectorCache {
    env: Arc<Env>,
    programs: HashMap<String, Result<CompiledSelector, SelectorError>>,
}

impl Default for SelectorCache {
    fn default() -> Self {
        SelectorCache {
            env: Arc::new(Env::stdlib()),
            programs: HashMap::new(),
        }
    }
}

impl std::fmt::Debug for SelectorCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelectorCache")
            .field("expressions", &self.programs.len())
            .finish()
    }
}

impl SelectorCache {
    /// An empty cache over CEL's standard library.
    pub fn new() -> Self {
        Self::default()
    }

    /// The compiled form of `expression`, compiling it on first use (errors are cached too).
    pub fn compile(&mut self, expression: &str) -> Result<CompiledSelector, SelectorError> {
        if let Some(compiled) = self.programs.get(expression) {
            return compiled.clone();
        }
        let compiled = match self.env.compile(expression) {
            Ok(program) => Ok(CompiledSelector {
                expression: Arc::from(expression),
                program: Arc::new(program),
                env: self.env.clone(),
            }),
            Err(error) => Err(SelectorError::Compile {
                expression: expression.to_owned(),
                message: error.to_string().trim().to_owned(),
            }),
        };
        self.programs
            .insert(expression.to_owned(), compiled.clone());
        compiled
    }

    /// How many distinct expressions have been compiled (or failed to).
    pub fn len(&self) -> usize {
        self.programs.len()
    }

    /// Whether nothing has been compiled yet.
    pub fn is_empty(&self) -> bool {
        self.programs.is_empty()
    }
}

/// One device as the CEL variable `device`, built once and evaluated by many selectors.
#[derive(Debug, Clone)]
pub struct DeviceValue {
    name: String,
    value: Value,
}

impl DeviceValue {
    /// `device` of `driver`: attributes and capacities grouped by domain, unqualified names in the
    /// driver's domain, quantities as `quantity` values and versions as `semver` values.
    pub fn new(driver: &str, device: &Device) -> Self {
        let mut attributes: HashMap<String, HashMap<String, Value>> = HashMap::new();
        for (name, value) in &device.attributes {
            let (domain, name) = qualify(name, driver);
            let value = match value {
                AttributeValue::Int(v) => Value::Int(*v),
                AttributeValue::Bool(v) => Value::Bool(*v),
                AttributeValue::String(v) => Value::String(Arc::new(v.clone())),
                AttributeValue::Version(v) => functions::version_value(v),
            };
            attributes
                .entry(domain.to_owned())
                .or_default()
                .insert(name.to_owned(), value);
        }
        let mut capacity: HashMap<String, HashMap<String, Value>> = HashMap::new();
        for (name, value) in &device.capacity {
            let (domain, name) = qualify(name, driver);
            capacity
                .entry(domain.to_owned())
                .or_default()
                .insert(name.to_owned(), functions::quantity_value(*value));
        }
        let mut fields: HashMap<String, Value> = HashMap::new();
        fields.insert("driver".into(), Value::String(Arc::new(driver.to_owned())));
        fields.insert("attributes".into(), nested(attributes));
        fields.insert("capacity".into(), nested(capacity));
        fields.insert(
            "allowMultipleAllocations".into(),
            Value::Bool(device.allow_multiple_allocations),
        );
        DeviceValue {
            name: format!("{driver}/{}", device.name),
            value: Value::from(fields),
        }
    }
}

fn nested(map: HashMap<String, HashMap<String, Value>>) -> Value {
    Value::from(
        map.into_iter()
            .map(|(domain, names)| (domain, Value::from(names)))
            .collect::<HashMap<String, Value>>(),
    )
}

impl CompiledSelector {
    /// The expression text.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    pub(crate) fn expression_arc(&self) -> Arc<str> {
        self.expression.clone()
    }

    /// Whether `device` matches. A runtime error or a non-bool result is an error naming the
    /// expression and the device; callers treat it as "does not match".
    pub fn matches(&self, device: &DeviceValue) -> Result<bool, SelectorError> {
        matches_all(std::slice::from_ref(self), device)
    }

    fn evaluate(
        &self,
        context: &Context<'_, '_>,
        device: &DeviceValue,
    ) -> Result<bool, SelectorError> {
        let runtime = |message: String| SelectorError::Runtime {
            expression: self.expression.to_string(),
            device: device.name.clone(),
            message,
        };
        match self.program.execute(context) {
            Ok(Value::Bool(matched)) => Ok(matched),
            Ok(other) => Err(SelectorError::NotBool {
                expression: self.expression.to_string(),
                device: device.name.clone(),
                got: format!("{other:?}"),
            }),
            Err(error) => Err(runtime(error.to_string())),
        }
    }
}

/// Whether `device` matches every selector (ANDed, in order, stopping at the first that does
/// not), evaluated in one context. Errors as for [`CompiledSelector::matches`].
pub fn matches_all(
    selectors: &[CompiledSelector],
    device: &DeviceValue,
) -> Result<bool, SelectorError> {
    let Some(first) = selectors.first() else {
        return Ok(true);
    };
    let mut context = Context::with_env(first.env.clone());
    functions::register(&mut context).map_err(|e| SelectorError::Runtime {
        expression: first.expression.to_string(),
        device: device.name.clone(),
        message: e.to_string(),
    })?;
    context.add_variable_from_value("device", device.value.clone());
    for selector in selectors {
        if !selector.evaluate(&context, device)? {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests;
