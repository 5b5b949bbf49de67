// A loopback proxy that adds X-API-KEY to every request, because the
// conformance client sends no custom headers and /mcp refuses requests
// without a key. Host and Origin pass through unchanged, so the DNS-rebinding
// scenario still tests the server's own checks.
// Usage: DATA_API_KEY=... node keyproxy.mjs <listen port> <server port>
import http from "node:http";

const [listenPort, serverPort] = process.argv.slice(2).map(Number);
http
  .createServer((request, response) => {
    const headers = { ...request.headers, "x-api-key": process.env.DATA_API_KEY };
    const upstream = http.request(
      { host: "127.0.0.1", port: serverPort, method: request.method, path: request.url, headers },
      (answer) => {
        response.writeHead(answer.statusCode, answer.headers);
        answer.pipe(response);
      },
    );
    upstream.on("error", () => {
      response.writeHead(502);
      response.end();
    });
    request.pipe(upstream);
  })
  .listen(listenPort, "127.0.0.1");
