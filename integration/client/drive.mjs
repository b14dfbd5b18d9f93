#!/usr/bin/env node
// drive.mjs runs a scripted MCP client session (or several at once) with the
// official TypeScript SDK client over streamable HTTP and prints ONE JSON
// object on stdout describing what happened. The Go integration tests use it
// as a real, independent peer: viewmux's own code never builds these requests.
//
// Usage:
//   node client/drive.mjs '<script JSON>'
//   node client/drive.mjs path/to/script.json
//   echo '<script JSON>' | node client/drive.mjs
//
// Script:
//   {
//     "url": "http://127.0.0.1:8931/mcp",      // required (except for stdio)
//     "transport": "http",                      // optional: "http" (streamable HTTP, the
//                                               // default), "sse" (legacy HTTP+SSE: url is
//                                               // the /sse stream), "ws" (websocket, url
//                                               // ws://…/ws; it cannot send headers, so
//                                               // name the profile in the query), or
//                                               // "stdio" (spawn "command" with "args",
//                                               // the process environment plus "env",
//                                               // in "cwd"; no url)
//     "headers": {"Mcp-Profile": "readonly"},  // optional, sent on every HTTP request
//     "clients": 1,                             // optional, N sessions run concurrently
//     "timeoutMs": 30000,                       // optional, per-request timeout
//     "terminate": false,                       // optional, DELETE the session at the end
//     "elicitation": {"action": "accept",       // optional: declare form elicitation and answer
//                     "content": {...}},        // every elicitation/create with this action
//                                               // and content; action "never" leaves each
//                                               // unanswered. {"answers": [{action, content},
//                                               // ...]} instead answers them in turn, the last
//                                               // one repeated. Each request is recorded in the
//                                               // client's "elicitations" as {message,
//                                               // requestedSchema, mode, withdrawn?: the
//                                               // reason, when the server cancelled it}
//     "steps": [ {"op": "list"}, ... ]
//   }
//
// Or, for sessions that each need their own URL, headers and steps, all run
// concurrently in this one process (instead of "clients" and "steps"):
//   {
//     "url": "...", "headers": {...},           // defaults for every session
//     "sessions": [
//       {"url"?: "...?profile=readonly", "headers"?: {...}, "steps": [...]},
//       ...
//     ]
//   }
// A session's "url" and "headers" replace the script's (headers are not
// merged). Client i of the output is session i.
//
// Every string inside a step (tool name, arguments, uri, ...) has "{{client}}"
// replaced by the client's index (0-based), so N concurrent clients can send
// distinguishable requests from one script.
//
// Steps (any step may carry "expectError": true; "callExpectError" is "call"
// with expectError):
//   {"op":"list"}                                  → {tools:[...as returned], names:[...], pages}
//   {"op":"call", "name", "args", "meta"?, "progress"?, "raw"?}
//                                                  → {result} (raw: skip the SDK's output-schema check)
//   {"op":"callExpectError", "name", "args"}       → {error:{code,message,data?}}
//   {"op":"listPrompts"}                           → {prompts:[...], names:[...], pages}
//   {"op":"getPrompt", "name", "args"?}            → {result}
//   {"op":"listResources"}                         → {resources:[...], uris:[...], pages}
//   {"op":"listResourceTemplates"}                 → {resourceTemplates:[...], pages}
//   {"op":"readResource", "uri"}                   → {result}
//   {"op":"ping"}                                  → {result}
//   {"op":"request", "method", "params"?}          → {result} (any method, result unchecked)
//   {"op":"sleep", "ms"}                           → {}
//   {"op":"waitNotification", "method", "timeoutMs"?}
//                                                  → {notification} (each wait consumes one)
//   {"op":"expectNoNotification", "method", "ms"}  → {} after ms; fails as soon as an
//                                                    unconsumed notification of method is seen
//                                                    (including one that came before the step)
//   {"op":"barrier", "name", "timeoutMs"?}         → {} once every client whose steps contain
//                                                    a barrier of that name has reached it;
//                                                    fails if one of them stops first, or
//                                                    after timeoutMs (default 30000)
//
// Output:
//   {"ok": true|false, "clients": [{"index", "sessionId", "protocolVersion",
//     "serverInfo", "serverCapabilities", "instructions", "steps": [...],
//     "notifications": [{"method","params"}], "elicitations"?: [...], "error"?,
//     "exit"?: {"code", "signal", "afterCloseMs"}}]}
// "exit" (stdio only) is how the server process ended once the client
// closed its stdin, and how long after.
// Each step result repeats "op" (and "name"/"uri" when given) and has "ok".
// Errors are {"kind": "jsonrpc"|"http"|"other", "code", "message", "data"?};
// a JSON-RPC error's message is exactly what the server sent (the SDK's
// "MCP error N: " prefix is removed).
//
// Exit status: 0 when every step did what it expected; 1 when any client hit
// an unexpected failure (the JSON is still printed, the reason goes to
// stderr); 2 for an unusable script. A client stops at its first unexpected
// failure; the other clients go on.

