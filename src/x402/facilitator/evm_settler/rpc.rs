//! A small JSON-RPC client of an Ethereum node over the crate's hyper/rustls
//! client: only the calls a settler makes, every one bounded by a timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use alloy_primitives::{Address, B256, U256, hex};
use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use super::fees::Fees;
use crate::tls::{ClientTls, HttpsConnector};

/// Largest node answer read, in bytes (a receipt with its logs fits easily).
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// Largest answer of a whole block's receipts (a busy L2 block's are a few MB).
const MAX_BLOCK_RECEIPTS_BYTES: usize = 64 * 1024 * 1024;

/// EIP-7966's error code: the transaction is in the pool, not mined within the wait.
const SYNC_SEND_TIMED_OUT: i64 = 4;

/// Why a JSON-RPC call gave no result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum RpcError {
    /// The node could not be reached, or the connection failed.
    Transport(String),
    /// The node did not answer in time.
    Timeout(String),
    /// The node answered with a JSON-RPC error.
    Node {
        /// Its JSON-RPC error code, when given.
        code: Option<i64>,
        /// Its message (e.g. `execution reverted: …`, `nonce too low`).
        message: String,
        /// Its `data` (revert data, `0x…`), when given.
        data: Option<String>,
    },
    /// The answer is not what the method returns.
    Answer(String),
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transport(detail) | Self::Timeout(detail) => {
                write!(f, "node unreachable: {detail}")
            }
            Self::Node { message, .. } => write!(f, "node refused: {message}"),
            Self::Answer(detail) => write!(f, "node answered outside JSON-RPC: {detail}"),
        }
    }
}

impl RpcError {
    /// Whether the node does not offer the method called.
    pub(super) fn is_unsupported(&self) -> bool {
        let Self::Node { code, message, .. } = self else {
            return false;
        };
        let lower = message.to_ascii_lowercase();
        *code == Some(-32601)
            || lower.contains("method not found")
            || lower.contains("not supported")
            || lower.contains("does not exist")
            || lower.contains("not available")
    }
}

/// Whether the node refused a send because its nonce is taken: mined
/// ("nonce too low"), or pending with another transaction ("underpriced").
pub(super) fn nonce_is_used(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("nonce too low")
        || lower.contains("nonce has already been used")
        || lower.contains("replacement transaction underpriced")
}

/// Whether the node refused a send because it already has these very bytes.
pub(super) fn already_known(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("already known")
        || lower.contains("known transaction")
        || lower.contains("already imported")
}

/// A mined transaction's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Receipt {
    pub(super) transaction: B256,
    pub(super) success: bool,
    pub(super) block_number: u64,
    /// The gas it used (what the settler paid for, at its price).
    pub(super) gas_used: u64,
    pub(super) logs: Vec<Log>,
}

/// One event log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Log {
    pub(super) address: Address,
    pub(super) topics: Vec<B256>,
    pub(super) data: Vec<u8>,
}

/// A call or transaction request (`eth_call`, `eth_estimateGas`).
pub(super) struct CallRequest<'a> {
    pub(super) from: Address,
    pub(super) to: Address,
    pub(super) data: &'a [u8],
    /// The gas it may use: a call needing more fails, as the transaction would.
    pub(super) gas: Option<u64>,
    /// The fees the transaction will carry, so `GASPRICE` reads in the
    /// simulation what it will read when mined.
    pub(super) fees: Option<Fees>,
}

impl<'a> CallRequest<'a> {
    /// A plain call of `to` with `data` from `from`.
    pub(super) fn new(from: Address, to: Address, data: &'a [u8]) -> Self {
        Self {
            from,
            to,
            data,
            gas: None,
            fees: None,
        }
    }

    /// The same call as the settlement transaction will run: at most `gas`, at `fees`.
    pub(super) fn limited_to(self, gas: u64, fees: Fees) -> Self {
        Self {
            gas: Some(gas),
            fees: Some(fees),
            ..self
        }
    }

    fn json(&self) -> Value {
        let mut call = json!({
            "from": self.from,
            "to": self.to,
            "data": format!("0x{}", hex::encode(self.data)),
        });
        if let Some(gas) = self.gas {
            call["gas"] = format!("{gas:#x}").into();
        }
        if let Some(fees) = self.fees {
            call["maxFeePerGas"] = format!("{:#x}", fees.max_fee_per_gas).into();
            call["maxPriorityFeePerGas"] = format!("{:#x}", fees.max_priority_fee_per_gas).into();
        }
        call
    }
}

