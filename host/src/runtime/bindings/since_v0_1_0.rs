//! Bindings for `capstan:provider@0.1.x`, and its imports wired to [`crate::capability`].

use wasmtime::component::{HasSelf, Linker};

use crate::runtime::call_state::CallState;

wasmtime::component::bindgen!({
    path: "../wit/since_v0.1.0",
    world: "cloud-provider-world",
    imports: { default: async },
    exports: { default: async },
    additional_derives: [PartialEq],
});

use self::capstan::provider::{host, kube, types};

/// A linker with WASI (p2, async) and this version's imports.
pub(crate) fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<CallState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    CloudProviderWorld::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |state| state)?;
    Ok(linker)
}

impl types::Host for CallState {}

capstan_imports!();
