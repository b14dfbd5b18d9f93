#!/usr/bin/env node
// protocol.mjs runs one named protocol scenario with the official TypeScript
// SDK client and prints ONE JSON object on stdout describing what it saw. The
// Go tests in protocol_test.go use it to exercise what viewmux relays besides
// tools/list and tools/call: server→client requests (sampling, elicitation,
// roots), progress, cancellation, resource links and subscriptions, prompts,
// completion and logging.
//
// Every scenario runs the same against viewmux or directly against an MCP
// server, so a failure through viewmux can be compared with the server alone.
//
// Usage:
//   node client/protocol.mjs <scenario> '<params JSON>'
//   node client/protocol.mjs <scenario> path/to/params.json
//   echo '<params JSON>' | node client/protocol.mjs <scenario>
//
// Common params:
//   "url": "http://127.0.0.1:8931/mcp"   streamable HTTP endpoint, or
//   "command": ["node", "server.js"]     direct mode over stdio: this argv is
//                                        started once per client
//   "prefix": "every__"                  prepended to tool and prompt names
//                                        ("" when talking to the server itself)
//   "timeoutMs": 30000                   per-request timeout
//
// A client spec (params.client, or each entry of params.clients) may carry:
//   "prefix"       overrides params.prefix for this client
//   "sampling":    {"reply": "...", "model": "..."}   declare sampling and
//                  answer every sampling/createMessage with this text
//   "elicitation": {"action": "accept", "content": {...}}   declare form
//                  elicitation and answer every elicitation/create with this
//   "roots":       [{"uri": "file:///...", "name": "..."}]   declare roots and
//                  answer roots/list with these
//
// Scenarios (result fields in brackets):
//   calls          params.clients[i] also has "tool", "args", "progress": bool.
//                  All clients connect, then call their tool concurrently.
//                  [calls: [{result | error, t, seq (of the response),
//                  progress: [onprogress payloads], progressToken: the token
//                  the SDK put on the wire}]]
//   cancel         params.client, "tool", "args", "abortAfterProgress": n,
//                  "then": [{"tool", "args"}]. Calls the tool with progress and
//                  an AbortSignal, aborts once n progress notifications came,
//                  then makes the "then" calls one by one.
//                  [progressBeforeAbort, error, rejectedAfterMs, then: [{result | error}]]
//   resourceLinks  "count": n. Calls get-resource-links and reads every
//                  resource_link it returns. [call, reads: [{uri, result | error}]]
//   subscribe      "uri", "toggleTool", "quietMs". Client 0 subscribes to uri
//                  and calls toggleTool (start simulated updates), waits for
//                  notifications/resources/updated, unsubscribes, calls the
//                  tool twice more (stop, start: a start sends at once to
//                  current subscribers), waits quietMs and calls it once more
//                  (stop). Client 1 only stays connected.
//                  [updated: params | null, updatedAfterMs, afterUnsubscribe: [params]]
//   logging        "level", "toggleTool", "waitMs". Client 0 sets the level,
//                  calls toggleTool, waits for a notifications/message, and
//                  calls toggleTool again. Client 1 only stays connected.
//                  [message: params | null, toggles: [result | error]]
//   prompts        "get": [{"name", "args"}]. Lists prompts, gets each.
//                  [prompts: [...], names: [...], gets: [{result | error}]]
//   complete       "requests": [{"ref", "argument", "context"?}]; a ref/prompt
//                  name gets the prefix. [completions: [{result | error}]]
//
// Output:
//   {"ok": bool, "scenario": name, "result": {...}, "error"?: "...",
//    "clients": [{"index", "sessionId", "protocolVersion", "serverInfo",
//      "notifications": [{"t", "seq", "method", "params"}],   // as on the wire
//      "requests": [{"t", "seq", "method", "params"}]}]}      // server→client requests
// "t" is milliseconds since the scenario started; "seq" numbers the messages
// one client received, in order (a call's outcome carries its response's
// t and seq, so what came before the result can be told). The SDK hands
// notifications to their handlers a tick later than responses, so onprogress
// may miss a progress notification that arrived right before the result:
// judge progress by the wire. Errors are
// {"kind": "jsonrpc"|"http"|"other", "code", "message", "data"?}, a JSON-RPC
// message exactly as the server sent it.
//
// A call's outcome, good or bad, is an observation for the caller to judge:
// only a scenario that cannot run (a client cannot connect, bad params) is
// "ok": false. Exit status: 0 ok, 1 not ok, 2 unusable arguments.

import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema,
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  McpError,
} from "@modelcontextprotocol/sdk/types.js";

