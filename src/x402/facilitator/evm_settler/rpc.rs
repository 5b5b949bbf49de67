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

/// Why a JSON-RPC call gave no result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum RpcError {
    /// The node could not be reached or did not answer in time.
    Transport(String),
    /// The node answered with a JSON-RPC error.
    Node {
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
            Self::Transport(detail) => write!(f, "node unreachable: {detail}"),
            Self::Node { message, .. } => write!(f, "node refused: {message}"),
            Self::Answer(detail) => write!(f, "node answered outside JSON-RPC: {detail}"),
        }
    }
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
}

impl Rpc {
    /// A client of the node at `url` (`http://` or `https://`), trusting `tls`'s roots.
    pub(super) fn new(url: &str, tls: &ClientTls, timeout: Duration) -> Result<Self, String> {
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
        })
    }

    /// The endpoint's scheme and authority, without path or query (which may
    /// carry an API key): what logs and errors may name.
    pub(super) fn origin(&self) -> String {
        origin_of(&self.url)
    }

    /// One call: its `result`.
    pub(super) async fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let request = Request::post(self.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|error| RpcError::Transport(error.to_string()))?;
        let exchange = async {
            let response = self.client.request(request).await.map_err(|error| {
                RpcError::Transport(format!("{method}: {}", crate::error_chain(&error)))
            })?;
            let status = response.status();
            let bytes = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|error| RpcError::Transport(format!("{method} answer: {error}")))?
                .to_bytes();
            Ok::<_, RpcError>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| {
                RpcError::Transport(format!("{method}: no answer within {:?}", self.timeout))
            })??;
        let mut answer: Value = serde_json::from_slice(&bytes).map_err(|_| {
            if status.is_success() {
                RpcError::Answer(format!("{method}: not JSON"))
            } else {
                RpcError::Transport(format!("{method}: HTTP {status}"))
            }
        })?;
        if let Some(error) = answer.get("error") {
            return Err(RpcError::Node {
                message: error["message"].as_str().unwrap_or_default().to_owned(),
                data: error["data"].as_str().map(str::to_owned),
            });
        }
        match answer.get_mut("result") {
            Some(result) => Ok(result.take()),
            None => Err(RpcError::Answer(format!("{method}: no result"))),
        }
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

    pub(super) async fn eth_call(&self, request: &CallRequest<'_>) -> Result<Vec<u8>, RpcError> {
        let result = self
            .call("eth_call", json!([request.json(), "latest"]))
            .await?;
        let text = result.as_str().unwrap_or_default();
        hex::decode(text).map_err(|_| RpcError::Answer("eth_call: not hex".into()))
    }

    pub(super) async fn estimate_gas(&self, request: &CallRequest<'_>) -> Result<u64, RpcError> {
        let gas = self
            .quantity("eth_estimateGas", json!([request.json()]))
            .await?;
        u64::try_from(gas).map_err(|_| RpcError::Answer("gas too large".into()))
    }

    /// The latest block's base fee and the node's suggested priority fee.
    pub(super) async fn fees(&self) -> Result<(u128, u128), RpcError> {
        let block = self
            .call("eth_getBlockByNumber", json!(["latest", false]))
            .await?;
        let base = quantity(&block["baseFeePerGas"])
            .ok_or_else(|| RpcError::Answer("latest block has no base fee".into()))?;
        let tip = self.quantity("eth_maxPriorityFeePerGas", json!([])).await?;
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
        let error = Rpc::new("not a url/SECRET-KEY", &tls, timeout)
            .err()
            .unwrap();
        assert!(!error.contains("SECRET-KEY"), "{error}");
        assert!(error.contains("not a URL"), "{error}");
        let error = Rpc::new(
            "ftp://node.example/v3/SECRET-KEY?k=SECRET-KEY",
            &tls,
            timeout,
        )
        .err()
        .unwrap();
        assert!(!error.contains("SECRET-KEY"), "{error}");
        assert!(error.contains("ftp://node.example"), "{error}");
        let rpc = Rpc::new(
            "https://user:SECRET-KEY@node.example:8545/v3/SECRET-KEY?k=SECRET-KEY",
            &tls,
            timeout,
        )
        .unwrap();
        assert_eq!(rpc.origin(), "https://node.example");
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
}
