#!/usr/bin/env node
// fleet.mjs holds N sessions of the official TypeScript SDK client open over
// streamable HTTP and runs them on command, so that a Go test can change
// the world between two rounds (kill a replica, reload a config) and see
// what every session saw. It is the peer of integration/gateway/fleet_test.go.
//
// Usage: node client/fleet.mjs <url>
//
// Commands, one JSON object per line on stdin; each is answered by one JSON
// line on stdout:
//   {"cmd":"open","n":20}        → {"sessions":[{"index","sessionId","error"?}]}
//                                  opens n sessions (initialize) concurrently
//   {"cmd":"round","calls":5,"tool":"whoami","only":[i…]?}
//                                → {"results":[{"index","sessionId","ok",
//                                     "texts":[…],"tools":N,"error"?,"ms"}]}
//                                  each session (or those in "only"), all
//                                  concurrently: tools/list, then "calls"
//                                  calls of "tool" one after the other; a
//                                  session stops at its first error
//   {"cmd":"reopen","only":[i…]} → like open, for those sessions: the old
//                                  transport is dropped, a new one initializes
//   {"cmd":"close"}              → {"closed":true}, then the process exits
// A command that cannot be run is answered {"fatal":"…"} and ends the
// process with status 2.

import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = process.argv[2];
if (!url) {
  console.log(JSON.stringify({ fatal: "usage: fleet.mjs <url>" }));
  process.exit(2);
}

const timeout = 10000; // per request
const sessions = []; // index → {client, transport}

function errorInfo(e) {
  return { name: e?.constructor?.name ?? "Error", code: e?.code ?? null, message: String(e?.message ?? e) };
}

async function open(index) {
  const old = sessions[index];
  if (old) {
    // The server may be gone: drop the transport without waiting on it.
    old.transport.close().catch(() => {});
  }
  const transport = new StreamableHTTPClientTransport(new URL(url));
  const client = new Client({ name: "viewmux-fleet", version: "1.0.0" }, { capabilities: {} });
  client.onerror = () => {}; // a dead replica's stream errors are expected
  sessions[index] = { client, transport };
  try {
    await client.connect(transport, { timeout });
    return { index, sessionId: transport.sessionId ?? null };
  } catch (e) {
    return { index, sessionId: null, error: errorInfo(e) };
  }
}

async function round(index, calls, tool) {
  const s = sessions[index];
  const out = { index, sessionId: s.transport.sessionId ?? null, ok: false, texts: [], tools: 0 };
  const start = performance.now();
  try {
    const listed = await s.client.listTools(undefined, { timeout });
    out.tools = listed.tools.length;
    for (let i = 0; i < calls; i++) {
      const res = await s.client.callTool({ name: tool, arguments: {} }, undefined, { timeout });
      out.texts.push(res.content?.[0]?.text ?? "");
    }
    out.ok = true;
  } catch (e) {
    out.error = errorInfo(e);
  }
  out.ms = Math.round(performance.now() - start);
  return out;
}

function indices(cmd) {
  return Array.isArray(cmd.only) ? cmd.only : sessions.map((_, i) => i);
}

async function handle(cmd) {
  switch (cmd.cmd) {
    case "open": {
      const start = sessions.length;
      const all = Array.from({ length: cmd.n }, (_, i) => open(start + i));
      return { sessions: await Promise.all(all) };
    }
    case "reopen":
      return { sessions: await Promise.all(indices(cmd).map(open)) };
    case "round":
      return { results: await Promise.all(indices(cmd).map((i) => round(i, cmd.calls ?? 1, cmd.tool))) };
    case "close":
      await Promise.all(sessions.map((s) => s.transport.terminateSession().catch(() => {}).then(() => s.client.close())));
      return { closed: true };
    default:
      throw new Error(`unknown command ${JSON.stringify(cmd.cmd)}`);
  }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (line.trim() === "") continue;
  let cmd;
  try {
    cmd = JSON.parse(line);
    const answer = await handle(cmd);
    console.log(JSON.stringify(answer));
    if (cmd.cmd === "close") process.exit(0);
  } catch (e) {
    console.log(JSON.stringify({ fatal: String(e?.message ?? e) }));
    process.exit(2);
  }
}
process.exit(0);
