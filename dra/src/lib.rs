//! Dynamic Resource Allocation (`resource.k8s.io/v1`) for Capstan's scheduling simulation.
//!
//! stub
#![allow(missing_docs)]
pub mod selector;
pub mod template;