import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { WebSocketClientTransport } from "@modelcontextprotocol/sdk/client/websocket.js";
import {
  CallToolResultSchema,
  ElicitRequestSchema,
  McpError,
  ResultSchema,
} from "@modelcontextprotocol/sdk/types.js";

class ScriptError extends Error {}

function readScript() {
  const arg = process.argv[2];
  let text;
  if (arg === undefined || arg === "-") {
    text = readFileSync(0, "utf8");
  } else if (arg.trimStart().startsWith("{")) {
    text = arg;
  } else {
    text = readFileSync(arg, "utf8");
  }
  let script;
  try {
    script = JSON.parse(text);
  } catch (e) {
    throw new ScriptError(`script is not JSON: ${e.message}`);
  }
  if (typeof script !== "object" || script === null) {
    throw new ScriptError("script must be a JSON object");
  }
  const clients = script.clients ?? 1;
  if (!Number.isInteger(clients) || clients < 1) {
    throw new ScriptError('"clients" must be a positive integer');
  }
  // plans[i] is what client i runs: its url, headers and steps.
  let plans;
  if (script.sessions !== undefined && script.sessions !== null) {
    if (!Array.isArray(script.sessions) || script.sessions.length === 0) {
      throw new ScriptError('"sessions" must be a non-empty array');
    }
    if (clients !== 1) {
      throw new ScriptError('"clients" and "sessions" cannot be combined');
    }
    if (Array.isArray(script.steps) && script.steps.length > 0) {
      throw new ScriptError('"steps" and "sessions" cannot be combined');
    }
    plans = script.sessions.map((sess, i) => {
      if (typeof sess !== "object" || sess === null) {
        throw new ScriptError(`session ${i} must be an object`);
      }
      const url = sess.url ?? script.url;
      if (needsURL(script) && (typeof url !== "string" || url === "")) {
        throw new ScriptError(`session ${i} has no "url"`);
      }
      if (!Array.isArray(sess.steps)) {
        throw new ScriptError(`session ${i} needs "steps" (an array)`);
      }
      return { url, headers: sess.headers ?? script.headers, steps: sess.steps };
    });
  } else {
    if (needsURL(script) && (typeof script.url !== "string" || script.url === "")) {
      throw new ScriptError('script needs "url"');
    }
    if (!Array.isArray(script.steps)) {
      throw new ScriptError('script needs "steps" (an array)');
    }
    plans = Array.from({ length: clients }, () => ({
      url: script.url,
      headers: script.headers,
      steps: script.steps,
    }));
  }
  checkTransport(script, plans);
  plans.forEach((plan, c) => {
    const where = script.sessions ? `session ${c} ` : "";
    const barriers = new Set();
    plan.steps.forEach((s, i) => {
      if (typeof s !== "object" || s === null || typeof s.op !== "string") {
        throw new ScriptError(`${where}step ${i} needs "op"`);
      }
      if (!(s.op in OPS)) {
        throw new ScriptError(`${where}step ${i}: unknown op ${JSON.stringify(s.op)}`);
      }
      if (s.op === "barrier") {
        if (typeof s.name !== "string" || s.name === "") {
          throw new ScriptError(`${where}step ${i}: barrier needs "name"`);
        }
        if (barriers.has(s.name)) {
          throw new ScriptError(`${where}step ${i}: barrier ${JSON.stringify(s.name)} used twice`);
        }
        barriers.add(s.name);
      }
    });
  });
  return { ...script, clients: plans.length, plans };
}