class UsageError extends Error {}

const started = Date.now();
const now = () => Date.now() - started;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// errorInfo turns anything the SDK throws into plain JSON.
function errorInfo(e) {
  if (e instanceof McpError) {
    const prefix = `MCP error ${e.code}: `;
    const message = e.message.startsWith(prefix) ? e.message.slice(prefix.length) : e.message;
    const out = { kind: "jsonrpc", code: e.code, message };
    if (e.data !== undefined) out.data = e.data;
    return out;
  }
  if (e instanceof StreamableHTTPError) {
    return { kind: "http", code: e.code ?? null, message: e.message };
  }
  return { kind: "other", code: e?.code ?? null, message: String(e?.message ?? e) };
}

// outcome runs fn and records its result or its error.
async function outcome(fn) {
  try {
    return { result: await fn() };
  } catch (e) {
    return { error: errorInfo(e) };
  }
}

// Tap sits between the SDK client and the real transport and records every
// message the server sends: notifications and server→client requests are
// what the scenarios assert on, exactly as they came over the wire. It also
// remembers the requests the client sent, to report the progress tokens the
// SDK chose.
class Tap {
  constructor(inner, rec) {
    this.inner = inner;
    this.rec = rec;
    inner.onmessage = (msg, extra) => {
      this.record(msg);
      this.onmessage?.(msg, extra);
    };
    inner.onclose = () => this.onclose?.();
    inner.onerror = (e) => this.onerror?.(e);
    if (typeof inner.setProtocolVersion === "function") {
      this.setProtocolVersion = (v) => inner.setProtocolVersion(v);
    }
  }
  record(msg) {
    const seq = this.rec.seq++;
    if (typeof msg.method !== "string") {
      this.rec.responses.set(String(msg.id), { t: now(), seq });
      return;
    }
    const entry = { t: now(), seq, method: msg.method, params: msg.params ?? null };
    if (msg.id === undefined) this.rec.notifications.push(entry);
    else this.rec.requests.push(entry);
  }
  get sessionId() {
    return this.inner.sessionId;
  }
  get protocolVersion() {
    return this.inner.protocolVersion;
  }
  start() {
    return this.inner.start();
  }
  send(msg, opts) {
    if (typeof msg.method === "string" && msg.id !== undefined) this.rec.sent.push(msg);
    return this.inner.send(msg, opts);
  }
  close() {
    return this.inner.close();
  }
}

// Session is one connected client and what it saw.
class Session {
  constructor(params, spec, index) {
    this.index = index;
    this.spec = spec ?? {};
    this.prefix = this.spec.prefix ?? params.prefix ?? "";
    this.opts = { timeout: params.timeoutMs ?? 30000 };
    // seq numbers every message received, in the order the transport
    // delivered them; responses maps a request id to its response's t, seq.
    this.rec = { seq: 0, notifications: [], requests: [], sent: [], responses: new Map() };
    this.out = { index };
  }

  async connect(params) {
    let inner;
    if (typeof params.url === "string") {
      inner = new StreamableHTTPClientTransport(new URL(params.url));
    } else {
      const [command, ...args] = params.command;
      inner = new StdioClientTransport({ command, args, stderr: "ignore" });
    }
    this.transport = new Tap(inner, this.rec);
    const capabilities = {};
    const { sampling, elicitation, roots } = this.spec;
    if (sampling) capabilities.sampling = {};
    if (elicitation) capabilities.elicitation = { form: {} };
    if (roots) capabilities.roots = { listChanged: true };
    this.client = new Client({ name: "viewmux-protocol-driver", version: "1.0.0" }, { capabilities });
    if (sampling) {
      this.client.setRequestHandler(CreateMessageRequestSchema, async () => ({
        role: "assistant",
        model: sampling.model ?? "protocol-driver-model",
        content: { type: "text", text: sampling.reply },
        stopReason: "endTurn",
      }));
    }
    if (elicitation) {
      this.client.setRequestHandler(ElicitRequestSchema, async () => {
        const res = { action: elicitation.action ?? "accept" };
        if (elicitation.content !== undefined) res.content = elicitation.content;
        return res;
      });
    }
    if (roots) {
      this.client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots }));
    }
    await this.client.connect(this.transport, this.opts);
    this.out.sessionId = this.transport.sessionId ?? null;
    this.out.protocolVersion = this.transport.protocolVersion ?? null;
    this.out.serverInfo = this.client.getServerVersion() ?? null;
  }

  name(n) {
    return this.prefix + n;
  }

  // call calls tool (unprefixed name) and records the outcome; with
  // progress, also the onprogress payloads and the token on the wire.
  async call(tool, args, { progress = false, signal } = {}) {
    const opts = { ...this.opts };
    const seen = [];
    if (progress) opts.onprogress = (p) => seen.push(p);
    if (signal) opts.signal = signal;
    const before = this.rec.sent.length;
    const res = await outcome(() =>
      this.client.callTool({ name: this.name(tool), arguments: args ?? {} }, CallToolResultSchema, opts),
    );
    const req = this.rec.sent.slice(before).find((m) => m.method === "tools/call");
    const answered = req && this.rec.responses.get(String(req.id));
    if (answered) Object.assign(res, { t: answered.t, seq: answered.seq });
    if (progress) {
      res.progress = seen;
      res.progressToken = req?.params?._meta?.progressToken ?? null;
    }
    return res;
  }

  // waitFor waits up to ms for a notification of method after index from
  // (of this session's notifications) that pred accepts.
  async waitFor(method, ms, from = 0, pred = () => true) {
    const deadline = Date.now() + ms;
    for (;;) {
      const n = this.rec.notifications.slice(from).find((x) => x.method === method && pred(x.params));
      if (n) return n;
      if (Date.now() >= deadline) return null;
      await sleep(20);
    }
  }

  report() {
    return { ...this.out, notifications: this.rec.notifications, requests: this.rec.requests };
  }

  async close() {
    try {
      if (this.transport?.inner instanceof StreamableHTTPClientTransport && this.transport.sessionId) {
        await this.transport.inner.terminateSession();
      }
    } catch {
      // the server may not support DELETE; closing is enough
    }
    await this.client?.close();
  }
}

