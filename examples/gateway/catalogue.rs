//! The model catalogue: which models exist, who serves them and what a request costs.
//!
//! Prices are kept in micro-dollars (millionths of a USD) and per-token prices
//! per million tokens, so every price is an exact integer computation: the
//! quote and the paid retry of the same request always agree.

use std::sync::Arc;

use serde_json::{Value, json};
use walletgate::x402::{server::Price, wire::UsdAmount};

use crate::request::ChatRequest;

/// Output tokens priced when a request names no `max_tokens`.
pub(crate) const DEFAULT_MAX_TOKENS: u64 = 1_024;

/// How a model is billed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pricing {
    /// Per token, in micro-dollars per million tokens (= USD per token).
    PerToken {
        input_micros_per_million: u64,
        output_micros_per_million: u64,
    },
    /// One price per request, in micro-dollars, flat fee included: the
    /// listed price is what the client signs, whatever fee the server sets.
    Flat { micros: u64 },
    /// Image models: micro-dollars per generated image; the flat fee comes on top.
    PerImage { micros: u64 },
    /// No payment; limited per client IP instead.
    Free,
}

impl Pricing {
    /// The listing's `billing_mode`; also the model's `tier`: models of one
    /// tier (`paid` per token, `flat`, `per_image`, `free`) are billed alike,
    /// and a client fails over between them (`same_tier_alternatives`).
    pub(crate) fn billing_mode(self) -> &'static str {
        match self {
            Self::PerToken { .. } => "paid",
            Self::Flat { .. } => "flat",
            Self::PerImage { .. } => "per_image",
            Self::Free => "free",
        }
    }

    /// The listing's `pricing` object, in USD.
    fn listing(self) -> Value {
        match self {
            Self::PerToken {
                input_micros_per_million,
                output_micros_per_million,
            } => json!({
                "input": usd(input_micros_per_million),
                "output": usd(output_micros_per_million),
            }),
            Self::Flat { micros } => json!({ "flat": usd(micros) }),
            Self::PerImage { micros } => json!({ "per_image": usd(micros) }),
            Self::Free => json!({ "input": 0, "output": 0 }),
        }
    }
}

/// Micro-dollars as a JSON number of dollars, for display only: prices are
/// computed in integers, never from this value.
fn usd(micros: u64) -> Value {
    // Every listed price is a few dollars at most: exact in an f64.
    json!(micros as f64 / 1e6)
}

/// What `prompt` and `completion` tokens cost at `(input, output)` micro-dollars
/// per million tokens, rounded up to a whole micro-dollar: the one formula of
/// a per-token quote (its ceiling) and of a metered answer.
fn token_cost(rates: (u64, u64), prompt: u64, completion: u64) -> UsdAmount {
    let scaled =
        u128::from(prompt) * u128::from(rates.0) + u128::from(completion) * u128::from(rates.1);
    UsdAmount::from_micros(scaled.div_ceil(1_000_000))
}

/// A USD price of `micros` millionths of a dollar, before the flat fee.
pub(crate) fn micro_usd(micros: u64) -> Price {
    Price::Usd(UsdAmount::from_micros(u128::from(micros)))
}

/// One model of the catalogue.
#[derive(Clone, Debug)]
pub(crate) struct Model {
    /// `<provider>/<model_name>`.
    pub(crate) id: &'static str,
    pub(crate) name: &'static str,
    pub(crate) description: &'static str,
    pub(crate) context_window: u64,
    pub(crate) max_output: u64,
    pub(crate) categories: &'static [&'static str],
    pub(crate) pricing: Pricing,
    /// Whether the model serves `stream: true`.
    pub(crate) streaming: bool,
    /// When the model was added, Unix seconds.
    pub(crate) created: u64,
}

