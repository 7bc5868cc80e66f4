//! Bindings for `capstan:provider@0.5.x`, and its imports wired to [`crate::capability`].
//!
//! 0.5 is 0.4 with the DRA devices of instance types: a `devices` interface of plain data (slice
//! templates of devices, attributes, capacities and shared counters) and `get-instance-types`
//! answering `devices.instance-types`. Its `types` are 0.1's Rust types and its `lifecycle` 0.4's;
//! `host` and `kube` share 0.3's glue; `wasi:http` and `wasi:config` are linked as for 0.2.

bindings_with_wasi_http!(
    [
        "capstan:provider/types@0.5.0",
        "capstan:provider/lifecycle@0.5.0",
        "capstan:provider/devices@0.5.0"
    ]
    "../wit/since_v0.5.0",
    paged;
    "capstan:provider/lifecycle" => super::since_v0_4_0::capstan::provider::lifecycle
);
