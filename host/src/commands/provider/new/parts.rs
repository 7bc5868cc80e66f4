//! The parts of a skeleton's provider source that differ by contract: its imports (`{{imports}}`),
//! what `get-instance-types` answers (`{{catalog}}`: 0.4's catalog with volume limits, 0.5's
//! with devices too), and `repair-policies` with what 0.4 adds (`reboot`, `registered`)
//! (`{{repair}}`).

use capstan::runtime::bindings::WitVersion;

use super::Lang;

/// A placeholder and the text that replaces it.
pub type Part = (&'static str, &'static str);

/// The contract-dependent parts of `lang`'s skeleton for `contract`.
pub fn parts(lang: Lang, contract: WitVersion) -> [Part; 3] {
    let since_0_4 = contract >= WitVersion::V0_4;
    match (lang, since_0_4) {
        (Lang::Rust, false) => RUST_BEFORE_0_4,
        (Lang::Rust, true) if contract >= WitVersion::V0_5 => RUST_0_5,
        (Lang::Rust, true) => RUST_0_4,
        (Lang::Python, false) => PYTHON_BEFORE_0_4,
        (Lang::Python, true) if contract >= WitVersion::V0_5 => PYTHON_0_5,
        (Lang::Python, true) => PYTHON_0_4,
    }
}

const RUST_BEFORE_0_4: [Part; 3] = [
    (
        "{{imports}}",
        "use bindings::capstan::provider::types::{\n    \
         Catalog, NodeClaim, NodeClass, NodePool, ProviderError, RepairPolicy,\n};",
    ),
    ("{{catalog}}", "Catalog"),
    (
        "{{repair}}",
        "    /// Node conditions that mean an instance is broken and should be replaced.\n    \
         fn repair_policies() -> Vec<RepairPolicy> {\n        Vec::new()\n    }",
    ),
];

const RUST_0_4: [Part; 3] = [
    (
        "{{imports}}",
        "use bindings::capstan::provider::lifecycle::{\n    \
         InstanceTypes, RebootError, Registration, RepairRule,\n};\n\
         use bindings::capstan::provider::types::{NodeClaim, NodeClass, NodePool, ProviderError};",
    ),
    ("{{catalog}}", "InstanceTypes"),
    (
        "{{repair}}",
        "    /// When and how unhealthy nodes are repaired (none: no repair).\n    \
         fn repair_policies() -> Vec<RepairRule> {\n        Vec::new()\n    }\n\n    \
         /// Reboots the instance in place; `not-implemented` makes the host replace it.\n    \
         fn reboot(_claim: NodeClaim, _operation_id: String) -> Result<(), RebootError> {\n        \
         Err(RebootError::NotImplemented)\n    }\n\n    \
         /// The registration hook: `ready` once the joined node may be registered.\n    \
         fn registered(_claim: NodeClaim) -> Result<Registration, ProviderError> {\n        \
         Ok(Registration::Ready)\n    }",
    ),
];

/// 0.4's, but `get-instance-types` answers 0.5's `devices.instance-types` (the devices of each
/// type as DRA ResourceSlice templates, none to start with).
const RUST_0_5: [Part; 3] = [
    (
        "{{imports}}",
        "use bindings::capstan::provider::devices::InstanceTypes;\n\
         use bindings::capstan::provider::lifecycle::{RebootError, Registration, RepairRule};\n\
         use bindings::capstan::provider::types::{NodeClaim, NodeClass, NodePool, ProviderError};",
    ),
    ("{{catalog}}", "InstanceTypes"),
    RUST_0_4[2],
];

const PYTHON_BEFORE_0_4: [Part; 3] = [
    ("{{imports}}", "from capstan_provider import errors"),
    ("{{catalog}}", "``builder.finish()``"),
    (
        "{{repair}}",
        "    def repair_policies(self):\n        \
         \"\"\"Node conditions that mean an instance is broken (``ready_repair_policies(1800)``).\"\"\"\n        \
         return []",
    ),
];

const PYTHON_0_4: [Part; 3] = [
    (
        "{{imports}}",
        "from capstan_provider import errors, lifecycle",
    ),
    (
        "{{catalog}}",
        "``builder.finish_instance_types()`` (the catalog with\n        \
         each type's volume limits, ``.volume_limit(driver, limit)``)",
    ),
    (
        "{{repair}}",
        "    def repair_policies(self):\n        \
         \"\"\"When and how unhealthy nodes are repaired, ``lifecycle.repair_rule(...)`` each (none: no\n        \
         repair; ``ready_repair_policies(1800)``: replace a node not Ready for 30 minutes).\"\"\"\n        \
         return []\n\n    \
         def reboot(self, claim, operation_id):\n        \
         \"\"\"Reboot the instance in place, once per ``operation_id``; ``not-implemented`` makes the host\n        \
         replace the node instead.\"\"\"\n        \
         raise lifecycle.reboot_not_implemented()\n\n    \
         def registered(self, claim):\n        \
         \"\"\"The registration hook: ``lifecycle.ready()`` once the joined node may be registered, or\n        \
         ``lifecycle.wait(message)`` to hold it.\"\"\"\n        \
         return lifecycle.ready()",
    ),
];

/// 0.4's, but `get-instance-types` answers with devices too (the SDK's `finish_instance_types`
/// answers in the shape of the contract the bindings are built against).
const PYTHON_0_5: [Part; 3] = [
    PYTHON_0_4[0],
    (
        "{{catalog}}",
        "``builder.finish_instance_types()`` (the catalog with\n        \
         each type's volume limits, ``.volume_limit(driver, limit)``, and DRA devices,\n        \
         ``.slices([...])`` of ``capstan_provider.devices.SliceBuilder``)",
    ),
    PYTHON_0_4[2],
];
