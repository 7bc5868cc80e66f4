//! Bindings for `capstan:provider@0.4.x`, and its imports wired to [`crate::capability`].
//!
//! 0.4 is 0.3 with Karpenter v1.15's provider contract: a `lifecycle` interface of plain data (repair
//! rules with actions, reboot errors, the registration hook's answer, volume attachment limits) and
//! an export with `reboot` and `registered`, repair rules from `repair-policies` and the catalog with
//! its volume limits from `get-instance-types`. Its `types` are 0.1's Rust types; `host` and `kube`
//! share 0.3's glue; `wasi:http` and `wasi:config` are linked as for 0.2.

bindings_with_wasi_http!(
    ["capstan:provider/types@0.4.0", "capstan:provider/lifecycle@0.4.0"]
    "../wit/since_v0.4.0",
    paged
);
