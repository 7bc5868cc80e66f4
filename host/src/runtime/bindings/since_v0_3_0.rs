//! Bindings for `capstan:provider@0.3.x`, and its imports wired to [`crate::capability`].
//!
//! 0.3 is 0.2 with paged lists: `kube.list-options` gains `continue-token` (the previous page's
//! `metadata.continue`). Its `types` are 0.1's Rust types; `host` and the rest of `kube` share
//! 0.1's glue; `wasi:http` and `wasi:config` are linked as for 0.2.

bindings_with_wasi_http!(["capstan:provider/types@0.3.0"] "../wit/since_v0.3.0", paged);
