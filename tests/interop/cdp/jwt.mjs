// The official CDP SDK's facilitator JWT for one call, decoded: prints one
// JSON line {header, claims} (never the signed token). The key comes from
// CDP_KEY_ID and CDP_KEY_SECRET (a throwaway test key).
//
// usage: node jwt.mjs <METHOD> <host> <path>
import { generateJwt } from "@coinbase/cdp-sdk/auth";

const [requestMethod, requestHost, requestPath] = process.argv.slice(2);
const jwt = await generateJwt({
  apiKeyId: process.env.CDP_KEY_ID,
  apiKeySecret: process.env.CDP_KEY_SECRET,
  requestMethod,
  requestHost,
  requestPath,
});
const [header, claims] = jwt
  .split(".")
  .slice(0, 2)
  .map((part) => JSON.parse(Buffer.from(part, "base64url").toString("utf8")));
console.log(JSON.stringify({ header, claims }));
