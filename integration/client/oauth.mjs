#!/usr/bin/env node
// oauth.mjs connects the official TypeScript SDK client to an MCP server
// that requires OAuth, with nothing but client credentials: the SDK finds
// the authorization server itself (the 401's resource_metadata, Protected
// Resource Metadata, the server's metadata), gets a token with the
// client_credentials grant, and retries. It lists the tools and prints ONE
// JSON object on stdout: {"ok": true, "tools": [...]} or
// {"ok": false, "error": "..."}.
//
// Input (stdin, JSON):
//   {"url": "http://127.0.0.1:8931/mcp", "transport": "http" | "sse",
//    "clientId": "...", "clientSecret": "...", "scope": "mcp:tools",
//    "issuer": "http://127.0.0.1:4444",   // the issuer the SDK must find
//    "audience": "..."}                   // sent as the token request's
//                                         // audience, which Hydra needs
//                                         // (it does not read RFC 8707's
//                                         // resource parameter)
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { ClientCredentialsProvider } from "@modelcontextprotocol/sdk/client/auth-extensions.js";

const input = JSON.parse(readFileSync(0, "utf8"));

class AudienceProvider extends ClientCredentialsProvider {
  prepareTokenRequest(scope) {
    const params = super.prepareTokenRequest(scope ?? input.scope);
    if (input.audience) params.set("audience", input.audience);
    return params;
  }
}

const authProvider = new AudienceProvider({
  clientId: input.clientId,
  clientSecret: input.clientSecret,
  scope: input.scope,
  expectedIssuer: input.issuer,
});

async function connect(transport) {
  const client = new Client({ name: "viewmux-oauth-test", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

function newTransport() {
  const url = new URL(input.url);
  return input.transport === "sse"
    ? new SSEClientTransport(url, { authProvider })
    : new StreamableHTTPClientTransport(url, { authProvider });
}

try {
  let client;
  try {
    client = await connect(newTransport());
  } catch (err) {
    // The SSE transport answers a 401 by authorizing and throwing
    // UnauthorizedError; with the token saved, a new connection succeeds.
    if (err?.name !== "UnauthorizedError" && !String(err).includes("Unauthorized")) throw err;
    client = await connect(newTransport());
  }
  const { tools } = await client.listTools();
  const tokens = authProvider.tokens();
  process.stdout.write(JSON.stringify({ ok: true, tools: tools.map((t) => t.name).sort(), gotToken: Boolean(tokens?.access_token) }) + "\n");
  await client.close();
} catch (err) {
  process.stdout.write(JSON.stringify({ ok: false, error: String(err?.stack ?? err) }) + "\n");
}
