//! The OpenAPI 3.1 description of the HTTP face, served at `BASE/openapi.json`. It is
//! generated (utoipa) from the handlers' own annotations and from the very types they
//! answer with ([`crate::schemas`]), so it describes what the code does.

use crate::schemas::{
    AuthorJson, ErrorJson, FeedLink, FeedList, Health, HubForm, HubMode, ItemJson, JsonFeed, JsonFeedAuthor,
    JsonFeedExtension, JsonFeedHub, JsonFeedItem, JsonFeedItemExtension, PageJson, Published,
};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::server::Server;
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "smartfeeds HTTP API",
        description = "Smart Feeds over HTTP: pages of views by stable cursors, long-polls, event streams, \
            RFC 5005 archives, JSON Feed, publishing, and a WebSub hub. Views are a feed's items in one order, \
            optionally filtered by author or category; every item has a T+O+C cursor.",
        license(name = "MIT")
    ),
    paths(
        crate::router::health,
        crate::pull::list,
        crate::pull::feed,
        crate::pull::item,
        crate::writes::put,
        crate::writes::post,
        crate::writes::delete,
        crate::archive::recent,
        crate::archive::numbered,
        crate::hub::request::post,
        openapi_json,
    ),
    components(schemas(
        PageJson, ItemJson, AuthorJson, FeedList, FeedLink, Published, ErrorJson, Health, JsonFeed, JsonFeedHub,
        JsonFeedExtension, JsonFeedItem, JsonFeedAuthor, JsonFeedItemExtension, HubForm, HubMode
    )),
    modifiers(&Bearer),
    tags(
        (name = "pull", description = "Reading views: pages, long-polls, event streams"),
        (name = "archives", description = "RFC 5005 archive documents"),
        (name = "publish", description = "Publishing, updating and retracting items (a publisher's token)"),
        (name = "websub", description = "The WebSub hub"),
        (name = "service", description = "Health and this description"),
    )
)]
pub struct ApiDoc;

/// The bearer tokens of `[[http.tokens]]`.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        let components = api.components.get_or_insert_with(Default::default);
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some("A token of [[http.tokens]]: the request acts as its JID"))
            .build();
        components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// The description, with `base` (the public prefix) as its server.
pub fn document(base: &str) -> utoipa::openapi::OpenApi {
    let mut api = ApiDoc::openapi();
    api.servers = Some(vec![Server::new(base)]);
    api
}

/// `GET BASE/openapi.json`.
#[utoipa::path(get, path = "/openapi.json", operation_id = "openapi", tag = "service", summary = "This description (OpenAPI 3.1)",
    responses((status = 200, description = "The description", content_type = "application/json")))]
pub async fn openapi_json(base: String) -> Response {
    let body = document(&base).to_json().unwrap_or_default();
    let mut res = body.into_response();
    res.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_names_every_route_and_its_answers() {
        let api = serde_json::to_value(document("http://h:1")).unwrap();
        assert!(api["openapi"].as_str().unwrap().starts_with("3.1"));
        assert_eq!(api["servers"][0]["url"], "http://h:1");
        for path in [
            "/health",
            "/feeds/",
            "/feeds/{feed}/",
            "/feeds/{feed}/items/{id}",
            "/feeds/{feed}/archive/",
            "/feeds/{feed}/archive/{k}",
            "/hub",
            "/openapi.json",
        ] {
            assert!(api["paths"].get(path).is_some(), "{path} is described");
        }
        let page = &api["paths"]["/feeds/{feed}/"]["get"]["responses"]["200"]["content"];
        assert_eq!(page["application/json"]["schema"]["$ref"], "#/components/schemas/PageJson");
        assert!(api["components"]["schemas"]["ItemJson"]["properties"].get("cursor").is_some());
        assert!(api["components"]["securitySchemes"].get("bearer").is_some());
    }
}