// SCENARIOS map a name to async (params, sessions) → result. Sessions are
// created from params.clients (or params.client, or one plain client) and
// connected before the scenario starts.
const SCENARIOS = {
  async calls(params, sessions) {
    const calls = await Promise.all(
      sessions.map((s, i) => {
        const spec = params.clients[i];
        if (typeof spec.tool !== "string") throw new UsageError(`clients[${i}] needs "tool"`);
        return s.call(spec.tool, spec.args, { progress: spec.progress === true });
      }),
    );
    return { calls };
  },

  async cancel(params, [s]) {
    const want = params.abortAfterProgress ?? 1;
    const controller = new AbortController();
    const progressBeforeAbort = [];
    let abortedAt;
    const call = outcome(() =>
      s.client.callTool({ name: s.name(params.tool), arguments: params.args ?? {} }, CallToolResultSchema, {
        ...s.opts,
        signal: controller.signal,
        onprogress: (p) => {
          if (abortedAt !== undefined) return;
          progressBeforeAbort.push(p);
          if (progressBeforeAbort.length >= want) {
            abortedAt = Date.now();
            controller.abort("cancelled by protocol.mjs");
          }
        },
      }),
    );
    const res = await call;
    const out = { progressBeforeAbort, ...res };
    out.aborted = abortedAt !== undefined;
    if (abortedAt !== undefined) out.rejectedAfterMs = Date.now() - abortedAt;
    out.then = [];
    for (const c of params.then ?? []) out.then.push(await s.call(c.tool, c.args));
    return out;
  },

  async resourceLinks(params, [s]) {
    const call = await s.call("get-resource-links", { count: params.count ?? 3 });
    const reads = [];
    for (const block of call.result?.content ?? []) {
      if (block.type !== "resource_link") continue;
      reads.push({ uri: block.uri, ...(await outcome(() => s.client.readResource({ uri: block.uri }, s.opts))) });
    }
    return { call, reads };
  },

  async subscribe(params, [sub]) {
    const tool = params.toggleTool ?? "toggle-subscriber-updates";
    const uri = params.uri;
    const out = { toggles: [] };
    const match = (p) => p?.uri === uri;
    out.subscribe = await outcome(() => sub.client.subscribeResource({ uri }, sub.opts));
    const t0 = now();
    out.toggles.push(await sub.call(tool)); // start
    const n = await sub.waitFor("notifications/resources/updated", params.waitMs ?? 10000, 0, match);
    out.updated = n?.params ?? null;
    out.updatedAfterMs = n ? n.t - t0 : null;
    out.unsubscribe = await outcome(() => sub.client.unsubscribeResource({ uri }, sub.opts));
    const mark = sub.rec.notifications.length;
    out.toggles.push(await sub.call(tool)); // stop
    out.toggles.push(await sub.call(tool)); // start: sends at once to current subscribers
    await sleep(params.quietMs ?? 1000);
    out.toggles.push(await sub.call(tool)); // stop
    out.afterUnsubscribe = sub.rec.notifications
      .slice(mark)
      .filter((x) => x.method === "notifications/resources/updated")
      .map((x) => x.params);
    return out;
  },

  async logging(params, [s]) {
    const tool = params.toggleTool ?? "toggle-simulated-logging";
    const out = { toggles: [] };
    out.setLevel = await outcome(() => s.client.setLoggingLevel(params.level ?? "debug", s.opts));
    const mark = s.rec.notifications.length;
    out.toggles.push(await s.call(tool)); // start
    const n = await s.waitFor("notifications/message", params.waitMs ?? 10000, mark);
    out.message = n?.params ?? null;
    out.toggles.push(await s.call(tool)); // stop
    return out;
  },

  async prompts(params, [s]) {
    const prompts = [];
    let cursor;
    do {
      const page = await s.client.listPrompts(cursor === undefined ? {} : { cursor }, s.opts);
      prompts.push(...page.prompts);
      cursor = page.nextCursor;
    } while (cursor !== undefined && cursor !== null);
    const gets = [];
    for (const g of params.get ?? []) {
      const req = { name: s.name(g.name) };
      if (g.args !== undefined) req.arguments = g.args;
      gets.push(await outcome(() => s.client.getPrompt(req, s.opts)));
    }
    return { prompts, names: prompts.map((p) => p.name), gets };
  },

  async complete(params, [s]) {
    const completions = [];
    for (const r of params.requests ?? []) {
      const ref = r.ref?.type === "ref/prompt" ? { ...r.ref, name: s.name(r.ref.name) } : r.ref;
      const req = { ref, argument: r.argument };
      if (r.context !== undefined) req.context = r.context;
      completions.push(await outcome(() => s.client.complete(req, s.opts)));
    }
    return { completions };
  },
};

