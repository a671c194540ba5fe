//! Paging (placeholder).
