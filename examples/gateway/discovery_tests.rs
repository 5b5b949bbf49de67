//! Discovery over real TCP: `/.well-known/x402`, `/openapi.json` and every
//! 402's `bazaar`, all from the route table and the catalogue; each bazaar
//! `info` checked against its own schema by a JSON Schema validator.

use std::sync::Arc;

use http::StatusCode;
use serde_json::{Value, json};
use walletgate::x402::wire::UsdAmount;

use crate::catalogue::{Catalogue, Model, Pricing};
use crate::config::Config;
use crate::request::{ChatRequest, Endpoint};
use crate::routes::{Kind, ROUTES};
use crate::tests::{Reply, Server};

/// Largest total of a 402's header lines (name, `: `, value, CRLF): nginx's
/// default large header buffers are 8 KB.
const HEADER_BUDGET: usize = 8 * 1024;
/// The same 402 with its MPP `Payment` challenge (`GATEWAY_MPP=on`, the
/// default): about 460 bytes more, which a proxy's response-header buffer
/// must allow (docs/operations.md).
const HEADER_BUDGET_WITH_MPP: usize = 9 * 1024;

fn validate(schema: &Value, instance: &Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema).map_err(|error| error.to_string())?;
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|error| format!("{} at {}", error, error.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// The bytes of the 402's header block: x402's (the MPP challenge left
/// out), and all of it.
fn header_bytes(reply: &Reply) -> (usize, usize) {
    let size = |(name, value): (&http::HeaderName, &http::HeaderValue)| {
        name.as_str().len() + 2 + value.len() + 2
    };
    let all = reply.headers.iter().map(size).sum();
    let x402 = reply
        .headers
        .iter()
        .filter(|(_, value)| !value.as_bytes().starts_with(b"Payment "))
        .map(size)
        .sum();
    (x402, all)
}

/// The bazaar of a 402: as `PAYMENT-REQUIRED` declares it (the body does not
/// repeat the extensions), its `info` valid against its `schema`.
fn checked_bazaar(reply: &Reply, what: &str) -> Value {
    assert_eq!(
        reply.status,
        StatusCode::PAYMENT_REQUIRED,
        "{what}: {}",
        reply.text()
    );
    let quote = reply.quote();
    let extensions = quote
        .extensions
        .unwrap_or_else(|| panic!("{what}: no extensions"));
    let bazaar = extensions["bazaar"].clone();
    assert!(reply.json().get("extensions").is_none(), "{what}");
    validate(&bazaar["schema"], &bazaar["info"]).unwrap_or_else(|error| panic!("{what}: {error}"));
    assert_eq!(
        bazaar["schema"]["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    let (x402, all) = header_bytes(reply);
    assert!(x402 <= HEADER_BUDGET, "{what}: {x402} header bytes");
    assert!(
        all <= HEADER_BUDGET_WITH_MPP,
        "{what}: {all} header bytes with MPP"
    );
    bazaar
}

fn new_model() -> Model {
    Model {
        id: "acme/discovered-1",
        name: "Discovered One",
        description: "Added in code by the discovery test",
        context_window: 64_000,
        max_output: 4_000,
        categories: &["chat"],
        pricing: Pricing::PerToken {
            input_micros_per_million: 7_000_000,
            output_micros_per_million: 21_000_000,
        },
        streaming: true,
        created: 0,
    }
}

#[tokio::test]
async fn a_model_added_in_code_is_discovered_with_its_price_everywhere() {
    let mut models = Catalogue::embedded_models();
    models.push(Arc::new(new_model()));
    let config = Config {
        catalogue: Catalogue::new(models),
        ..Config::default()
    };
    let server = Server::start(config).await;
    let model = new_model();
    // The specification's flat fee, 0.001 USD, as the document advertises below.
    let fee = UsdAmount::from_micros(1_000);

    let well_known = server.get("/.well-known/x402").await;
    assert_eq!(well_known.status, StatusCode::OK);
    let document = well_known.json();
    let chat = document["services"]
        .as_array()
        .unwrap()
        .iter()
        .find(|service| service["endpoint"] == "/v1/chat/completions")
        .unwrap();
    assert!(chat["models"].as_array().unwrap().iter().any(|listed| {
        listed["id"] == model.id
            && listed["contextWindow"] == 64_000
            && listed["provider"] == "acme"
    }));
    assert_eq!(
        chat["pricing"][model.id],
        json!({"inputPerMillionTokens": "7", "outputPerMillionTokens": "21", "flatFeePerRequest": "0.001"})
    );
    assert_eq!(document["payment"]["chainId"], 84532);
    assert_eq!(document["payment"]["token"], "USDC");

    let openapi = server.get("/openapi.json").await.json();
    let example = Endpoint::Chat.example_body(model.id);
    let expected = model
        .price(&ChatRequest::from_json(Endpoint::Chat, example.clone()).unwrap())
        .total(fee)
        .unwrap();
    for path in ["/v1/chat/completions", "/api/v1/chat/completions"] {
        let info = &openapi["paths"][path]["post"]["x-payment-info"];
        assert_eq!(
            info["price"][model.id],
            json!({"amount": expected.to_string(), "currency": "USDC"}),
            "{path}"
        );
        assert_eq!(info["scheme"], "exact");
        assert_eq!(info["network"], "eip155:84532");
    }
    let schema = &openapi["components"]["schemas"]["ChatCompletionsRequest"];
    assert!(
        schema["properties"]["model"]["enum"]
            .as_array()
            .unwrap()
            .contains(&json!(model.id))
    );

    // The 402 for the example request: the bazaar names the model, the
    // offer charges the very price the OpenAPI document lists.
    let quote = server
        .post_once("/v1/chat/completions", example.to_string(), None)
        .await;
    let bazaar = checked_bazaar(&quote, model.id);
    assert_eq!(bazaar["info"]["input"]["body"]["model"], model.id);
    assert_eq!(
        UsdAmount::from_micros(quote.quote().accepts[0].amount.units()),
        expected
    );
}

#[tokio::test]
async fn every_402_declares_a_valid_bazaar_within_the_header_budget() {
    let server = Server::start(Config::default()).await;
    let catalogue = Catalogue::embedded();
    let mut checked = 0;
    for route in ROUTES.iter().filter(|route| route.is_paid()) {
        for model in route.models(&catalogue) {
            if model.is_free() || route.kind == Kind::ImagePoll {
                continue;
            }
            let body = route.example_body(model).unwrap();
            for path in route.paths() {
                let what = format!("{} {path} {}", route.method, model.id);
                let reply = server.post_once(&path, body.to_string(), None).await;
                let bazaar = checked_bazaar(&reply, &what);
                assert_eq!(bazaar["info"]["input"]["method"], "POST", "{what}");
                assert_eq!(bazaar["info"]["input"]["bodyType"], "json", "{what}");
                assert_eq!(bazaar["info"]["input"]["body"], body, "{what}");
                assert_eq!(bazaar["info"]["output"]["type"], "json", "{what}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 2 * (3 * 6 + 2), "{checked}");

    // A poll without the paying signature is quoted as its job, and
    // declares the GET route with its template.
    let job = server
        .post(
            "/v1/images/generations",
            &json!({"model": "openai/dall-e-3", "prompt": "a lighthouse"}),
        )
        .await;
    assert_eq!(job.status, StatusCode::ACCEPTED, "{}", job.text());
    let poll_url = job.json()["poll_url"].as_str().unwrap().to_owned();
    let poll = server.get(&poll_url).await;
    let bazaar = checked_bazaar(&poll, &poll_url);
    assert_eq!(bazaar["info"]["input"]["method"], "GET");
    assert_eq!(bazaar["routeTemplate"], "/v1/images/generations/:id");
}

#[tokio::test]
async fn gateway_bazaar_off_declares_no_extension() {
    let config =
        Config::from_vars(|name| (name == "GATEWAY_BAZAAR").then(|| "off".to_owned())).unwrap();
    assert!(!config.bazaar);
    let server = Server::start(config).await;
    let body = Endpoint::Chat.example_body("openai/gpt-5-mini");
    let reply = server
        .post_once("/v1/chat/completions", body.to_string(), None)
        .await;
    assert_eq!(reply.status, StatusCode::PAYMENT_REQUIRED);
    // Other extensions (the payment identifier) stay; discovery is gone.
    let declared = reply.quote().extensions.unwrap_or_default();
    assert!(!declared.contains_key("bazaar"), "{declared:?}");
    // The documents stay.
    assert_eq!(server.get("/.well-known/x402").await.status, StatusCode::OK);
    assert!(
        Config::from_vars(|name| (name == "GATEWAY_BAZAAR").then(|| "maybe".to_owned())).is_err()
    );
}

#[tokio::test]
async fn the_openapi_document_describes_every_route_and_its_answers() {
    let server = Server::start(Config::default()).await;
    let reply = server.get("/openapi.json").await;
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let document = reply.json();
    assert_eq!(document["openapi"], "3.1.0");
    let schemas = &document["components"]["schemas"];
    for route in ROUTES {
        for path in route.paths() {
            let operation = &document["paths"][&path][route.method.as_str().to_ascii_lowercase()];
            assert_eq!(operation["operationId"], route.id, "{path}");
            assert_eq!(
                operation.get("x-payment-info").is_some(),
                route.is_paid(),
                "{path}"
            );
            if route.is_paid() {
                assert_eq!(
                    operation["responses"]["402"]["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/PaymentRequired"
                );
            }
            // Each answer example follows its schema.
            for (status, response) in operation["responses"].as_object().unwrap() {
                let content = &response["content"]["application/json"];
                let (Some(example), Some(reference)) =
                    (content.get("example"), content["schema"]["$ref"].as_str())
                else {
                    continue;
                };
                let name = reference.rsplit('/').next().unwrap();
                validate(&schemas[name], example)
                    .unwrap_or_else(|error| panic!("{path} {status}: {error}"));
            }
        }
    }
    // A real 402 body follows the documented schema.
    let body = Endpoint::Messages.example_body("xai/grok-code-fast");
    let quote = server
        .post_once("/v1/messages", body.to_string(), None)
        .await;
    validate(&schemas["PaymentRequired"], &quote.json()).unwrap();
    // The document describes itself.
    validate(&schemas["OpenApi"], &document).unwrap();
}

#[test]
fn each_body_schema_agrees_with_its_validator_on_examples() {
    let catalogue = Catalogue::embedded();
    for route in ROUTES {
        let Some(schema) = route.body_schema(&catalogue) else {
            continue;
        };
        for model in route.models(&catalogue) {
            let body = route.example_body(model).unwrap();
            validate(&schema, &body).unwrap_or_else(|error| panic!("{}: {error}", route.id));
            if let Kind::Inference(endpoint) = route.kind {
                assert!(ChatRequest::from_json(endpoint, body.clone()).is_ok());
            }
            // Without a model neither accepts it; with an unknown one the schema refuses.
            let mut without = body.clone();
            without.as_object_mut().unwrap().remove("model");
            assert!(validate(&schema, &without).is_err());
            if let Kind::Inference(endpoint) = route.kind {
                assert!(ChatRequest::from_json(endpoint, without).is_err());
            }
            let mut unknown = body;
            unknown["model"] = json!("nobody/nothing");
            assert!(validate(&schema, &unknown).is_err());
        }
    }
}

/// Bodies one field away from `route`'s example that its validator refuses.
fn refused_variants(kind: Kind, example: &Value) -> Vec<(&'static str, Value)> {
    let with = |field: &str, value: Value| {
        let mut body = example.clone();
        body[field] = value;
        body
    };
    let mut variants = vec![
        ("model not a string", with("model", json!(7))),
        ("unknown model", with("model", json!("nobody/nothing"))),
    ];
    match kind {
        Kind::Inference(endpoint) => {
            let (list, count) = match endpoint {
                Endpoint::Chat => ("messages", "max_tokens"),
                Endpoint::Messages => ("messages", "max_tokens"),
                Endpoint::Responses => ("input", "max_output_tokens"),
            };
            variants.push(("stream not a boolean", with("stream", json!("yes"))));
            variants.push(("zero tokens", with(count, json!(0))));
            variants.push(("conversation not a list", with(list, json!(5))));
            if endpoint != Endpoint::Responses {
                variants.push((
                    "unknown role",
                    with(list, json!([{"role": "robot", "content": "hi"}])),
                ));
            }
        }
        Kind::ImageJob => {
            variants.push(("empty prompt", with("prompt", json!(""))));
            variants.push(("too many images", with("n", json!(5))));
            variants.push(("bad size", with("size", json!("large"))));
        }
        _ => {}
    }
    variants
}

#[tokio::test]
async fn what_a_body_schema_refuses_the_server_refuses_too() {
    let server = Server::start(Config::default()).await;
    let catalogue = Catalogue::embedded();
    for route in ROUTES {
        let Some(schema) = route.body_schema(&catalogue) else {
            continue;
        };
        let model = route
            .models(&catalogue)
            .into_iter()
            .find(|model| !model.is_free())
            .unwrap();
        let example = route.example_body(model).unwrap();
        validate(&schema, &example).unwrap();
        let quoted = server
            .post_once(route.path, example.to_string(), None)
            .await;
        assert_eq!(quoted.status, StatusCode::PAYMENT_REQUIRED, "{}", route.id);
        for (why, body) in refused_variants(route.kind, &example) {
            assert!(
                validate(&schema, &body).is_err(),
                "{} {why}: schema accepts",
                route.id
            );
            let reply = server.post_once(route.path, body.to_string(), None).await;
            assert!(
                reply.status == StatusCode::BAD_REQUEST || reply.status == StatusCode::NOT_FOUND,
                "{} {why}: {} {}",
                route.id,
                reply.status,
                reply.text()
            );
        }
    }
}

#[tokio::test]
async fn paid_answers_follow_the_documented_answer_schemas() {
    let server = Server::start(Config::default()).await;
    let catalogue = Catalogue::embedded();
    let openapi = server.get("/openapi.json").await.json();
    let schemas = &openapi["components"]["schemas"];
    for route in ROUTES
        .iter()
        .filter(|route| route.method == http::Method::POST)
    {
        let responses = &openapi["paths"][route.path]["post"]["responses"];
        for model in route.models(&catalogue) {
            let body = route.example_body(model).unwrap();
            let reply = server.post(route.path, &body).await;
            let status = reply.status.as_u16().to_string();
            let reference = responses[&status]["content"]["application/json"]["schema"]["$ref"]
                .as_str()
                .unwrap_or_else(|| panic!("{} {}: undocumented {status}", route.id, model.id));
            let name = reference.rsplit('/').next().unwrap();
            validate(&schemas[name], &reply.json())
                .unwrap_or_else(|error| panic!("{} {}: {error}", route.id, model.id));
        }
    }
}
