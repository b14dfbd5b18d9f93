#!/usr/bin/env node
// fidelity-big.mjs calls one tool with the official TypeScript SDK client
// and checks that its result is one text block of exactly "bytes" bytes of
// the pattern fidelity_mcpgo_test.go's big tool writes (each 16-byte block
// is its own offset in 15 hex digits and a dot). It prints one JSON object:
// {"ok": true|false, "bytes": N, "error"?: "..."}. The fidelity matrix uses
// it for its 50 MB cell: the SDK client in Node reads such a result in well
// under a second, where a Go client under the race detector takes tens.
//
// Usage: echo '<script JSON>' | node client/fidelity-big.mjs
// Script: {"transport": "http"|"sse"|"ws"|"stdio", "url"?, "command"?,
//          "args"?, "env"?, "tool", "arguments", "bytes", "timeoutMs"?}

import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { WebSocketClientTransport } from "@modelcontextprotocol/sdk/client/websocket.js";

async function transport(s) {
  switch (s.transport) {
    case "sse":
      return new SSEClientTransport(new URL(s.url));
    case "ws":
      if (globalThis.WebSocket === undefined) {
        globalThis.WebSocket = (await import("undici")).WebSocket;
      }
      return new WebSocketClientTransport(new URL(s.url));
    case "stdio":
      return new StdioClientTransport({
        command: s.command,
        args: s.args ?? [],
        env: { ...process.env, ...(s.env ?? {}) },
        stderr: "inherit",
        // The SDK reads at most 10 MiB per message by default.
        maxBufferSize: 2 * (s.bytes ?? 0) + (1 << 20),
      });
    default:
      return new StreamableHTTPClientTransport(new URL(s.url));
  }
}

function check(text, n) {
  if (typeof text !== "string") return "the result has no text block";
  if (text.length !== n) return `${text.length} bytes of text, want ${n}`;
  for (const off of [0, (n >> 1) & ~15, (n - 16) & ~15]) {
    if (off + 16 > n) continue;
    const want = off.toString(16).padStart(15, "0") + ".";
    if (text.slice(off, off + 16) !== want) {
      return `bytes ${off}..${off + 16} are ${JSON.stringify(text.slice(off, off + 16))}, want ${JSON.stringify(want)}`;
    }
  }
  return null;
}

async function main() {
  const s = JSON.parse(readFileSync(0, "utf8"));
  const out = { ok: false, bytes: 0 };
  const client = new Client({ name: "viewmux-fidelity-big", version: "1.0.0" }, { capabilities: {} });
  try {
    await client.connect(await transport(s));
    const res = await client.callTool(
      { name: s.tool, arguments: s.arguments ?? {} },
      undefined,
      { timeout: s.timeoutMs ?? 120000 },
    );
    const texts = (res.content ?? []).filter((c) => c.type === "text");
    out.bytes = texts.reduce((n, c) => n + c.text.length, 0);
    const problem = res.isError
      ? `isError result: ${String(texts[0]?.text).slice(0, 300)}`
      : texts.length !== 1
        ? `${texts.length} text blocks, want 1`
        : check(texts[0].text, s.bytes);
    if (problem) out.error = problem;
    else out.ok = true;
  } catch (e) {
    out.error = String(e?.message ?? e);
  } finally {
    try {
      await client.close();
    } catch {
      // the result is what matters
    }
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ ok: false, bytes: 0, error: String(e?.stack ?? e) }) + "\n");
});
