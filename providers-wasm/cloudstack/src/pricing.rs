//! Prices. CloudStack has no price API: the NodeClass says what an hour of each offering costs,
//! by offering name or per vCPU, GiB of memory and GPU. The defaults keep bigger offerings
//! dearer, so the cheapest fitting offering is the smallest one.

use std::collections::BTreeMap;

use capstan_provider_sdk::ProviderError;
use capstan_provider_sdk::params::invalid;
use serde::{Deserialize, Serialize};

/// Default price of one vCPU-hour.
pub const DEFAULT_PER_VCPU: f64 = 0.024;
/// Default price of one GiB-hour of memory.
pub const DEFAULT_PER_GIB: f64 = 0.003;
/// Default price of one GPU-hour.
pub const DEFAULT_PER_GPU: f64 = 0.9;

/// The price model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Pricing {
    /// Price per hour by offering name (wins over the per-unit prices).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub offerings: BTreeMap<String, f64>,
    /// Price per vCPU-hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_vcpu: Option<f64>,
    /// Price per GiB-hour of memory.
    #[serde(default, rename = "perGiB", skip_serializing_if = "Option::is_none")]
    pub per_gib: Option<f64>,
    /// Price per GPU-hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_gpu: Option<f64>,
}

fn price_ok(field: &str, value: f64) -> Result<(), ProviderError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("must be finite and >= 0, got {value}"),
        ))
    }
}

impl Pricing {
    /// Checks every price is finite and >= 0.
    pub fn validate(&self) -> Result<(), ProviderError> {
        for (name, price) in &self.offerings {
            price_ok(&format!("pricing.offerings.{name}"), *price)?;
        }
        for (field, value) in [
            ("pricing.perVcpu", self.per_vcpu),
            ("pricing.perGiB", self.per_gib),
            ("pricing.perGpu", self.per_gpu),
        ] {
            if let Some(v) = value {
                price_ok(field, v)?;
            }
        }
        Ok(())
    }

    /// The hourly price of offering `name` with `vcpus`, `memory_mib` and `gpus`.
    pub fn price(&self, name: &str, vcpus: u64, memory_mib: u64, gpus: u64) -> f64 {
        if let Some(price) = self.offerings.get(name) {
            return *price;
        }
        let per_vcpu = self.per_vcpu.unwrap_or(DEFAULT_PER_VCPU);
        let per_gib = self.per_gib.unwrap_or(DEFAULT_PER_GIB);
        let per_gpu = self.per_gpu.unwrap_or(DEFAULT_PER_GPU);
        per_vcpu * vcpus as f64 + per_gib * (memory_mib as f64 / 1024.0) + per_gpu * gpus as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn by_name_then_by_unit() {
        let p = Pricing {
            offerings: BTreeMap::from([("small".to_string(), 0.5)]),
            per_vcpu: Some(0.1),
            per_gib: Some(0.01),
            per_gpu: Some(1.0),
        };
        assert_eq!(p.price("small", 64, 1 << 20, 8), 0.5);
        let medium = p.price("medium", 2, 4096, 0);
        assert!((medium - 0.24).abs() < 1e-12, "{medium}");
        let gpu = p.price("gpu", 8, 65536, 1);
        assert!((gpu - (0.8 + 0.64 + 1.0)).abs() < 1e-12, "{gpu}");
        assert!(Pricing::default().price("x", 1, 1024, 0) > 0.0);
        let bad = Pricing {
            per_gpu: Some(f64::NAN),
            ..Pricing::default()
        };
        assert!(bad.validate().is_err());
    }

    proptest! {
        #[test]
        fn default_prices_grow_with_size(cpu in 1u64..256, mem in 1u64..1_048_576, gpu in 0u64..8, more in 1u64..64) {
            let p = Pricing::default();
            let base = p.price("a", cpu, mem, gpu);
            prop_assert!(base.is_finite() && base > 0.0);
            prop_assert!(p.price("a", cpu + more, mem, gpu) > base);
            prop_assert!(p.price("a", cpu, mem + more * 1024, gpu) > base);
            prop_assert!(p.price("a", cpu, mem, gpu + more) > base);
        }
    }
}