impl Model {
    /// The provider part of the id; also the model family named in `RATE_LIMITED`.
    pub(crate) fn provider(&self) -> &'static str {
        self.id
            .split_once('/')
            .map_or(self.id, |(provider, _)| provider)
    }

    /// The model's name at its provider (the id without the provider).
    pub(crate) fn upstream_name(&self) -> &'static str {
        self.id.split_once('/').map_or(self.id, |(_, name)| name)
    }

    pub(crate) fn is_free(&self) -> bool {
        self.pricing == Pricing::Free
    }

    /// Whether the model makes images (`/v1/images/generations`), not chat.
    pub(crate) fn is_image(&self) -> bool {
        self.categories.contains(&"image")
    }

    /// The price of `count` images, before the flat fee; `None` for a chat model.
    pub(crate) fn image_price(&self, count: u64) -> Option<Price> {
        match self.pricing {
            Pricing::PerImage { micros } => Some(micro_usd(micros.saturating_mul(count))),
            _ => None,
        }
    }

    /// The price of `request` on this model; the payment layer adds its
    /// flat fee where the price excludes it.
    ///
    /// Per-token models, before the fee: estimated prompt tokens times the
    /// input price plus the request's `max_tokens` (default
    /// [`DEFAULT_MAX_TOKENS`], capped at the model's `max_output`) times the
    /// output price, rounded up to a whole micro-dollar. Flat models: the
    /// listed price, fee included ([`Price::UsdAllIn`]). Depends only on the
    /// request, never on time.
    pub(crate) fn price(&self, request: &ChatRequest) -> Price {
        match self.pricing {
            Pricing::Free => Price::Free,
            Pricing::Flat { micros } => Price::UsdAllIn(UsdAmount::from_micros(u128::from(micros))),
            // Image models never reach chat; priced as one image should they.
            Pricing::PerImage { micros } => micro_usd(micros),
            Pricing::PerToken {
                input_micros_per_million,
                output_micros_per_million,
            } => {
                let output_tokens = request
                    .max_tokens
                    .unwrap_or(DEFAULT_MAX_TOKENS)
                    .min(self.max_output);
                Price::Usd(token_cost(
                    (input_micros_per_million, output_micros_per_million),
                    request.estimated_prompt_tokens(),
                    output_tokens,
                ))
            }
        }
    }

    /// What an answer that used `prompt_tokens` and `completion_tokens` costs on this per-token model, before
    /// the flat fee, rounded up to a whole micro-dollar; `None` for a model
    /// not priced by the token.
    pub(crate) fn metered_price(
        &self,
        prompt_tokens: u64,
        completion_tokens: u64,
    ) -> Option<UsdAmount> {
        let Pricing::PerToken {
            input_micros_per_million,
            output_micros_per_million,
        } = self.pricing
        else {
            return None;
        };
        Some(token_cost(
            (input_micros_per_million, output_micros_per_million),
            prompt_tokens,
            completion_tokens,
        ))
    }

    /// What a metered answer's receipt says it was for (`extensions.usage`;
    /// the payment layer adds the fee and the amount): the model, its tokens
    /// and unit prices, in USD per million tokens.
    pub(crate) fn usage_statement(
        &self,
        prompt_tokens: u64,
        completion_tokens: u64,
    ) -> Option<serde_json::Map<String, Value>> {
        let Pricing::PerToken {
            input_micros_per_million,
            output_micros_per_million,
        } = self.pricing
        else {
            return None;
        };
        let Value::Object(statement) = json!({
            "model": self.id,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            // Decimal text, exact (a signed statement's verifier redoes the sum).
            "input_usd_per_million": UsdAmount::from_micros(u128::from(input_micros_per_million)).to_string(),
            "output_usd_per_million": UsdAmount::from_micros(u128::from(output_micros_per_million)).to_string(),
        }) else {
            return None;
        };
        Some(statement)
    }

    /// The model's `GET /v1/models` row.
    fn listing(&self) -> Value {
        json!({
            "id": self.id,
            "object": "model",
            "created": self.created,
            "owned_by": self.provider(),
            "name": self.name,
            "description": self.description,
            "context_window": self.context_window,
            "max_output": self.max_output,
            "categories": self.categories,
            "billing_mode": self.pricing.billing_mode(),
            "tier": self.pricing.billing_mode(),
            "pricing": self.pricing.listing(),
        })
    }
}

/// The models the gateway serves.
#[derive(Clone, Debug)]
pub(crate) struct Catalogue {
    models: Vec<Arc<Model>>,
}

const fn per_token(input_micros_per_million: u64, output_micros_per_million: u64) -> Pricing {
    Pricing::PerToken {
        input_micros_per_million,
        output_micros_per_million,
    }
}

/// 2025-01-01T00:00:00Z: listing dates are fixed so the listing is deterministic.
const ADDED: u64 = 1_735_689_600;

impl Catalogue {
    /// The embedded catalogue: paid, flat and free models from at least two
    /// providers each, all answered by the embedded echo upstream unless a
    /// provider's HTTP upstream is configured.
    pub(crate) fn embedded() -> Self {
        Self::new(Self::embedded_models())
    }

