//! Conversions from Kubernetes objects (placeholder).