/// `uri`'s scheme and host, without user, port, path or query.
fn origin_of(uri: &Uri) -> String {
    format!(
        "{}://{}",
        uri.scheme_str().unwrap_or("http"),
        uri.authority().map_or("", |a| a.host())
    )
}

/// A JSON-RPC endpoint.
pub(super) struct Rpc {
    client: Client<HttpsConnector, Full<Bytes>>,
    url: Uri,
    timeout: Duration,
    ids: AtomicU64,
    /// Turns for `eth_call` and for `eth_estimateGas`, apart: a settlement's
    /// estimate never waits behind verifications queued before it (see
    /// `with_simulation_window`).
    calls_window: tokio::sync::Semaphore,
    estimates_window: tokio::sync::Semaphore,
}

impl Rpc {
    /// A client of the node at `url` (`http://` or `https://`), trusting
    /// `tls`'s roots, with at most `simulations` calls and as many
    /// estimates in flight.
    pub(super) fn new(
        url: &str,
        tls: &ClientTls,
        timeout: Duration,
        simulations: usize,
    ) -> Result<Self, String> {
        // Never the URL itself in an error: its path, query or user part may
        // hold a provider's key, and these errors reach start-up messages.
        let uri: Uri = url
            .parse()
            .map_err(|_| "it is not a URL (not shown: it may hold a key)".to_owned())?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
            return Err(format!(
                "{} is not an http(s) URL (only its scheme and host are shown)",
                origin_of(&uri)
            ));
        }
        let connector = tls.https_connector().map_err(|error| error.to_string())?;
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            url: uri,
            timeout,
            ids: AtomicU64::new(1),
            calls_window: tokio::sync::Semaphore::new(simulations.max(1)),
            estimates_window: tokio::sync::Semaphore::new(simulations.max(1)),
        })
    }

    /// The endpoint's scheme and authority, without path or query (which may
    /// carry an API key): what logs and errors may name.
    pub(super) fn origin(&self) -> String {
        origin_of(&self.url)
    }

    /// One call: its `result`.
    pub(super) async fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        self.call_limited(method, params, MAX_ANSWER_BYTES).await
    }

    async fn call_limited(
        &self,
        method: &str,
        params: Value,
        limit: usize,
    ) -> Result<Value, RpcError> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let mut answer = self.exchange(method, &body, limit, self.timeout).await?;
        result_of(method, &mut answer)
    }

    /// Several calls of `method` in one JSON-RPC batch: each one's outcome, in order.
    async fn batch(
        &self,
        method: &str,
        params: impl IntoIterator<Item = Value>,
    ) -> Result<Vec<Result<Value, RpcError>>, RpcError> {
        let first = self.ids.fetch_add(1 << 20, Ordering::Relaxed);
        let calls: Vec<Value> = params
            .into_iter()
            .zip(first..)
            .map(|(params, id)| json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .collect();
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let count = calls.len();
        let answer = self
            .exchange(
                method,
                &Value::Array(calls),
                MAX_BLOCK_RECEIPTS_BYTES,
                self.timeout,
            )
            .await?;
        let Value::Array(answers) = answer else {
            // A node refusing batches answers one error object.
            let mut answer = answer;
            return result_of(method, &mut answer).map(|_| Vec::new());
        };
        // Answers may come in any order: put them back in the calls' order.
        let mut outcomes: Vec<Result<Value, RpcError>> = (0..count)
            .map(|_| {
                Err(RpcError::Answer(format!(
                    "{method}: no answer in the batch"
                )))
            })
            .collect();
        for mut answer in answers {
            let slot = answer["id"]
                .as_u64()
                .and_then(|id| id.checked_sub(first))
                .and_then(|index| usize::try_from(index).ok())
                .filter(|&index| index < count);
            if let Some(index) = slot {
                outcomes[index] = result_of(method, &mut answer);
            }
        }
        Ok(outcomes)
    }

    /// Posts `body`; the node's JSON answer.
    async fn exchange(
        &self,
        method: &str,
        body: &Value,
        limit: usize,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        let request = Request::post(self.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|error| RpcError::Transport(error.to_string()))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|error| {
                RpcError::Transport(format!("{method}: {}", crate::error_chain(&error)))
            })?;
            let status = response.status();
            let bytes = Limited::new(response.into_body(), limit)
                .collect()
                .await
                .map_err(|error| RpcError::Transport(format!("{method} answer: {error}")))?
                .to_bytes();
            Ok::<_, RpcError>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| RpcError::Timeout(format!("{method}: no answer within {timeout:?}")))??;
        serde_json::from_slice(&bytes).map_err(|_| {
            if status.is_success() {
                RpcError::Answer(format!("{method}: not JSON"))
            } else {
                RpcError::Transport(format!("{method}: HTTP {status}"))
            }
        })
    }

    async fn quantity(&self, method: &str, params: Value) -> Result<u128, RpcError> {
        let result = self.call(method, params).await?;
        quantity(&result).ok_or_else(|| RpcError::Answer(format!("{method}: not a quantity")))
    }

    pub(super) async fn chain_id(&self) -> Result<u64, RpcError> {
        let id = self.quantity("eth_chainId", json!([])).await?;
        u64::try_from(id).map_err(|_| RpcError::Answer("eth_chainId: too large".into()))
    }

    pub(super) async fn code_len(&self, account: Address) -> Result<usize, RpcError> {
        Ok(self.code(account).await?.len())
    }

    /// The account's code (empty for an EOA).
    pub(super) async fn code(&self, account: Address) -> Result<Vec<u8>, RpcError> {
        let code = self.call("eth_getCode", json!([account, "latest"])).await?;
        hex::decode(code.as_str().unwrap_or_default())
            .map_err(|_| RpcError::Answer("eth_getCode: not hex".into()))
    }

    pub(super) async fn balance(&self, account: Address) -> Result<u128, RpcError> {
        self.quantity("eth_getBalance", json!([account, "latest"]))
            .await
    }

    /// The account's next nonce, counting its queued transactions (`pending`) or not (`latest`).
    pub(super) async fn transaction_count(
        &self,
        account: Address,
        pending: bool,
    ) -> Result<u64, RpcError> {
        let tag = if pending { "pending" } else { "latest" };
        let count = self
            .quantity("eth_getTransactionCount", json!([account, tag]))
            .await?;
        u64::try_from(count).map_err(|_| RpcError::Answer("nonce too large".into()))
    }

    /// A place in `window`, waited for at most the call's own bound: a node
    /// that stopped answering holds every place, and those queued behind
    /// must not wait for each in turn.
    async fn turn<'a>(
        &self,
        window: &'a tokio::sync::Semaphore,
        method: &str,
    ) -> Result<tokio::sync::SemaphorePermit<'a>, RpcError> {
        match tokio::time::timeout(self.timeout, window.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            // The semaphore is never closed.
            Ok(Err(_)) | Err(_) => Err(RpcError::Timeout(format!(
                "{method}: no turn at the node within {:?}",
                self.timeout
            ))),
        }
    }

    pub(super) async fn eth_call(&self, request: &CallRequest<'_>) -> Result<Vec<u8>, RpcError> {
        let _turn = self.turn(&self.calls_window, "eth_call").await?;
        let result = self
            .call("eth_call", json!([request.json(), "latest"]))
            .await?;
        let text = result.as_str().unwrap_or_default();
        hex::decode(text).map_err(|_| RpcError::Answer("eth_call: not hex".into()))
    }

    /// At `latest`, as `eth_call`: anvil's default is `pending`, which
    /// executes the whole pool before every estimate (quadratic under load:
    /// 7 ms of node CPU per settlement with 600 in flight).
    pub(super) async fn estimate_gas(&self, request: &CallRequest<'_>) -> Result<u64, RpcError> {
        let _turn = self.turn(&self.estimates_window, "eth_estimateGas").await?;
        let gas = self
            .quantity("eth_estimateGas", json!([request.json(), "latest"]))
            .await?;
        u64::try_from(gas).map_err(|_| RpcError::Answer("gas too large".into()))
    }

    /// The latest block's base fee and the node's suggested priority fee
    /// (one batch: one round trip).
    pub(super) async fn fees(&self) -> Result<(u128, u128), RpcError> {
        let mut answers = self
            .exchange(
                "fees",
                &json!([
                    { "jsonrpc": "2.0", "id": 1, "method": "eth_getBlockByNumber", "params": ["latest", false] },
                    { "jsonrpc": "2.0", "id": 2, "method": "eth_maxPriorityFeePerGas", "params": [] },
                ]),
                MAX_ANSWER_BYTES,
                self.timeout,
            )
            .await?;
        let Some(answers) = answers.as_array_mut() else {
            return result_of("fees", &mut answers).and(Err(RpcError::Answer(
                "fees: the node does not answer batches".into(),
            )));
        };
        answers.sort_by_key(|answer| answer["id"].as_u64());
        let [block, tip] = answers.as_mut_slice() else {
            return Err(RpcError::Answer("fees: two answers expected".into()));
        };
        let block = result_of("eth_getBlockByNumber", block)?;
        let base = quantity(&block["baseFeePerGas"])
            .ok_or_else(|| RpcError::Answer("latest block has no base fee".into()))?;
        let tip = quantity(&result_of("eth_maxPriorityFeePerGas", tip)?)
            .ok_or_else(|| RpcError::Answer("eth_maxPriorityFeePerGas: not a quantity".into()))?;
        Ok((base, tip))
    }

    pub(super) async fn block_number(&self) -> Result<u64, RpcError> {
        let number = self.quantity("eth_blockNumber", json!([])).await?;
        u64::try_from(number).map_err(|_| RpcError::Answer("block number too large".into()))
    }

    /// Sends a signed transaction; its hash as the node computed it.
    pub(super) async fn send_raw(&self, raw: &[u8]) -> Result<(), RpcError> {
        self.call(
            "eth_sendRawTransaction",
            json!([format!("0x{}", hex::encode(raw))]),
        )
        .await
        .map(drop)
    }

    /// The receipt of `transaction`, `None` while it is not mined.
    pub(super) async fn receipt(&self, transaction: B256) -> Result<Option<Receipt>, RpcError> {
        let receipt = self
            .call("eth_getTransactionReceipt", json!([transaction]))
            .await?;
        if receipt.is_null() {
            return Ok(None);
        }
        parse_receipt(transaction, &receipt)
            .map(Some)
            .ok_or_else(|| RpcError::Answer("eth_getTransactionReceipt: malformed".into()))
    }

    /// Sends a signed transaction and waits for its receipt in the same call
    /// (EIP-7966's `eth_sendRawTransactionSync`), at most `wait`: `None`
    /// when the node says it is pooled but not mined within its own wait.
    /// Past `wait`, the call ends as [`RpcError::Timeout`]: sent or not is
    /// unknown (the caller sends the same bytes again). The optional timeout
    /// parameter is not sent: not every node parses it (anvil does not).
    pub(super) async fn send_raw_sync(
        &self,
        raw: &[u8],
        hash: B256,
        wait: Duration,
    ) -> Result<Option<Receipt>, RpcError> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let method = "eth_sendRawTransactionSync";
        let body = json!({
            "jsonrpc": "2.0", "id": id, "method": method,
            "params": [format!("0x{}", hex::encode(raw))],
        });
        let mut answer = self.exchange(method, &body, MAX_ANSWER_BYTES, wait).await?;
        match result_of(method, &mut answer) {
            Ok(receipt) => parse_receipt(hash, &receipt)
                .map(Some)
                .ok_or_else(|| RpcError::Answer(format!("{method}: malformed receipt"))),
            Err(RpcError::Node {
                code: Some(SYNC_SEND_TIMED_OUT),
                ..
            }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Whether the node offers `eth_sendRawTransactionSync`: asked once,
    /// with no transaction, a node that has it refuses the parameters.
    pub(super) async fn offers_sync_send(&self) -> Result<bool, RpcError> {
        match self.call("eth_sendRawTransactionSync", json!(["0x"])).await {
            Err(error) if error.is_unsupported() => Ok(false),
            Err(RpcError::Node { .. }) | Ok(_) => Ok(true),
            Err(error) => Err(error),
        }
    }

    /// The receipts of `block` among `wanted` (`eth_getBlockReceipts`).
    pub(super) async fn block_receipts(
        &self,
        block: u64,
        wanted: &[B256],
    ) -> Result<Vec<Receipt>, RpcError> {
        let method = "eth_getBlockReceipts";
        let receipts = self
            .call_limited(
                method,
                json!([format!("{block:#x}")]),
                MAX_BLOCK_RECEIPTS_BYTES,
            )
            .await?;
        let Value::Array(receipts) = receipts else {
            // A block the node does not have yet.
            return Ok(Vec::new());
        };
        let mut mined = Vec::new();
        for receipt in &receipts {
            let Some(hash) = receipt["transactionHash"]
                .as_str()
                .and_then(|hash| hash.parse::<B256>().ok())
            else {
                return Err(RpcError::Answer(format!(
                    "{method}: a receipt without its hash"
                )));
            };
            if wanted.contains(&hash) {
                mined.push(
                    parse_receipt(hash, receipt)
                        .ok_or_else(|| RpcError::Answer(format!("{method}: malformed")))?,
                );
            }
        }
        Ok(mined)
    }

    /// The receipts of those of `transactions` already mined, in one batch.
    pub(super) async fn receipts(&self, transactions: &[B256]) -> Result<Vec<Receipt>, RpcError> {
        let method = "eth_getTransactionReceipt";
        let outcomes = self
            .batch(method, transactions.iter().map(|hash| json!([hash])))
            .await?;
        let mut mined = Vec::new();
        for (hash, outcome) in transactions.iter().zip(outcomes) {
            let receipt = outcome?;
            if receipt.is_null() {
                continue;
            }
            mined.push(
                parse_receipt(*hash, &receipt)
                    .ok_or_else(|| RpcError::Answer(format!("{method}: malformed")))?,
            );
        }
        Ok(mined)
    }
}

/// A call's `result` from the node's `answer`, or its error.
fn result_of(method: &str, answer: &mut Value) -> Result<Value, RpcError> {
    if let Some(error) = answer.get("error") {
        return Err(RpcError::Node {
            code: error["code"].as_i64(),
            message: error["message"].as_str().unwrap_or_default().to_owned(),
            data: error["data"].as_str().map(str::to_owned),
        });
    }
    match answer.get_mut("result") {
        Some(result) => Ok(result.take()),
        None => Err(RpcError::Answer(format!("{method}: no result"))),
    }
}

fn parse_receipt(transaction: B256, receipt: &Value) -> Option<Receipt> {
    let success = quantity(&receipt["status"])? == 1;
    let block_number = u64::try_from(quantity(&receipt["blockNumber"])?).ok()?;
    // Every node sends it; one that does not still tells the outcome.
    let gas_used =
        quantity(&receipt["gasUsed"]).map_or(0, |gas| u64::try_from(gas).unwrap_or(u64::MAX));
    let mut logs = Vec::new();
    for log in receipt["logs"].as_array()? {
        let address = log["address"].as_str()?.parse().ok()?;
        let topics = log["topics"]
            .as_array()?
            .iter()
            .map(|topic| topic.as_str()?.parse().ok())
            .collect::<Option<Vec<B256>>>()?;
        let data = hex::decode(log["data"].as_str()?).ok()?;
        logs.push(Log {
            address,
            topics,
            data,
        });
    }
    Some(Receipt {
        transaction,
        success,
        block_number,
        gas_used,
        logs,
    })
}

/// A JSON-RPC quantity (`0x`-prefixed hex).
pub(super) fn quantity(value: &Value) -> Option<u128> {
    let text = value.as_str()?.strip_prefix("0x")?;
    u128::from_str_radix(text, 16).ok()
}

/// Revert data's `Error(string)` message, if it is one.
pub(super) fn revert_message(data: &str) -> Option<String> {
    let bytes = hex::decode(data).ok()?;
    let payload = bytes.strip_prefix(&[0x08, 0xc3, 0x79, 0xa0][..])?;
    let length = U256::from_be_slice(payload.get(32..64)?);
    let length = usize::try_from(length).ok()?;
    let text = payload.get(64..64usize.checked_add(length)?)?;
    String::from_utf8(text.to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RPC URL may carry a provider's key in its path, query or user
    /// part: errors and `origin()` name its scheme and host only.
    #[test]
    fn rpc_url_errors_and_origin_name_scheme_and_host_only() {
        let tls = ClientTls::webpki_roots();
        let timeout = Duration::from_secs(1);
        let error = Rpc::new("not a url/SECRET-KEY", &tls, timeout, 1)
            .err()
            .unwrap();
        assert!(!error.contains("SECRET-KEY"), "{error}");
        assert!(error.contains("not a URL"), "{error}");
        let error = Rpc::new(
            "ftp://node.example/v3/SECRET-KEY?k=SECRET-KEY",
            &tls,
            timeout,
            1,
        )
        .err()
        .unwrap();
        assert!(!error.contains("SECRET-KEY"), "{error}");
        assert!(error.contains("ftp://node.example"), "{error}");
        let rpc = Rpc::new(
            "https://user:SECRET-KEY@node.example:8545/v3/SECRET-KEY?k=SECRET-KEY",
            &tls,
            timeout,
            1,
        )
        .unwrap();
        assert_eq!(rpc.origin(), "https://node.example");
    }

    /// A node that stopped answering holds every place in the window: a
    /// call queued behind gives up after its own bound, not after each call
    /// ahead of it in turn.
    #[tokio::test]
    async fn a_call_waiting_for_its_turn_gives_up_within_its_own_bound() {
        let timeout = Duration::from_millis(100);
        let rpc = Rpc::new("http://127.0.0.1:9", &ClientTls::webpki_roots(), timeout, 1).unwrap();
        let _held = rpc.calls_window.acquire().await.unwrap();
        let data = [0u8; 4];
        let call = CallRequest::new(Address::ZERO, Address::ZERO, &data);
        let answer = rpc.eth_call(&call).await;
        assert!(
            matches!(&answer, Err(RpcError::Timeout(detail)) if detail.contains("no turn")),
            "{answer:?}"
        );
        // Estimates take their turns apart: this one reaches the (absent) node.
        let answer = rpc.estimate_gas(&call).await;
        assert!(
            !matches!(&answer, Err(RpcError::Timeout(detail)) if detail.contains("no turn")),
            "{answer:?}"
        );
        let _held = rpc.estimates_window.acquire().await.unwrap();
        let answer = rpc.estimate_gas(&call).await;
        assert!(
            matches!(&answer, Err(RpcError::Timeout(detail)) if detail.contains("no turn")),
            "{answer:?}"
        );
    }

    #[test]
    fn revert_strings_are_read_from_error_data() {
        // Error("FiatTokenV2: authorization is used or canceled")
        let text = "FiatTokenV2: authorization is used or canceled";
        let mut data = vec![0x08, 0xc3, 0x79, 0xa0];
        data.extend_from_slice(&U256::from(32).to_be_bytes::<32>());
        data.extend_from_slice(&U256::from(text.len()).to_be_bytes::<32>());
        data.extend_from_slice(text.as_bytes());
        data.resize(data.len().div_ceil(32) * 32 + 4, 0);
        assert_eq!(
            revert_message(&format!("0x{}", hex::encode(&data))).as_deref(),
            Some(text)
        );
        assert_eq!(revert_message("0x"), None);
    }

    #[test]
    fn receipts_parse_status_block_and_logs() {
        let receipt = json!({
            "status": "0x1", "blockNumber": "0x10", "gasUsed": "0x13a4c",
            "logs": [{"address": "0x036cbd53842c5426634e7929541ec2318f3dcf7e",
                      "topics": [format!("0x{}", "dd".repeat(32))], "data": "0x01"}]
        });
        let parsed = parse_receipt(B256::ZERO, &receipt).unwrap();
        assert!(parsed.success);
        assert_eq!(parsed.gas_used, 80_460);
        assert_eq!(parsed.block_number, 16);
        assert_eq!(parsed.logs[0].data, vec![1]);
        assert_eq!(quantity(&json!("0x")), None);
    }

    #[test]
    fn method_not_found_is_unsupported_and_other_refusals_are_not() {
        let node = |code, message: &str| RpcError::Node {
            code,
            message: message.into(),
            data: None,
        };
        assert!(node(Some(-32601), "whatever").is_unsupported());
        assert!(node(None, "the method eth_x does not exist/is not available").is_unsupported());
        assert!(!node(Some(-32602), "Empty transaction data").is_unsupported());
        assert!(!RpcError::Transport("reset".into()).is_unsupported());
    }
}
