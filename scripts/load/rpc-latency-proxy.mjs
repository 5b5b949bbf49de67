// A JSON-RPC proxy that puts a distant node on loopback, for
// scripts/bench-settler.sh: every request waits DELAY_MS before it is
// forwarded to the node and its answer DELAY_MS again before it is returned
// (the round trip of a hosted node DELAY_MS away each way), and every call is
// counted by method (each item of a JSON-RPC batch counts, and so does the
// HTTP request carrying them).
//
//   node scripts/load/rpc-latency-proxy.mjs <listen port> <node url> <delay ms>
//
// GET /stats answers the counts as JSON ({httpRequests, calls, byMethod});
// POST /stats/reset zeroes them. Node rather than a Rust binary: the bench
// needs node already (deploy.mjs), and nothing has to be compiled on a
// machine whose cores are busy building. Loopback only.
import http from "node:http";

const [port, nodeUrl, delayText] = process.argv.slice(2);
const delayMs = Number(delayText);
if (!port || !nodeUrl || !Number.isFinite(delayMs) || delayMs < 0) {
  console.error("usage: node rpc-latency-proxy.mjs <listen port> <node url> <delay ms>");
  process.exit(2);
}
const upstream = new URL(nodeUrl);
if (!["127.0.0.1", "localhost", "[::1]"].includes(upstream.hostname)) {
  console.error("rpc-latency-proxy: the node must be on loopback");
  process.exit(2);
}
// No cap on connections to the node: a cap would queue calls behind
// eth_sendRawTransactionSync calls held open until their block, which a node
// reached over the network does not do to its clients.
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });

let stats;
const resetStats = () => {
  stats = { httpRequests: 0, calls: 0, byMethod: {} };
};
resetStats();

const count = (body) => {
  stats.httpRequests += 1;
  let parsed;
  try {
    parsed = JSON.parse(body);
  } catch {
    parsed = null;
  }
  for (const call of Array.isArray(parsed) ? parsed : [parsed]) {
    const method = typeof call?.method === "string" ? call.method : "(unparsed)";
    stats.calls += 1;
    stats.byMethod[method] = (stats.byMethod[method] ?? 0) + 1;
  }
};

const later = (fn) => (delayMs > 0 ? setTimeout(fn, delayMs) : setImmediate(fn));

const server = http.createServer((request, response) => {
  const chunks = [];
  request.on("data", (chunk) => chunks.push(chunk));
  request.on("end", () => {
    if (request.url === "/stats" && request.method === "GET") {
      response.writeHead(200, { "content-type": "application/json" });
      response.end(JSON.stringify(stats));
      return;
    }
    if (request.url === "/stats/reset" && request.method === "POST") {
      resetStats();
      response.writeHead(204);
      response.end();
      return;
    }
    const body = Buffer.concat(chunks);
    count(body.toString("utf8"));
    later(() => {
      const forwarded = http.request(
        {
          agent,
          host: upstream.hostname,
          port: upstream.port,
          path: upstream.pathname,
          method: "POST",
          headers: { "content-type": "application/json", "content-length": body.length },
        },
        (answer) => {
          const answerChunks = [];
          answer.on("data", (chunk) => answerChunks.push(chunk));
          answer.on("end", () =>
            later(() => {
              response.writeHead(answer.statusCode ?? 502, {
                "content-type": answer.headers["content-type"] ?? "application/json",
              });
              response.end(Buffer.concat(answerChunks));
            }),
          );
        },
      );
      forwarded.on("error", (error) => {
        response.writeHead(502, { "content-type": "text/plain" });
        response.end(`rpc-latency-proxy: the node did not answer: ${error.code ?? error.message}`);
      });
      forwarded.end(body);
    });
  });
});
server.keepAliveTimeout = 65_000;
server.listen(Number(port), "127.0.0.1", () => {
  console.error(`rpc-latency-proxy: 127.0.0.1:${port} -> ${upstream.host}, ${delayMs} ms each way`);
});
