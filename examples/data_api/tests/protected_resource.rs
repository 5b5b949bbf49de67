//! RFC 9728: the metadata documents, and the `resource_metadata` every
//! bearer 401 and scope 403 names (never an API key's 401).

use super::mcp::{INITIALIZE, PAST_EXPIRY};
use super::*;

/// The scopes the OpenAPI document's security requirements list.
fn openapi_scopes(document: &Value) -> Vec<String> {
    let mut scopes: Vec<String> = document["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|item| item.as_object().unwrap().values())
        .flat_map(|operation| {
            operation["security"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|requirement| requirement.get("WalletAuth").cloned())
        .flat_map(|scopes| scopes.as_array().cloned().unwrap_or_default())
        .map(|scope| scope.as_str().unwrap().to_owned())
        .collect();
    scopes.sort();
    scopes.dedup();
    scopes
}

fn challenge(reply: &Reply) -> &str {
    reply.headers[header::WWW_AUTHENTICATE].to_str().unwrap()
}

#[tokio::test]
async fn the_metadata_documents_are_public_and_list_the_openapi_scopes() {
    let server = start().await;
    let openapi = server
        .call(Method::GET, "/api/v2/openapi.json", &[], None)
        .await;
    let scopes = openapi_scopes(&openapi.body);
    assert!(scopes.contains(&"read:favorites".to_owned()), "{scopes:?}");
    for (path, resource) in [
        ("/.well-known/oauth-protected-resource", server.base.clone()),
        (
            "/.well-known/oauth-protected-resource/mcp",
            format!("{}/mcp", server.base),
        ),
    ] {
        // No API key, no token.
        let reply = server.call(Method::GET, path, &[], None).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert_eq!(reply.headers[header::CONTENT_TYPE], "application/json");
        let document = &reply.body;
        assert_eq!(document["resource"], resource, "{path}");
        assert_eq!(document["bearer_methods_supported"], json!(["header"]));
        assert_eq!(document["scopes_supported"], json!(scopes), "{path}");
        assert!(document.get("authorization_servers").is_none());
        // The document follows the schema the OpenAPI document gives it.
        let operation = &openapi.body["paths"][path]["get"];
        assert_eq!(
            operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ProtectedResourceMetadata"
        );
        assert_eq!(operation["security"], json!([]));
    }
}

#[tokio::test]
async fn bearer_401s_and_scope_403s_name_the_metadata_and_a_missing_key_does_not() {
    let server = start().await;
    let api = format!(
        "resource_metadata=\"{}/.well-known/oauth-protected-resource\"",
        server.base
    );
    let favorites = favorites_path(DEV_WALLET_0);

    // Missing, malformed and expired bearers on a wallet-scoped route.
    let missing = server.keyed(Method::GET, &favorites, &[], None).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        challenge(&missing),
        format!("Bearer error=\"invalid_token\", {api}")
    );
    let malformed = server
        .with_bearer(Method::GET, &favorites, "Bearer not.a.jwt")
        .await;
    assert_eq!(malformed.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        challenge(&malformed),
        format!("Bearer error=\"invalid_token\", {api}")
    );
    let (_, _, jwt) = server
        .wallet_jwt(DEV_KEY_0, DEV_WALLET_0, &["read:wallets"])
        .await;
    let auth = bearer(&jwt);
    // Too little scope: 403 with the scope and the metadata.
    let forbidden = server.with_bearer(Method::GET, &favorites, &auth).await;
    assert_eq!(forbidden.status, StatusCode::FORBIDDEN);
    assert_eq!(
        challenge(&forbidden),
        format!("Bearer error=\"insufficient_scope\", scope=\"read:favorites\", {api}")
    );
    server.clock.advance(PAST_EXPIRY);
    let expired = server.with_bearer(Method::GET, &favorites, &auth).await;
    assert_eq!(expired.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        challenge(&expired),
        format!("Bearer error=\"invalid_token\", {api}")
    );

    // A missing API key is not a bearer problem: no metadata.
    let no_key = server.call(Method::GET, &favorites, &[], None).await;
    assert_eq!(no_key.status, StatusCode::UNAUTHORIZED);
    assert!(!challenge(&no_key).contains("resource_metadata"));
    let no_key_mcp = server.mcp(&[], INITIALIZE).await;
    assert_eq!(no_key_mcp.status, StatusCode::UNAUTHORIZED);
    assert!(
        no_key_mcp
            .headers
            .get(header::WWW_AUTHENTICATE)
            .is_none_or(|value| !value.to_str().unwrap().contains("resource_metadata"))
    );

    // The MCP endpoint names its own document.
    let keyed = [
        ("x-api-key", API_KEY),
        ("authorization", "Bearer not.a.jwt"),
    ];
    let mcp = server.mcp(&keyed, INITIALIZE).await;
    assert_eq!(mcp.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        mcp.headers[header::WWW_AUTHENTICATE],
        format!(
            "Bearer error=\"invalid_token\", resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
            server.base
        )
        .as_str()
    );
}
