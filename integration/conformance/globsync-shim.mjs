// Preload for running the conformance CLI (@modelcontextprotocol/conformance
// 0.2.0-alpha.12) on Node 20:
//
//   node --import ./conformance/globsync-shim.mjs node_modules/@modelcontextprotocol/conformance/dist/index.js …
//
// The CLI does `import { globSync } from "fs"`, an export only Node 22 has, so
// on Node 20 linking fails before any code runs. Assigning fs.globSync is not
// enough for ESM: a builtin's named exports are fixed when the module is
// created (module.syncBuiltinESMExports never adds names). So, when fs lacks
// globSync, this preload
//   1. defines fs.globSync (for CommonJS callers) from the pinned `glob`
//      package's globSync, and
//   2. registers a resolve hook that sends every ESM import of "fs"/"node:fs"
//      to fs-globsync.mjs, which re-exports node:fs plus that globSync.
// On Node 22+ it does nothing.
import fs from "node:fs";
import { register } from "node:module";
import { nodeGlobSync } from "./fs-globsync-impl.mjs";

if (typeof fs.globSync !== "function") {
  fs.globSync = nodeGlobSync;
  register("./fs-hooks.mjs", import.meta.url);
}
