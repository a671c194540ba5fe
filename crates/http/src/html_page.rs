//! The small HTML page at `BASE/`: the feeds the visitor may read and, for a chosen view,
//! its newest items, kept up to date through the view's event stream. Static: no build
//! step, no framework.

use axum::http::header;
use axum::response::IntoResponse;

const PAGE: &str = include_str!("page.html");

pub async fn index() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")], PAGE)
}
