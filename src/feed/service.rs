//! The service (placeholder).
