// node:fs plus globSync, for Node versions whose fs lacks it (see
// globsync-shim.mjs). globsync-shim.mjs has already set fs.globSync.
import fs from "node:fs";

export * from "node:fs";
export default fs;
export const globSync = fs.globSync;