// Scenarios that need a second, idle client to show what it must NOT get.
const WITH_BYSTANDER = new Set(["subscribe", "logging"]);

function readArgs() {
  const [scenario, arg] = process.argv.slice(2);
  if (!(scenario in SCENARIOS)) {
    throw new UsageError(`unknown scenario ${JSON.stringify(scenario)}; one of ${Object.keys(SCENARIOS).join(", ")}`);
  }
  let text;
  if (arg === undefined || arg === "-") text = readFileSync(0, "utf8");
  else if (arg.trimStart().startsWith("{")) text = arg;
  else text = readFileSync(arg, "utf8");
  let params;
  try {
    params = JSON.parse(text);
  } catch (e) {
    throw new UsageError(`params are not JSON: ${e.message}`);
  }
  if (typeof params !== "object" || params === null) throw new UsageError("params must be a JSON object");
  const argv = params.command;
  const stdio = Array.isArray(argv) && argv.length > 0 && argv.every((a) => typeof a === "string");
  if (typeof params.url !== "string" && !stdio) {
    throw new UsageError('params need "url" or "command" (a non-empty array of strings)');
  }
  if (scenario === "calls" && (!Array.isArray(params.clients) || params.clients.length === 0)) {
    throw new UsageError('scenario calls needs "clients" (a non-empty array)');
  }
  return { scenario, params };
}

async function main() {
  let scenario, params;
  try {
    ({ scenario, params } = readArgs());
  } catch (e) {
    process.stderr.write(`protocol.mjs: ${e.message}\n`);
    process.exitCode = 2;
    return;
  }
  let specs = params.clients ?? [params.client ?? {}];
  if (WITH_BYSTANDER.has(scenario) && specs.length < 2) specs = [...specs, {}];
  const sessions = specs.map((spec, i) => new Session(params, spec, i));
  const out = { ok: true, scenario, result: null };
  try {
    await Promise.all(sessions.map((s) => s.connect(params)));
    out.result = await SCENARIOS[scenario](params, sessions);
  } catch (e) {
    out.ok = false;
    out.error = e instanceof UsageError ? e.message : `${errorInfo(e).message}${e?.stack ? `\n${e.stack}` : ""}`;
    if (e instanceof UsageError) process.exitCode = 2;
  }
  await Promise.all(sessions.map((s) => s.close().catch(() => {})));
  out.clients = sessions.map((s) => s.report());
  process.stdout.write(JSON.stringify(out) + "\n");
  if (!out.ok) {
    process.stderr.write(`protocol.mjs: ${scenario}: ${out.error}\n`);
    process.exitCode ||= 1;
  }
}

main().catch((e) => {
  process.stderr.write(`protocol.mjs: ${e?.stack ?? e}\n`);
  process.exitCode = 1;
});
