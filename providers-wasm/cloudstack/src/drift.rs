//! Drift: whether a VM still matches its NodeClass as resolved now. The template the VM booted
//! (for its zone and architecture), its service offering (still selected?), its network and
//! the hash of the NodeClass fields that shape a VM are compared with what `create` would pick
//! today.

use crate::catalog::Resolved;

/// The template changed.
pub const IMAGE_DRIFTED: &str = "ImageDrifted";
/// The VM's service offering is no longer selected.
pub const OFFERING_DRIFTED: &str = "ServiceOfferingDrifted";
/// The zone's network changed.
pub const NETWORK_DRIFTED: &str = "NetworkDrifted";
/// Other VM-shaping parameters changed, or the zone is no longer used.
pub const NODE_CLASS_DRIFTED: &str = "NodeClassDrifted";

/// What a VM was launched from; `None` where nothing was recorded (that part cannot drift).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recorded<'a> {
    /// Zone UUID.
    pub zone_id: Option<&'a str>,
    /// Kubernetes architecture.
    pub arch: Option<&'a str>,
    /// Template UUID.
    pub template_id: Option<&'a str>,
    /// Service offering UUID.
    pub offering_id: Option<&'a str>,
    /// Network UUID.
    pub network_id: Option<&'a str>,
    /// Parameters hash.
    pub hash: Option<&'a str>,
}

/// The drift reason, if any, in this order: zone gone, template, offering, network, parameters.
pub fn reason(recorded: Recorded<'_>, now: &Resolved, current_hash: &str) -> Option<&'static str> {
    if let Some(zone) = recorded.zone_id {
        let Some(placement) = now.placements.iter().find(|p| p.zone_id == zone) else {
            return Some(NODE_CLASS_DRIFTED);
        };
        if let (Some(arch), Some(template)) = (recorded.arch, recorded.template_id) {
            match placement.templates.get(arch) {
                Some(t) if t.id == template => {}
                _ => return Some(IMAGE_DRIFTED),
            }
        }
        if recorded
            .network_id
            .is_some_and(|n| n != placement.network_id)
        {
            return Some(NETWORK_DRIFTED);
        }
    }
    if recorded
        .offering_id
        .is_some_and(|o| !now.types.iter().any(|t| t.offering_id == o))
    {
        return Some(OFFERING_DRIFTED);
    }
    if recorded.hash.is_some_and(|h| h != current_hash) {
        return Some(NODE_CLASS_DRIFTED);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::tests::resolved;

    fn launched() -> Recorded<'static> {
        Recorded {
            zone_id: Some("za-id"),
            arch: Some("amd64"),
            template_id: Some("t-new"),
            offering_id: Some("o-small"),
            network_id: Some("n-a"),
            hash: Some("h"),
        }
    }

    #[test]
    fn each_change_drifts_with_its_reason() {
        let now = resolved();
        assert_eq!(reason(launched(), &now, "h"), None);
        assert_eq!(reason(launched(), &now, "h2"), Some(NODE_CLASS_DRIFTED));
        let old_image = Recorded {
            template_id: Some("t-old"),
            ..launched()
        };
        assert_eq!(reason(old_image, &now, "h"), Some(IMAGE_DRIFTED));
        let other_net = Recorded {
            network_id: Some("n-x"),
            ..launched()
        };
        assert_eq!(reason(other_net, &now, "h"), Some(NETWORK_DRIFTED));
        let gone = Recorded {
            offering_id: Some("o-other"),
            ..launched()
        };
        assert_eq!(reason(gone, &now, "h"), Some(OFFERING_DRIFTED));
        let zone = Recorded {
            zone_id: Some("zc"),
            ..launched()
        };
        assert_eq!(reason(zone, &now, "h"), Some(NODE_CLASS_DRIFTED));
        let arch = Recorded {
            arch: Some("arm64"),
            ..launched()
        };
        assert_eq!(reason(arch, &now, "h"), Some(IMAGE_DRIFTED));
        assert_eq!(reason(Recorded::default(), &now, "x"), None);
    }
}
