//! `walletgate mcp-bridge`: MCP over stdio (one JSON-RPC message per line,
//! as desktop hosts launch servers) forwarded to the data API's streamable
//! HTTP endpoint.
//!
//! Each message is POSTed with `X-API-KEY`, a wallet JWT that is re-minted
//! before it expires, and the session id and protocol version the endpoint
//! gave; the answer (JSON or an SSE stream) is written back line by line.
//! A 401 (the JWT expired or was replaced on the server) re-mints the JWT and
//! sends the message again once ([`WalletAuth::send`]); a 404 for the session
//! (the server forgot it) replays the host's `initialize` and
//! `notifications/initialized` to open a new session, then sends the message
//! again. At end of input the session is ended with `DELETE`. Server-initiated
//! requests (the GET stream) are not bridged: the data API sends none.

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use walletgate::client::wallet::{WalletAuth, WalletError};

use super::Failure;
use super::auth_file::{self, AuthFile};

const SESSION_HEADER: &str = "mcp-session-id";
const PROTOCOL_HEADER: &str = "mcp-protocol-version";
/// JSON-RPC code of a failure the bridge reports itself (server-defined range).
const BRIDGE_ERROR: i64 = -32001;
const PARSE_ERROR: i64 = -32700;

struct Bridge {
    auth: WalletAuth,
    saved: AuthFile,
    url: String,
    session: Option<String>,
    protocol: Option<String>,
    /// The host's `initialize`, replayed to open a new session.
    initialize: Option<String>,
}

/// Serves stdin/stdout until stdin ends.
pub(super) async fn serve(auth: WalletAuth, saved: AuthFile, url: &str) -> Result<(), Failure> {
    let mut bridge = Bridge {
        auth,
        saved,
        url: url.to_owned(),
        session: None,
        protocol: None,
        initialize: None,
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut stdout = tokio::io::stdout();
    let io = |error: std::io::Error| Failure::api(format!("stdio: {error}"));
    while let Some(line) = lines.next_line().await.map_err(io)? {
        if line.trim().is_empty() {
            continue;
        }
        for reply in bridge.forward(&line).await {
            stdout.write_all(reply.as_bytes()).await.map_err(io)?;
            stdout.write_all(b"\n").await.map_err(io)?;
        }
        stdout.flush().await.map_err(io)?;
    }
    bridge.end().await;
    Ok(())
}

fn jsonrpc_error(id: Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// The JSON-RPC messages of an answer: a JSON body, or the `data:` of each
/// SSE event.
fn messages(response: &Response<Bytes>) -> Vec<Value> {
    let event_stream = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"));
    if !event_stream {
        return serde_json::from_slice(response.body())
            .into_iter()
            .collect();
    }
    let text = String::from_utf8_lossy(response.body()).replace("\r\n", "\n");
    text.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|data| data.strip_prefix(' ').unwrap_or(data))
                .collect();
            serde_json::from_str(&data.join("\n")).ok()
        })
        .collect()
}

impl Bridge {
    /// Forwards one message from the host; the lines to write back.
    async fn forward(&mut self, line: &str) -> Vec<String> {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            return vec![jsonrpc_error(Value::Null, PARSE_ERROR, "Parse error")];
        };
        let id = message.get("id").cloned();
        let is_initialize = message["method"] == "initialize";
        if is_initialize {
            self.initialize = Some(line.to_owned());
            self.session = None;
            self.protocol = None;
        }
        let mut sent = self.post(line).await;
        let session_lost = matches!(&sent, Ok(response) if response.status() == StatusCode::NOT_FOUND)
            && self.session.is_some()
            && !is_initialize;
        if session_lost {
            sent = match self.reconnect().await {
                Ok(()) => self.post(line).await,
                Err(error) => Err(error),
            };
        }
        self.save();
        match sent {
            Ok(response) => self.replies(&response, id),
            Err(error) => {
                eprintln!("walletgate mcp-bridge: {error}");
                id.map(|id| jsonrpc_error(id, BRIDGE_ERROR, &error.to_string()))
                    .into_iter()
                    .collect()
            }
        }
    }

    async fn post(&mut self, body: &str) -> Result<Response<Bytes>, WalletError> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(&self.url)
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(session) = &self.session {
            request = request.header(SESSION_HEADER, session);
        }
        if let Some(protocol) = &self.protocol {
            request = request.header(PROTOCOL_HEADER, protocol);
        }
        let request = request
            .body(Bytes::from(body.to_owned()))
            .map_err(|_| WalletError::Config(format!("{} is not a valid URL", self.url)))?;
        let response = self.auth.send(request).await?;
        if let Some(session) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|value| value.to_str().ok())
        {
            self.session = Some(session.to_owned());
        }
        Ok(response)
    }

    /// The lines for the host: the answer's messages (a refusal without a
    /// request id gets the host's id back), or an error for a request that
    /// got no message at all.
    fn replies(&mut self, response: &Response<Bytes>, id: Option<Value>) -> Vec<String> {
        let status = response.status();
        let mut messages = messages(response);
        for message in &mut messages {
            if let Some(version) = message["result"]["protocolVersion"].as_str()
                && message["result"].get("serverInfo").is_some()
            {
                self.protocol = Some(version.to_owned());
            }
            if message.get("error").is_some()
                && message["id"].is_null()
                && let Some(id) = &id
            {
                message["id"] = id.clone();
            }
        }
        if messages.is_empty()
            && !status.is_success()
            && let Some(id) = id
        {
            let message = format!("the MCP endpoint answered {status}");
            return vec![jsonrpc_error(id, BRIDGE_ERROR, &message)];
        }
        messages.iter().map(Value::to_string).collect()
    }

    /// Opens a new session by replaying the host's handshake.
    async fn reconnect(&mut self) -> Result<(), WalletError> {
        let initialize = self.initialize.clone().ok_or_else(|| {
            WalletError::Protocol("the MCP session ended before initialize".to_owned())
        })?;
        self.session = None;
        self.protocol = None;
        let answer = self.post(&initialize).await?;
        let _handshake = self.replies(&answer, None);
        if !answer.status().is_success() {
            return Err(WalletError::Protocol(format!(
                "reconnecting: initialize answered {}",
                answer.status()
            )));
        }
        self.post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await?;
        Ok(())
    }

    /// Ends the session, if one was opened (`DELETE` with its id).
    async fn end(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        let request = Request::builder()
            .method(Method::DELETE)
            .uri(&self.url)
            .header(SESSION_HEADER, session)
            .body(Bytes::new());
        if let Ok(request) = request
            && let Err(error) = self.auth.send(request).await
        {
            eprintln!("walletgate mcp-bridge: ending the session: {error}");
        }
        self.save();
    }

    /// Keeps a re-minted JWT for the next run.
    fn save(&mut self) {
        let held = self.auth.credentials();
        if held != self.saved.credentials {
            self.saved.credentials = held;
            if let Err(error) = auth_file::save(&self.saved) {
                eprintln!("walletgate mcp-bridge: {error}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_stream_answers_yield_their_json_messages() {
        let body = "id: 0\nretry: 3000\ndata:\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n";
        let response = Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(Bytes::from(body))
            .unwrap();
        assert_eq!(
            messages(&response),
            [json!({"jsonrpc":"2.0","id":1,"result":{}})]
        );
        let plain = Response::new(Bytes::from_static(
            b"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}",
        ));
        assert_eq!(messages(&plain)[0]["id"], 2);
    }
}
