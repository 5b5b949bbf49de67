//! [`RequestModel`]: the model a request asks for, as the pipeline resolved it.

use std::fmt;
use std::sync::Arc;

/// The id of the model a request asks for, put into the request extensions by
/// the step that reads and checks the model (a gateway's model lookup).
///
/// It outlives the parsed body: a pipeline may move the model out of
/// [`ParsedJson`](super::ParsedJson), and the layers after it (the free tier's
/// trace, an x402 `PriceTable::by_extension::<RequestModel>()`) read this
/// instead.
///
/// ```
/// use walletgate::gateway::RequestModel;
///
/// let model = RequestModel::new("nvidia/nemotron-super");
/// assert_eq!(model.as_str(), "nvidia/nemotron-super");
/// assert_eq!(model.to_string(), "nvidia/nemotron-super");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RequestModel(Arc<str>);

impl RequestModel {
    /// The model `id` (e.g. `"openai/gpt-4o"`).
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }

    /// The model id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for RequestModel {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
