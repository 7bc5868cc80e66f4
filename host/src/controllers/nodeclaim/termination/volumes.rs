//! Which VolumeAttachments a drained node still waits for, pure (Karpenter's
//! `filterVolumeAttachments`): those on the node, of a PersistentVolume, except the volumes of
//! pods the drain leaves on the node (static pods, pods tolerating the disrupted taint, pods stuck
//! terminating) — those would never detach.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::ResourceExt;

use super::first_few;

/// The PersistentVolumeClaims a pod mounts: its `persistentVolumeClaim` volumes and the claims
/// generated for its `ephemeral` ones (`<pod>-<volume>`).
pub fn claim_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            if let Some(pvc) = &v.persistent_volume_claim {
                Some(pvc.claim_name.clone())
            } else {
                v.ephemeral
                    .as_ref()
                    .map(|_| format!("{}-{}", pod.name_any(), v.name))
            }
        })
        .collect()
}

/// The attachments on `node` the termination waits for: those of a PersistentVolume not in
/// `ignored` (the volumes of the pods left on the node).
pub fn pending<'a>(
    attachments: &'a [VolumeAttachment],
    node: &str,
    ignored: &BTreeSet<String>,
) -> Vec<&'a VolumeAttachment> {
    attachments
        .iter()
        .filter(|a| a.spec.node_name == node)
        .filter(|a| {
            a.spec
                .source
                .persistent_volume_name
                .as_ref()
                .is_some_and(|pv| !ignored.contains(pv))
        })
        .collect()
}

/// `Awaiting deletion of bound volumeattachments (a, b, c and 2 more)`.
pub fn summary(pending: &[&VolumeAttachment], shown: usize) -> String {
    let names = first_few(pending.iter().map(|a| a.name_any()), shown);
    format!("Awaiting deletion of bound volumeattachments ({names})")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn attachment(name: &str, node: &str, pv: Option<&str>) -> VolumeAttachment {
        let source = match pv {
            Some(pv) => json!({"persistentVolumeName": pv}),
            None => json!({"inlineVolumeSpec": {"csi": {"driver": "d", "volumeHandle": "h"}}}),
        };
        serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": {"name": name},
            "spec": {"attacher": "csi.example.com", "nodeName": node, "source": source},
        }))
        .unwrap()
    }

    #[test]
    fn pending_attachments() {
        let all = [
            attachment("mine", "n1", Some("pv-a")),
            attachment("other-node", "n2", Some("pv-b")),
            attachment("inline", "n1", None),
            attachment("left-behind", "n1", Some("pv-c")),
        ];
        let cases: Vec<(&str, Vec<&str>, Vec<&str>)> = vec![
            ("nothing ignored", vec![], vec!["mine", "left-behind"]),
            ("a pod left on the node", vec!["pv-c"], vec!["mine"]),
            ("every volume left", vec!["pv-a", "pv-c"], vec![]),
            (
                "another node's volume",
                vec!["pv-b"],
                vec!["mine", "left-behind"],
            ),
        ];
        for (name, ignored, want) in cases {
            let ignored: BTreeSet<String> = ignored.into_iter().map(str::to_owned).collect();
            let got: Vec<String> = pending(&all, "n1", &ignored)
                .into_iter()
                .map(ResourceExt::name_any)
                .collect();
            assert_eq!(got, want, "{name}");
        }
        assert!(pending(&all, "n3", &BTreeSet::new()).is_empty());
    }

    #[test]
    fn claims_of_a_pod() {
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "ns"},
            "spec": {
                "containers": [{"name": "c", "image": "i"}],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                    {"name": "config", "configMap": {"name": "cm"}},
                ],
            },
        }))
        .unwrap();
        assert_eq!(claim_names(&pod), ["data-web-0", "web-0-scratch"]);
    }

    #[test]
    fn summary_names_a_few() {
        let all: Vec<VolumeAttachment> = (0..7)
            .map(|i| attachment(&format!("va-{i}"), "n", Some("pv")))
            .collect();
        let refs: Vec<&VolumeAttachment> = all.iter().collect();
        assert_eq!(
            summary(&refs[..2], 5),
            "Awaiting deletion of bound volumeattachments (va-0, va-1)"
        );
        assert_eq!(
            summary(&refs, 5),
            "Awaiting deletion of bound volumeattachments (va-0, va-1, va-2, va-3, va-4 and 2 more)"
        );
    }
}