    /// The models of [`embedded`](Self::embedded), to extend.
    pub(crate) fn embedded_models() -> Vec<Arc<Model>> {
        let model =
            |id, name, description, context_window, max_output, categories, pricing, streaming| {
                Arc::new(Model {
                    id,
                    name,
                    description,
                    context_window,
                    max_output,
                    categories,
                    pricing,
                    streaming,
                    created: ADDED,
                })
            };
        vec![
            model(
                "openai/gpt-5-mini",
                "GPT-5 mini",
                "Fast general model",
                400_000,
                128_000,
                &["chat", "vision"],
                per_token(250_000, 2_000_000),
                true,
            ),
            model(
                "anthropic/claude-sonnet-4.6",
                "Claude Sonnet 4.6",
                "Balanced reasoning and code",
                200_000,
                64_000,
                &["chat", "code", "vision"],
                per_token(3_000_000, 15_000_000),
                true,
            ),
            model(
                "google/gemini-2.5-flash",
                "Gemini 2.5 Flash",
                "Long-context multimodal model",
                1_048_576,
                65_536,
                &["chat", "vision"],
                per_token(300_000, 2_500_000),
                true,
            ),
            model(
                "deepseek/deepseek-reasoner",
                "DeepSeek Reasoner",
                "Reasoning model; answers whole, never streamed",
                128_000,
                32_000,
                &["chat", "reasoning"],
                per_token(550_000, 2_190_000),
                false,
            ),
            model(
                "xai/grok-code-fast",
                "Grok Code Fast",
                "Code model at one price per request",
                256_000,
                16_000,
                &["chat", "code"],
                Pricing::Flat { micros: 2_000 },
                true,
            ),
            model(
                "perplexity/sonar",
                "Sonar",
                "Search-grounded answers at one price per request; never streamed",
                128_000,
                8_000,
                &["chat", "search"],
                Pricing::Flat { micros: 5_000 },
                false,
            ),
            model(
                "nvidia/nemotron-super",
                "Nemotron Super",
                "Free general model",
                128_000,
                8_192,
                &["chat"],
                Pricing::Free,
                true,
            ),
            model(
                "meta/llama-4-scout",
                "Llama 4 Scout",
                "Free model; never streamed",
                128_000,
                8_192,
                &["chat"],
                Pricing::Free,
                false,
            ),
            model(
                "qwen/qwen3-coder",
                "Qwen3 Coder",
                "Free code model",
                256_000,
                16_384,
                &["chat", "code"],
                Pricing::Free,
                true,
            ),
            model(
                "openai/dall-e-3",
                "DALL-E 3",
                "Image generation; slow jobs answer 202 and are polled",
                4_000,
                1,
                &["image"],
                Pricing::PerImage { micros: 40_000 },
                false,
            ),
            model(
                "google/nano-banana",
                "Nano Banana",
                "Image generation and editing",
                32_768,
                1,
                &["image"],
                Pricing::PerImage { micros: 39_000 },
                false,
            ),
        ]
    }

    pub(crate) fn new(models: Vec<Arc<Model>>) -> Self {
        Self { models }
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Arc<Model>> {
        self.models.iter().find(|model| model.id == id)
    }

    /// A chat model (`/v1/chat/completions`, `/v1/messages`, `/v1/responses`).
    pub(crate) fn chat_model(&self, id: &str) -> Option<&Arc<Model>> {
        self.get(id).filter(|model| !model.is_image())
    }

    /// An image model (`/v1/images/generations`).
    pub(crate) fn image_model(&self, id: &str) -> Option<&Arc<Model>> {
        self.get(id).filter(|model| model.is_image())
    }

    /// Every model, in catalogue order.
    pub(crate) fn models(&self) -> &[Arc<Model>] {
        &self.models
    }

    /// Up to three ids close to `requested` by edit distance, best first;
    /// a bare model name matches its `<provider>/<name>` id. Only models of
    /// the same kind (image or chat) as `image` says are suggested.
    pub(crate) fn close_matches(&self, requested: &str, image: bool) -> Vec<&'static str> {
        let wanted = requested.trim().to_ascii_lowercase();
        let wanted_name = wanted.rsplit('/').next().unwrap_or(&wanted);
        let mut scored: Vec<(usize, &'static str)> = self
            .models
            .iter()
            .filter(|model| model.is_image() == image)
            .map(|model| {
                let whole = edit_distance(&wanted, &model.id.to_ascii_lowercase());
                let name = edit_distance(wanted_name, &model.upstream_name().to_ascii_lowercase());
                (whole.min(name), model.id)
            })
            .filter(|(distance, _)| *distance <= (wanted_name.chars().count() / 3).max(2))
            .collect();
        scored.sort();
        scored.into_iter().take(3).map(|(_, id)| id).collect()
    }

    /// Ids of models in `model`'s tier (billing mode) from other providers:
    /// where a client fails over to when `model` is limited or unavailable.
    pub(crate) fn same_tier_alternatives(&self, model: &Model) -> Vec<&'static str> {
        let tier = model.pricing.billing_mode();
        self.models
            .iter()
            .filter(|other| {
                other.pricing.billing_mode() == tier && other.provider() != model.provider()
            })
            .map(|other| other.id)
            .collect()
    }

