// postinstall: guards postgres.js 3.4.x against a write to a connection that has already
// closed. Such a write is scheduled with setImmediate, finds `socket === null` and throws
// outside any query, which crashes the process (porsager/postgres#1154, #1208; the fix is
// still an open pull request upstream). The guard settles the write the way a lost
// connection is settled everywhere else: the queries on it fail with CONNECTION_CLOSED,
// which callers catch and retry. Idempotent; says so and changes nothing when the file
// does not look as expected (another version of postgres.js).
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const MARK = "agent-fleet: guard against a closed socket";
const ORIGINAL = "  function nextWrite(fn) {\n";
const GUARDED = `${ORIGINAL}    if (!socket) { // ${MARK}
      chunk = nextWriteTimer = null
      error(Errors.connection('CONNECTION_CLOSED', options, socket))
      return false
    }
`;

let root;
try {
  // …/postgres/cjs/src/index.js → …/postgres
  root = dirname(dirname(dirname(createRequire(import.meta.url).resolve("postgres"))));
} catch {
  console.warn("patch-postgres: postgres is not installed; nothing to patch");
  process.exit(0);
}
for (const file of ["src/connection.js", "cjs/src/connection.js"]) {
  const path = join(root, file);
  let text;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    console.warn(`patch-postgres: ${path} not found; left as it is`);
    continue;
  }
  if (text.includes(MARK)) continue;
  if (!text.includes(ORIGINAL)) {
    console.warn(`patch-postgres: ${path} does not look like postgres.js 3.4; left as it is`);
    continue;
  }
  writeFileSync(path, text.replace(ORIGINAL, GUARDED));
}
