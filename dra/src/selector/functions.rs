//! The Kubernetes CEL library functions DRA selectors use: `quantity()` and `semver()` values and
//! their comparison methods, registered on each evaluation context.

use std::cmp::Ordering;
use std::sync::Arc;

use capstan_model::Quantity;
use cel::extractors::{Arguments, This};
use cel::objects::Opaque;
use cel::{Context, DeclarationError, ExecutionError, Value};

use super::semver::Semver;

/// A Kubernetes quantity as a CEL value (`quantity("40Gi")`, `device.capacity[...]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CelQuantity(pub Quantity);

impl Opaque for CelQuantity {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

/// A semantic version as a CEL value (`semver("1.2.3")`, version attributes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CelSemver(pub Semver);

impl Opaque for CelSemver {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

/// A quantity as a CEL value.
pub fn quantity_value(quantity: Quantity) -> Value {
    Value::Opaque(Arc::new(CelQuantity(quantity)))
}

/// A version attribute as a CEL value: a semver if it parses, else its string.
pub fn version_value(text: &str) -> Value {
    match Semver::parse(text) {
        Some(version) => Value::Opaque(Arc::new(CelSemver(version))),
        None => Value::String(Arc::new(text.to_owned())),
    }
}

fn error(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

fn as_quantity(value: &Value) -> Option<Quantity> {
    match value {
        Value::Opaque(opaque) => opaque.downcast_ref::<CelQuantity>().map(|q| q.0),
        Value::Int(units) => Some(Quantity::from_units((*units).into())),
        _ => None,
    }
}

fn as_semver(value: &Value) -> Option<&Semver> {
    match value {
        Value::Opaque(opaque) => opaque.downcast_ref::<CelSemver>().map(|v| &v.0),
        _ => None,
    }
}

fn compare(function: &str, this: &Value, other: &Value) -> Result<Ordering, ExecutionError> {
    if let (Some(a), Some(b)) = (as_semver(this), as_semver(other)) {
        return Ok(a.cmp(b));
    }
    match (this, as_quantity(this), as_quantity(other)) {
        (Value::Opaque(_), Some(a), Some(b)) => Ok(a.cmp(&b)),
        _ => Err(error(
            function,
            format!("cannot compare {this:?} with {other:?}"),
        )),
    }
}

fn ordering_int(ordering: Ordering) -> Value {
    Value::Int(match ordering {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    })
}

fn string_arg(function: &str, value: &Value) -> Result<Arc<String>, ExecutionError> {
    match value {
        Value::String(text) => Ok(text.clone()),
        other => Err(error(function, format!("expects a string, got {other:?}"))),
    }
}

fn this_quantity(function: &str, value: &Value) -> Result<Quantity, ExecutionError> {
    match value {
        Value::Opaque(_) => as_quantity(value),
        _ => None,
    }
    .ok_or_else(|| error(function, format!("not a quantity: {value:?}")))
}

fn this_semver<'a>(function: &str, value: &'a Value) -> Result<&'a Semver, ExecutionError> {
    as_semver(value).ok_or_else(|| error(function, format!("not a semver: {value:?}")))
}

fn arithmetic(
    function: &'static str,
    this: &Value,
    args: &[Value],
    op: fn(&Quantity, &Quantity) -> Option<Quantity>,
) -> Result<Value, ExecutionError> {
    let a = this_quantity(function, this)?;
    let b = args
        .first()
        .and_then(as_quantity)
        .ok_or_else(|| error(function, "expects a quantity or an int"))?;
    op(&a, &b)
        .map(quantity_value)
        .ok_or_else(|| error(function, "overflow"))
}

/// Registers the library on `context`.
pub fn register(context: &mut Context<'_, '_>) -> Result<(), DeclarationError> {
    context.add_function("quantity", |text: Value| {
        let text = string_arg("quantity", &text)?;
        Quantity::parse(&text)
            .map(quantity_value)
            .map_err(|e| error("quantity", e))
    })?;
    context.add_function("isQuantity", |text: Value| {
        Ok::<_, ExecutionError>(Value::Bool(
            Quantity::parse(&string_arg("isQuantity", &text)?).is_ok(),
        ))
    })?;
    context.add_function("semver", |text: Value| {
        let text = string_arg("semver", &text)?;
        Semver::parse(&text)
            .map(|v| Value::Opaque(Arc::new(CelSemver(v))))
            .ok_or_else(|| error("semver", format!("{text:?} is not a semantic version")))
    })?;
    context.add_function("isSemver", |text: Value| {
        Ok::<_, ExecutionError>(Value::Bool(
            Semver::parse(&string_arg("isSemver", &text)?).is_some(),
        ))
    })?;
    context.add_function("compareTo", |This(this): This<Value>, other: Value| {
        compare("compareTo", &this, &other).map(ordering_int)
    })?;
    context.add_function("isGreaterThan", |This(this): This<Value>, other: Value| {
        compare("isGreaterThan", &this, &other).map(|o| Value::Bool(o == Ordering::Greater))
    })?;
    context.add_function("isLessThan", |This(this): This<Value>, other: Value| {
        compare("isLessThan", &this, &other).map(|o| Value::Bool(o == Ordering::Less))
    })?;
    context.add_function("sign", |This(this): This<Value>| {
        let q = this_quantity("sign", &this)?;
        Ok::<_, ExecutionError>(ordering_int(q.millis().cmp(&0)))
    })?;
    context.add_function("isInteger", |This(this): This<Value>| {
        let q = this_quantity("isInteger", &this)?;
        let whole = q.millis() % 1000 == 0 && i64::try_from(q.millis() / 1000).is_ok();
        Ok::<_, ExecutionError>(Value::Bool(whole))
    })?;
    context.add_function("asInteger", |This(this): This<Value>| {
        let q = this_quantity("asInteger", &this)?;
        if q.millis() % 1000 != 0 {
            return Err(error("asInteger", "quantity is not an integer"));
        }
        i64::try_from(q.millis() / 1000)
            .map(Value::Int)
            .map_err(|_| error("asInteger", "quantity overflows int"))
    })?;
    context.add_function("asApproximateFloat", |This(this): This<Value>| {
        let q = this_quantity("asApproximateFloat", &this)?;
        // Precision loss is what "approximate" means here.
        #[allow(clippy::cast_precision_loss)]
        let value = q.millis() as f64 / 1000.0;
        Ok::<_, ExecutionError>(Value::Float(value))
    })?;
    context.add_function(
        "add",
        |This(this): This<Value>, Arguments(args): Arguments| {
            arithmetic("add", &this, &args, Quantity::checked_add)
        },
    )?;
    context.add_function(
        "sub",
        |This(this): This<Value>, Arguments(args): Arguments| {
            arithmetic("sub", &this, &args, Quantity::checked_sub)
        },
    )?;
    context.add_function("major", |This(this): This<Value>| {
        let v = this_semver("major", &this)?;
        i64::try_from(v.major)
            .map(Value::Int)
            .map_err(|e| error("major", e))
    })?;
    context.add_function("minor", |This(this): This<Value>| {
        let v = this_semver("minor", &this)?;
        i64::try_from(v.minor)
            .map(Value::Int)
            .map_err(|e| error("minor", e))
    })?;
    context.add_function("patch", |This(this): This<Value>| {
        let v = this_semver("patch", &this)?;
        i64::try_from(v.patch)
            .map(Value::Int)
            .map_err(|e| error("patch", e))
    })?;
    Ok(())
}