    /// The `GET /v1/models` body.
    pub(crate) fn listing(&self) -> Value {
        let data: Vec<Value> = self.models.iter().map(|model| model.listing()).collect();
        json!({ "object": "list", "data": data })
    }
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        current[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{ChatRequest, Endpoint};

    fn request(model: &str, text: &str, max_tokens: Option<u64>) -> ChatRequest {
        ChatRequest {
            endpoint: Endpoint::Chat,
            model: model.to_owned(),
            messages: vec![json!({"role": "user", "content": text})],
            stream: false,
            max_tokens,
            passthrough: serde_json::Map::new(),
        }
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }

    #[test]
    fn per_token_price_is_exact_and_rounds_up() {
        let catalogue = Catalogue::embedded();
        let model = catalogue.get("anthropic/claude-sonnet-4.6").unwrap();
        // 40 characters = 10 prompt tokens at $3/M plus 100 output tokens at
        // $15/M: 30 + 1500 micro-dollars.
        let text = "a".repeat(40);
        assert_eq!(
            model.price(&request(model.id, &text, Some(100))),
            micro_usd(1_530)
        );
        // One prompt token at $0.25/M is a quarter micro-dollar: rounded up to 1.
        let cheap = catalogue.get("openai/gpt-5-mini").unwrap();
        assert_eq!(
            cheap.price(&request(cheap.id, "abcd", Some(0))),
            micro_usd(1)
        );
        // No max_tokens: the default is priced.
        assert_eq!(
            model.price(&request(model.id, "", None)),
            micro_usd(DEFAULT_MAX_TOKENS * 15)
        );
    }

    #[test]
    fn price_caps_max_tokens_at_the_model_limit() {
        let catalogue = Catalogue::embedded();
        let model = catalogue.get("openai/gpt-5-mini").unwrap();
        let capped = model.price(&request(model.id, "", Some(model.max_output)));
        assert_eq!(model.price(&request(model.id, "", Some(u64::MAX))), capped);
        assert_eq!(capped, micro_usd(256_000));
    }

    #[test]
    fn flat_and_free_prices() {
        let catalogue = Catalogue::embedded();
        let flat = catalogue.get("perplexity/sonar").unwrap();
        let price = flat.price(&request(flat.id, "long text", Some(5)));
        // The listed 0.005 USD is the signed total, whatever the configured fee.
        for fee_micros in [0, 1_000, 5_000] {
            assert_eq!(
                price.total(UsdAmount::from_micros(fee_micros)),
                Some(UsdAmount::from_micros(5_000))
            );
        }
        let free = catalogue.get("qwen/qwen3-coder").unwrap();
        assert_eq!(free.price(&request(free.id, "x", None)), Price::Free);
    }

    #[test]
    fn same_request_same_price() {
        let catalogue = Catalogue::embedded();
        let model = catalogue.get("google/gemini-2.5-flash").unwrap();
        let one = request(model.id, "deterministic", Some(77));
        let two = request(model.id, "deterministic", Some(77));
        assert_eq!(model.price(&one), model.price(&two));
    }

    #[test]
    fn every_tier_has_two_providers() {
        let catalogue = Catalogue::embedded();
        for tier in ["paid", "flat", "free"] {
            let mut providers: Vec<_> = catalogue
                .models()
                .iter()
                .filter(|model| model.pricing.billing_mode() == tier)
                .map(|model| model.provider())
                .collect();
            providers.dedup();
            assert!(providers.len() >= 2, "{tier}: {providers:?}");
        }
    }

    #[test]
    fn close_matches_suggest_by_name_and_id() {
        let catalogue = Catalogue::embedded();
        assert_eq!(
            catalogue.close_matches("gpt-5-mini", false)[0],
            "openai/gpt-5-mini"
        );
        assert_eq!(
            catalogue.close_matches("anthropic/claude-sonet-4.6", false)[0],
            "anthropic/claude-sonnet-4.6"
        );
        assert!(
            catalogue
                .close_matches("completely-unrelated-thing", false)
                .is_empty()
        );
        assert_eq!(
            catalogue.close_matches("dall-e-3", true),
            ["openai/dall-e-3"]
        );
        assert!(
            !catalogue
                .close_matches("dall-e-3", false)
                .contains(&"openai/dall-e-3")
        );
    }

    #[test]
    fn alternatives_are_same_tier_other_provider() {
        let catalogue = Catalogue::embedded();
        let model = catalogue.get("anthropic/claude-sonnet-4.6").unwrap();
        let alternatives = catalogue.same_tier_alternatives(model);
        assert!(alternatives.contains(&"openai/gpt-5-mini"));
        assert!(!alternatives.iter().any(|id| id.starts_with("anthropic/")));
        assert!(!alternatives.contains(&"xai/grok-code-fast"));
    }
}