// Barriers make concurrent clients wait for each other. A barrier named N
// is expected by every client whose steps contain a barrier step named N;
// it opens when all of them have arrived, and breaks when one of them stops
// (unexpected failure, or its steps ended) without arriving.
class Barriers {
  constructor(plans) {
    this.byName = new Map();
    plans.forEach((plan, c) => {
      for (const raw of plan.steps) {
        if (raw.op !== "barrier") continue;
        const s = substitute(raw, c);
        if (!this.byName.has(s.name)) {
          let open, broke;
          const done = new Promise((res, rej) => {
            open = res;
            broke = rej;
          });
          done.catch(() => {}); // a barrier nobody waits on may break quietly
          this.byName.set(s.name, {
            expected: new Set(),
            arrived: new Set(),
            done,
            open,
            broke,
            settled: false,
          });
        }
        this.byName.get(s.name).expected.add(c);
      }
    });
  }

  // arrive records client c at barrier name and waits for it to open.
  async arrive(name, c, timeoutMs) {
    const b = this.byName.get(name);
    b.arrived.add(c);
    if (!b.settled && b.arrived.size === b.expected.size) {
      b.settled = true;
      b.open();
    }
    let timer;
    const timeout = new Promise((_, rej) => {
      timer = setTimeout(() => {
        const missing = [...b.expected].filter((x) => !b.arrived.has(x));
        rej(new Error(`barrier ${JSON.stringify(name)}: clients ${missing.join(", ")} did not arrive within ${timeoutMs}ms`));
      }, timeoutMs);
    });
    try {
      await Promise.race([b.done, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  // leave breaks every barrier client c expected but never reached.
  leave(c, why) {
    for (const [name, b] of this.byName) {
      if (b.settled || !b.expected.has(c) || b.arrived.has(c)) continue;
      b.settled = true;
      b.broke(new Error(`barrier ${JSON.stringify(name)} broken: client ${c} stopped before reaching it (${why})`));
    }
  }
}

// substitute replaces "{{client}}" in every string of v, recursively.
function substitute(v, index) {
  if (typeof v === "string") return v.replaceAll("{{client}}", String(index));
  if (Array.isArray(v)) return v.map((x) => substitute(x, index));
  if (v !== null && typeof v === "object") {
    return Object.fromEntries(
      Object.entries(v).map(([k, x]) => [k, substitute(x, index)]),
    );
  }
  return v;
}

// errorInfo turns anything thrown by the SDK into plain JSON.
function errorInfo(e) {
  if (e instanceof McpError) {
    const prefix = `MCP error ${e.code}: `;
    const message = e.message.startsWith(prefix)
      ? e.message.slice(prefix.length)
      : e.message;
    const out = { kind: "jsonrpc", code: e.code, message };
    if (e.data !== undefined) out.data = e.data;
    return out;
  }
  if (e instanceof StreamableHTTPError) {
    return { kind: "http", code: e.code ?? null, message: e.message };
  }
  return {
    kind: "other",
    code: e?.code ?? null,
    message: String(e?.message ?? e),
  };
}

// listAll follows nextCursor until the server stops paginating.
async function listAll(fetchPage, key) {
  const items = [];
  let cursor;
  let pages = 0;
  do {
    const page = await fetchPage(cursor === undefined ? {} : { cursor });
    pages++;
    items.push(...(page[key] ?? []));
    cursor = page.nextCursor;
    if (pages > 10000) throw new Error(`${key}: more than 10000 pages`);
  } while (cursor !== undefined && cursor !== null);
  return { items, pages };
}

// OPS maps each op to a function(session, step) returning the fields that
// describe its outcome. A throw is the step's error.
const OPS = {
  async list(s) {
    const { items, pages } = await listAll(
      (p) => s.client.listTools(p, s.opts),
      "tools",
    );
    return { tools: items, names: items.map((t) => t.name), pages };
  },
  async call(s, step) {
    const params = { name: step.name, arguments: step.args ?? {} };
    if (step.meta !== undefined) params._meta = step.meta;
    const progress = [];
    const opts = { ...s.opts };
    if (step.progress) opts.onprogress = (p) => progress.push(p);
    const result = step.raw
      ? await s.client.request(
          { method: "tools/call", params },
          CallToolResultSchema,
          opts,
        )
      : await s.client.callTool(params, CallToolResultSchema, opts);
    return step.progress ? { result, progress } : { result };
  },
  async callExpectError(s, step) {
    return OPS.call(s, step);
  },
  async listPrompts(s) {
    const { items, pages } = await listAll(
      (p) => s.client.listPrompts(p, s.opts),
      "prompts",
    );
    return { prompts: items, names: items.map((p) => p.name), pages };
  },
  async getPrompt(s, step) {
    const params = { name: step.name };
    if (step.args !== undefined) params.arguments = step.args;
    return { result: await s.client.getPrompt(params, s.opts) };
  },
  async listResources(s) {
    const { items, pages } = await listAll(
      (p) => s.client.listResources(p, s.opts),
      "resources",
    );
    return { resources: items, uris: items.map((r) => r.uri), pages };
  },
  async listResourceTemplates(s) {
    const { items, pages } = await listAll(
      (p) => s.client.listResourceTemplates(p, s.opts),
      "resourceTemplates",
    );
    return { resourceTemplates: items, pages };
  },
  async readResource(s, step) {
    return { result: await s.client.readResource({ uri: step.uri }, s.opts) };
  },
  async ping(s) {
    return { result: await s.client.ping(s.opts) };
  },
  async request(s, step) {
    const req = { method: step.method };
    if (step.params !== undefined) req.params = step.params;
    return { result: await s.client.request(req, ResultSchema, s.opts) };
  },
  async sleep(_s, step) {
    await new Promise((r) => setTimeout(r, step.ms ?? 0));
    return {};
  },
  async expectNoNotification(s, step) {
    const deadline = Date.now() + (step.ms ?? 0);
    for (;;) {
      const n = s.notifications.find(
        (n, j) => n.method === step.method && !s.consumed.has(j),
      );
      if (n !== undefined) {
        throw new Error(
          `unexpected ${step.method} notification: ${JSON.stringify(n.params ?? null)}`,
        );
      }
      if (Date.now() >= deadline) return {};
      await new Promise((r) => setTimeout(r, Math.min(20, Math.max(0, deadline - Date.now()))));
    }
  },
  async barrier(s, step) {
    await s.barriers.arrive(step.name, s.out.index, step.timeoutMs ?? 30000);
    return {};
  },
  async waitNotification(s, step) {
    const deadline = Date.now() + (step.timeoutMs ?? 10000);
    for (;;) {
      const i = s.notifications.findIndex(
        (n, j) => n.method === step.method && !s.consumed.has(j),
      );
      if (i >= 0) {
        s.consumed.add(i);
        return { notification: s.notifications[i] };
      }
      if (Date.now() >= deadline) {
        throw new Error(
          `no ${step.method} notification within ${step.timeoutMs ?? 10000}ms`,
        );
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  },
};

// --- transports ---

const TRANSPORTS = ["http", "sse", "ws", "stdio"];

function needsURL(script) {
  return (script.transport ?? "http") !== "stdio";
}

function checkTransport(script, plans) {
  const t = script.transport ?? "http";
  if (!TRANSPORTS.includes(t)) {
    throw new ScriptError(`unknown transport ${JSON.stringify(t)} (want one of ${TRANSPORTS.join(", ")})`);
  }
  if (t === "ws" && plans.some((p) => p.headers && Object.keys(p.headers).length > 0)) {
    throw new ScriptError('the websocket transport cannot send headers: name the profile in the url ("?profile=…")');
  }
  if (t === "stdio") {
    if (typeof script.command !== "string" || script.command === "") {
      throw new ScriptError('transport "stdio" needs "command"');
    }
    if (script.args !== undefined && !Array.isArray(script.args)) {
      throw new ScriptError('"args" must be an array');
    }
  }
}

// makeTransport builds the SDK's client transport the script asks for.
async function makeTransport(script, plan) {
  const requestInit = plan.headers ? { headers: plan.headers } : undefined;
  switch (script.transport ?? "http") {
    case "sse":
      return new SSEClientTransport(new URL(plan.url), { requestInit });
    case "ws":
      // The SDK uses the global WebSocket, which Node has without a flag
      // from version 22; undici (an SDK dependency) supplies it on Node 20.
      if (globalThis.WebSocket === undefined) {
        globalThis.WebSocket = (await import("undici")).WebSocket;
      }
      return new WebSocketClientTransport(new URL(plan.url));
    case "stdio":
      return new StdioClientTransport({
        command: script.command,
        args: script.args ?? [],
        env: { ...process.env, ...(script.env ?? {}) },
        cwd: script.cwd,
        stderr: "inherit", // the server's logs go to the driver's stderr
      });
    default:
      return new StreamableHTTPClientTransport(new URL(plan.url), { requestInit });
  }
}

// watchExit records, for a stdio server, how its process ends: s.exited
// resolves to {code, signal, afterCloseMs} (afterCloseMs counts from the
// start of client.close(), which first closes the server's stdin).
function watchExit(s) {
  // The SDK keeps the child in a private field; the driver needs its exit
  // status to show the server stops by itself when stdin closes.
  const child = s.transport._process;
  if (!child) return;
  s.exited = new Promise((resolve) => {
    child.once("exit", (code, signal) => {
      resolve({ code, signal, afterCloseMs: s.closedAt ? Date.now() - s.closedAt : null });
    });
  });
}

function describe(step) {
  const out = { op: step.op };
  if (step.name !== undefined) out.name = step.name;
  if (step.uri !== undefined) out.uri = step.uri;
  if (step.method !== undefined) out.method = step.method;
  return out;
}

// connect opens one session. It never throws: a failure is recorded.
async function connect(script, index, barriers) {
  const plan = script.plans[index];
  const out = { index, steps: [], notifications: [] };
  const s = {
    out,
    plan,
    barriers,
    notifications: out.notifications,
    consumed: new Set(),
    opts: { timeout: script.timeoutMs ?? 30000 },
  };
  s.transport = await makeTransport(script, plan);
  const elicitation = script.elicitation;
  s.client = new Client(
    { name: "viewmux-integration-driver", version: "1.0.0" },
    { capabilities: elicitation ? { elicitation: { form: {} } } : {} },
  );
  if (elicitation) {
    out.elicitations = [];
    s.client.setRequestHandler(ElicitRequestSchema, async (req, extra) => {
      const p = req.params;
      const rec = { message: p.message, requestedSchema: p.requestedSchema ?? null, mode: p.mode ?? null };
      out.elicitations.push(rec);
      // The server withdrew the request (notifications/cancelled).
      extra.signal.addEventListener("abort", () => {
        rec.withdrawn = String(extra.signal.reason?.message ?? extra.signal.reason ?? "withdrawn");
      });
      const answers = elicitation.answers ?? [elicitation];
      const a = answers[Math.min(out.elicitations.length - 1, answers.length - 1)];
      if (a.action === "never") return new Promise(() => {});
      const res = { action: a.action ?? "accept" };
      if (a.content !== undefined) res.content = a.content;
      return res;
    });
  }
  s.client.fallbackNotificationHandler = async (n) => {
    s.notifications.push({ method: n.method, params: n.params });
  };
  try {
    await s.client.connect(s.transport, s.opts);
    out.sessionId = s.transport.sessionId ?? null;
    out.protocolVersion = s.transport.protocolVersion ?? null;
    out.serverInfo = s.client.getServerVersion() ?? null;
    out.serverCapabilities = s.client.getServerCapabilities() ?? null;
    out.instructions = s.client.getInstructions() ?? null;
    watchExit(s);
  } catch (e) {
    out.error = { stage: "connect", ...errorInfo(e) };
  }
  return s;
}

// run executes the steps of one session, stopping at the first unexpected
// failure, then closes the session.
async function run(script, s) {
  const { out } = s;
  if (!out.error) {
    for (const raw of s.plan.steps) {
      const step = substitute(raw, out.index);
      const expectError = step.expectError === true || step.op === "callExpectError";
      const rec = { ...describe(step) };
      out.steps.push(rec);
      try {
        Object.assign(rec, await OPS[step.op](s, step));
        if (expectError) {
          rec.ok = false;
          out.error = {
            stage: `step ${out.steps.length - 1} (${step.op})`,
            kind: "unexpected",
            message: "expected an error, got a result",
          };
          break;
        }
        rec.ok = true;
      } catch (e) {
        rec.error = errorInfo(e);
        if (expectError) {
          rec.ok = true;
          continue;
        }
        rec.ok = false;
        out.error = { stage: `step ${out.steps.length - 1} (${step.op})`, ...rec.error };
        break;
      }
    }
  }
  s.barriers.leave(out.index, out.error ? `${out.error.stage}: ${out.error.message}` : "its steps ended");
  try {
    if (script.terminate && s.transport.sessionId) await s.transport.terminateSession();
  } catch (e) {
    out.error ??= { stage: "terminate", ...errorInfo(e) };
  }
  try {
    s.closedAt = Date.now();
    await s.client.close();
    if (s.exited) out.exit = await s.exited;
  } catch (e) {
    out.error ??= { stage: "close", ...errorInfo(e) };
  }
}

async function main() {
  let script;
  try {
    script = readScript();
  } catch (e) {
    process.stderr.write(`drive.mjs: ${e.message}\n`);
    process.exitCode = 2;
    return;
  }
  // Connect every client before any runs a step, so N clients really
  // overlap instead of finishing one by one.
  const barriers = new Barriers(script.plans);
  const sessions = await Promise.all(
    Array.from({ length: script.clients }, (_, i) => connect(script, i, barriers)),
  );
  await Promise.all(sessions.map((s) => run(script, s)));
  const clients = sessions.map((s) => s.out);
  const failed = clients.filter((c) => c.error);
  process.stdout.write(JSON.stringify({ ok: failed.length === 0, clients }) + "\n");
  for (const c of failed) {
    process.stderr.write(
      `drive.mjs: client ${c.index}: ${c.error.stage}: ${c.error.message}` +
        (c.error.code !== undefined && c.error.code !== null ? ` (code ${c.error.code})` : "") +
        "\n",
    );
  }
  process.exitCode = failed.length === 0 ? 0 : 1;
}

main().catch((e) => {
  process.stderr.write(`drive.mjs: ${e?.stack ?? e}\n`);
  process.exitCode = 1;
});
