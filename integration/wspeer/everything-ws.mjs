#!/usr/bin/env node
// everything-ws.mjs serves the reference server-everything over WebSocket,
// as the MCP WebSocket transport is spoken in practice (the
// TypeScript SDK's WebSocketClientTransport, the SEP-1288 draft): the client
// must offer the subprotocol "mcp", every JSON-RPC message travels as one
// UTF-8 text frame (no newline framing, no batches), and a binary frame
// closes the connection with status 1003.
//
// Each connection gets its own server from server-everything's createServer()
// (the factory its stdio and streamable HTTP entry points use), connected
// through the small Transport below. The WebSocket layer is the `ws` package.
//
// Usage:
//   node wspeer/everything-ws.mjs [PORT]      (or PORT in the environment; 0 = any free port)
//
// It listens on 127.0.0.1 only and, once listening, prints ONE line of JSON on
// stdout: {"port": N, "url": "ws://127.0.0.1:N/"}. Logs go to stderr. It exits
// on SIGTERM or SIGINT after closing every connection with status 1001.

import { randomUUID } from "node:crypto";
import { WebSocketServer, WebSocket } from "ws";
import { JSONRPCMessageSchema } from "@modelcontextprotocol/sdk/types.js";
import { createServer } from "@modelcontextprotocol/server-everything/dist/server/index.js";

const SUBPROTOCOL = "mcp";
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

// WebSocketServerTransport is an MCP SDK Transport over one accepted socket.
// Frames that arrive before start() are queued, so none is lost between the
// 'connection' event and the SDK attaching onmessage.
class WebSocketServerTransport {
  constructor(socket) {
    this.socket = socket;
    this.sessionId = randomUUID();
    this.started = false;
    this.queue = [];
    this.onclose = undefined;
    this.onerror = undefined;
    this.onmessage = undefined;
    socket.on("message", (data, isBinary) => {
      if (isBinary) {
        socket.close(1003, "MCP over WebSocket uses text frames only");
        return;
      }
      if (this.started) this.receive(data);
      else this.queue.push(data);
    });
    socket.on("close", () => this.onclose?.());
    socket.on("error", (err) => this.onerror?.(err));
  }

  receive(data) {
    let message;
    try {
      const parsed = JSON.parse(data.toString("utf8"));
      if (Array.isArray(parsed)) throw new Error("JSON-RPC batches are not supported");
      message = JSONRPCMessageSchema.parse(parsed);
    } catch (err) {
      this.onerror?.(err instanceof Error ? err : new Error(String(err)));
      return;
    }
    this.onmessage?.(message);
  }

  async start() {
    if (this.started) throw new Error("WebSocketServerTransport already started");
    this.started = true;
    for (const data of this.queue.splice(0)) this.receive(data);
  }

  send(message) {
    return new Promise((resolve, reject) => {
      if (this.socket.readyState !== WebSocket.OPEN) {
        reject(new Error("WebSocket is not open"));
        return;
      }
      this.socket.send(JSON.stringify(message), { binary: false }, (err) => (err ? reject(err) : resolve()));
    });
  }

  async close() {
    if (this.socket.readyState === WebSocket.OPEN || this.socket.readyState === WebSocket.CONNECTING) {
      this.socket.close(1000);
    }
  }
}

const arg = process.argv[2] ?? process.env.PORT ?? "0";
const port = Number(arg);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`everything-ws: bad port ${JSON.stringify(arg)}`);
  process.exit(2);
}

const wss = new WebSocketServer({
  host: "127.0.0.1",
  port,
  maxPayload: MAX_MESSAGE_BYTES,
  // Refuse a client that does not offer the subprotocol, rather than
  // silently speaking MCP without it.
  verifyClient: ({ req }) =>
    (req.headers["sec-websocket-protocol"] ?? "")
      .split(",")
      .map((p) => p.trim())
      .includes(SUBPROTOCOL),
  handleProtocols: (protocols) => (protocols.has(SUBPROTOCOL) ? SUBPROTOCOL : false),
});

wss.on("connection", async (socket) => {
  const transport = new WebSocketServerTransport(socket);
  const { server, cleanup } = createServer();
  let cleaned = false;
  server.server.onclose = () => {
    if (cleaned) return;
    cleaned = true;
    cleanup(transport.sessionId);
    console.error(`everything-ws: session ${transport.sessionId} closed`);
  };
  server.server.onerror = (err) => console.error(`everything-ws: session ${transport.sessionId}: ${err?.message ?? err}`);
  try {
    await server.connect(transport);
    console.error(`everything-ws: session ${transport.sessionId} connected`);
  } catch (err) {
    console.error("everything-ws: connect:", err);
    socket.close(1011, "server error");
  }
});

wss.on("error", (err) => {
  console.error("everything-ws:", err.message);
  process.exit(1);
});

wss.on("listening", () => {
  const { port } = wss.address();
  process.stdout.write(JSON.stringify({ port, url: `ws://127.0.0.1:${port}/` }) + "\n");
});

function shutdown() {
  for (const socket of wss.clients) socket.close(1001, "server shutting down");
  wss.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
