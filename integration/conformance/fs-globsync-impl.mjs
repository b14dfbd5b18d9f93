// nodeGlobSync: Node 22's fs.globSync(pattern, { cwd, exclude, withFileTypes })
// built on the pinned `glob` package. Used only by globsync-shim.mjs on Node
// versions whose fs has no globSync.
import { globSync } from "glob";

export function nodeGlobSync(pattern, options = {}) {
  const { cwd, exclude, withFileTypes = false } = options;
  const opts = { cwd, withFileTypes: Boolean(withFileTypes), dot: true };
  if (typeof exclude === "function") {
    // Node calls exclude with a Dirent when withFileTypes is set, otherwise
    // with the path; glob's Path objects serve as both.
    opts.ignore = {
      ignored: (p) => Boolean(exclude(withFileTypes ? p : p.relative())),
      childrenIgnored: (p) => Boolean(exclude(withFileTypes ? p : p.relative())),
    };
  } else if (Array.isArray(exclude)) {
    opts.ignore = exclude;
  }
  return globSync(pattern, opts);
}
