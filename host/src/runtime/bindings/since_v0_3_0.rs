//! Bindings for `capstan:provider@0.3.x`, and its imports wired to [`crate::capability`].
//!
//! 0.3 is 0.2 with paged lists: `kube.list-options` gains `continue-token` (the previous page's
//! `metadata.continue`). Its `types` are 0.1's Rust types; `host` and the rest of `kube` share
//! 0.1's glue; `wasi:http` and `wasi:config` are linked as for 0.2.

use wasmtime::component::{HasSelf, Linker};

use crate::runtime::call_state::CallState;

wasmtime::component::bindgen!({
    path: "../wit/since_v0.3.0",
    world: "cloud-provider-world",
    imports: { default: async },
    exports: { default: async },
    with: {
        // Identical to 0.1's (checked by a test in `bindings`): one set of host types.
        "capstan:provider/types": super::since_v0_1_0::capstan::provider::types,
        "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
    },
});

use self::capstan::provider::{host, kube};

/// A linker with WASI (p2, async), `wasi:http`, `wasi:config` and this version's imports.
pub(crate) fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<CallState>> {
    let mut linker = super::wasi_http_config_linker(engine)?;
    kube::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state)?;
    host::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state)?;
    linker.instance("capstan:provider/types@0.3.0")?;
    Ok(linker)
}

capstan_imports!(paged);
