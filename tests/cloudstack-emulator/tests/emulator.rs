//! The CloudStack emulator's tests: its API driven by the project's signer and by a real
//! third-party client (the `cs` Python package), its faults, and the Nodes it registers on the
//! real control plane.

mod emulator {
    pub mod api;
    pub mod bin;
    pub mod cs_client;
    pub mod faults;
    pub mod http;
    pub mod nodes;
}
