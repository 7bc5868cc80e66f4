//! Bindings for `capstan:provider@0.2.x`, and its imports wired to [`crate::capability`].
//!
//! 0.2 is 0.1 plus two standard imports: `wasi:http/outgoing-handler` (wasmtime-wasi-http, with
//! the host's [`OutboundHttp`](crate::capability::outbound_http) hooks doing the sending) and
//! `wasi:config/store` (wasmtime-wasi-config, serving the call's snapshot of the provider's
//! configuration). Its `types` are 0.1's Rust types; `kube` and `host` share 0.1's glue.

bindings_with_wasi_http!(["capstan:provider/types@0.2.0"] "../wit/since_v0.2.0");
