// Module resolve hook registered by globsync-shim.mjs (Node < 22 only): ESM
// imports of "fs" / "node:fs" resolve to fs-globsync.mjs, except the import
// inside fs-globsync.mjs itself.
const shim = new URL("./fs-globsync.mjs", import.meta.url).href;

export async function resolve(specifier, context, nextResolve) {
  if ((specifier === "fs" || specifier === "node:fs") && context.parentURL !== shim) {
    return { url: shim, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}
