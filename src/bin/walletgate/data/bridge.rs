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
use walletgate::client::wallet::{DefaultTransport, Transport, WalletAuth, WalletError};

use super::Failure;
use super::auth_file::{self, AuthFile};

const SESSION_HEADER: &str = "mcp-session-id";
const PROTOCOL_HEADER: &str = "mcp-protocol-version";
/// JSON-RPC code of a failure the bridge reports itself (server-defined range).
const BRIDGE_ERROR: i64 = -32001;
const PARSE_ERROR: i64 = -32700;

struct Bridge<T = DefaultTransport> {
    auth: WalletAuth<T>,
    /// Where a re-minted JWT is kept (none in unit tests).
    saved: Option<AuthFile>,
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
        saved: Some(saved),
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
/// SSE event; anything but JSON objects (a bare `null`, priming events) is
/// dropped.
fn messages(response: &Response<Bytes>) -> Vec<Value> {
    let mut messages = values(response);
    messages.retain(Value::is_object);
    messages
}

fn values(response: &Response<Bytes>) -> Vec<Value> {
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

impl<T: Transport> Bridge<T> {
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
        let Some(saved) = &mut self.saved else {
            return;
        };
        let held = self.auth.credentials();
        if held != saved.credentials {
            saved.credentials = held;
            if let Err(error) = auth_file::save(saved) {
                eprintln!("walletgate mcp-bridge: {error}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use http_body_util::{BodyExt, Full};
    use walletgate::client::wallet::{Credentials, WalletConfig};

    use super::*;

    /// What the fake endpoint saw: (method, session id, JSON-RPC method).
    type Log = Arc<Mutex<Vec<(String, String, String)>>>;

    /// An MCP endpoint that numbers its sessions and forgets the first one
    /// after its first tool call (as a restarted server would).
    fn endpoint(
        log: Log,
    ) -> impl tower_service::Service<
        Request<Full<Bytes>>,
        Response = Response<Full<Bytes>>,
        Error = Infallible,
        Future = impl Send,
    > + Clone
    + Send
    + Sync
    + 'static {
        tower::service_fn(move |request: Request<Full<Bytes>>| {
            let log = log.clone();
            async move {
                let (parts, body) = request.into_parts();
                let body = body.collect().await.unwrap_or_default().to_bytes();
                let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let session = parts
                    .headers
                    .get(SESSION_HEADER)
                    .map(|value| value.to_str().unwrap().to_owned())
                    .unwrap_or_default();
                let method = message["method"].as_str().unwrap_or("").to_owned();
                let calls_before = {
                    let mut log = log.lock().unwrap();
                    log.push((parts.method.to_string(), session.clone(), method.clone()));
                    log.iter()
                        .filter(|(_, _, m)| m == "tools/call")
                        .count()
                        .saturating_sub(1)
                };
                let sessions = log
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|(_, _, m)| m == "initialize")
                    .count();
                let reply = |status: StatusCode, body: Value| {
                    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
                    *response.status_mut() = status;
                    response
                };
                let response = match method.as_str() {
                    "initialize" => {
                        let mut response = reply(
                            StatusCode::OK,
                            json!({"jsonrpc": "2.0", "id": message["id"], "result": {
                                "protocolVersion": "2025-11-25", "serverInfo": {"name": "fake"}}}),
                        );
                        let id = format!("s{sessions}");
                        response
                            .headers_mut()
                            .insert(SESSION_HEADER, id.parse().unwrap());
                        response
                    }
                    "tools/call" if session == "s1" && calls_before > 0 => {
                        reply(StatusCode::NOT_FOUND, Value::Null)
                    }
                    "tools/call" => {
                        let answer = json!({"jsonrpc": "2.0", "id": message["id"],
                                            "result": {"session": session}});
                        let mut response = reply(StatusCode::OK, Value::Null);
                        *response.body_mut() =
                            Full::new(Bytes::from(format!("data: {answer}\n\n")));
                        response
                            .headers_mut()
                            .insert(header::CONTENT_TYPE, "text/event-stream".parse().unwrap());
                        response
                    }
                    _ => reply(StatusCode::ACCEPTED, Value::Null),
                };
                Ok::<_, Infallible>(response)
            }
        })
    }

    #[tokio::test]
    async fn a_forgotten_session_is_reopened_with_the_hosts_initialize() {
        let log = Log::default();
        let base = "http://127.0.0.1:9";
        let credentials: Credentials = serde_json::from_value(json!({
            "baseUrl": base, "address": "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
            "scopes": ["read:favorites"], "patId": "pat_1", "pat": "wg_pat_x",
            "patExpiresAtUnixSecs": u64::MAX / 2, "jwt": "jwt-1",
            "jwtExpiresAtUnixSecs": u64::MAX / 2,
        }))
        .unwrap();
        let auth = WalletAuth::new_with_transport(
            WalletConfig::new(base, "key").unwrap(),
            endpoint(log.clone()),
        )
        .resume(credentials)
        .unwrap();
        let mut bridge = Bridge {
            auth,
            saved: None,
            url: format!("{base}/mcp"),
            session: None,
            protocol: None,
            initialize: None,
        };
        let initialize = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#;
        let replies = bridge.forward(initialize).await;
        assert_eq!(replies.len(), 1);
        assert_eq!(bridge.protocol.as_deref(), Some("2025-11-25"));
        assert!(
            bridge
                .forward(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
                .await
                .is_empty()
        );
        let call = |id: u32| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{}}}}"#)
        };
        let first: Value = serde_json::from_str(&bridge.forward(&call(1)).await[0]).unwrap();
        assert_eq!(first["result"]["session"], "s1");
        // s1 is forgotten: initialize and initialized again, then the call.
        let second: Value = serde_json::from_str(&bridge.forward(&call(2)).await[0]).unwrap();
        assert_eq!(second["id"], 2);
        assert_eq!(second["result"]["session"], "s2");
        let seen: Vec<(String, String)> = log
            .lock()
            .unwrap()
            .iter()
            .map(|(_, session, method)| (session.clone(), method.clone()))
            .collect();
        let expected = [
            ("", "initialize"),
            ("s1", "notifications/initialized"),
            ("s1", "tools/call"),
            ("s1", "tools/call"),
            ("", "initialize"),
            ("s2", "notifications/initialized"),
            ("s2", "tools/call"),
        ];
        assert_eq!(
            seen,
            expected.map(|(session, method)| (session.to_owned(), method.to_owned()))
        );
        bridge.end().await;
        assert_eq!(log.lock().unwrap().last().unwrap().0, "DELETE");
    }

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
        assert!(messages(&Response::new(Bytes::from_static(b"null"))).is_empty());
    }
}
