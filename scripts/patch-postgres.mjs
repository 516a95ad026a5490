// postinstall: eight small patches to postgres.js 3.4.x, in both its builds (src/ for import,
// cjs/ for require). Idempotent (each carries a mark); a file that does not look as expected
// (another version of postgres.js) is left as it is, with a warning. npm 11 runs a
// dependency's install scripts only once approved, so `fleet` also applies what is missing
// when it starts (bin/fleet.js imports `patchPostgres`).
//
// 1. A guard against a write to a connection that has already closed. Such a write is
//    scheduled with setImmediate, finds `socket === null` and throws outside any query,
//    which crashes the process (porsager/postgres#1154, #1208; the fix is still an open pull
//    request upstream). The guard settles the write the way a lost connection is settled
//    everywhere else: the queries on it fail with CONNECTION_CLOSED, which callers catch and
//    retry.
// 2. Query settles through methods, not closures stored on the query. A Query is a Promise
//    subclass; it kept `this.resolve = x => (…, resolve(x))`, a closure over its own
//    resolving functions. V8's young-generation collector kept every such promise, with the
//    rows it resolved to, alive until a full collection: about 18 KB promoted per query and
//    scavenges of 5–20 ms, the tail of every API request and much of a worker's GC time
//    (bench/list.ts; the pattern alone reproduces it in test/postgres-patch.test.ts). Holding
//    the resolving functions themselves and settling through prototype methods keeps the
//    behaviour and lets each query's garbage die young.
// 3. A connection that closes with an error fails every query still on it. postgres.js fails
//    those on it when the error comes, but a query given to the connection between the error
//    and its close (a retry in the failed query's own `catch`: the socket reset, not yet
//    closed) was left waiting, unsent, until the connection's next connect, which only a later
//    query starts: forever on a quiet pool (test/postgres-reconnect.test.ts).
// 4. A connection taken for lost after a silence (src/shared/db/dead-links.ts: an error with
//    `failQueued`, when Postgres was silent to every connection of the pool) fails the
//    statements waiting in the pool for a connection with the same error. postgres.js gave
//    them, one by one, a new connection each, which the blackhole took too: each waited a
//    silence window of its own after the one before it (8 statements on 2 connections, the
//    last failed after 3 windows; test/postgres-reconnect.test.ts).
// 5. A connection that closes with a statement in flight forgets it, and ends an `end()`
//    that was waiting for it. postgres.js fails the statement but keeps it as the one in
//    flight (only a ReadyForQuery, which a closed connection never gets, clears it), and
//    `sql.end()` waits for that statement to end: forever without a timeout, the whole
//    timeout with one (5 s for a pool closed after one of its connections was lost
//    mid-statement, as at a shutdown after an outage; porsager/postgres#1097, #1130). Cleared
//    where the connection closes, not where the error comes: a connection still open gets
//    that statement's ReadyForQuery later, which must not settle the next one.
// 6. A statement's message is sent as built, not copied twice first. Its Bind message (which
//    holds the parameters: a whole 16 MiB import) was copied into a new buffer to append the
//    Execute and Sync after it (Buffer.concat), and that again on its way to the socket
//    (Buffer.from in `write`): two more 16 MiB buffers, each a few thousand page faults
//    while fresh. Execute and Sync are now written into the Bind's own buffer, and `write`
//    keeps the buffer it is given (every caller's is new or a constant, never changed after).
//    Measured (docs/performance.md): a 16 MiB insert's client CPU ~75 ms instead of
//    ~120-150 ms; dropping only the Buffer.from bought nothing measurable.
// 7. A connection that the server closes cleanly during its start-up (TCP accepted, then a FIN
//    before any answer: a proxy or load balancer with no Postgres behind it, PgBouncer
//    restarting) fails the statement it was opened for, and those waiting in the pool for a
//    connection, with CONNECTION_CLOSED, and counts as a failed connect (the next waits the
//    backoff). postgres.js connected again at once, for ever: the statement never settled,
//    and its connect_timeout, restarted at each attempt, never fired (porsager/postgres#1193;
//    the fix upstream, #1214, is an open pull request). A running role whose Postgres went
//    behind such a proxy had its statements hang and made thousands of connections a
//    second, one core busy; the start-up checks were bounded already (preflight.ts
//    `answeredWithin`). A close that postgres.js made itself (`terminated`: a host that is
//    not the `target_session_attrs` asked for) still goes on to the next host.
// 8. A connection that closes forgets the write it had scheduled, not only cancels it. Its
//    `closed()` cleared the scheduled write (clearImmediate) but kept the timer and the bytes:
//    the next connection's first write, seeing a write still scheduled, scheduled none, and
//    its start-up message was never sent. It happens when the socket closes before the
//    write's turn comes: a `socket` option's socket that fails at once (src/shared/db/
//    tls-negotiation.ts, an SSLRequest reset or closed during an outage). Each later
//    connection of the pool then timed out (CONNECT_TIMEOUT) with nothing sent, for good:
//    a role with `sslmode=prefer` never recovered once Postgres was back
//    (test/postgres-reconnect.test.ts).
import { readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const GUARD_MARK = "agent-fleet: guard against a closed socket";
const NEXT_WRITE = "  function nextWrite(fn) {\n";
const SETTLE_MARK = "agent-fleet: settle without closures";
const CLOSED_MARK = "agent-fleet: fail what was queued after the error too";
const CLOSED_SETTLE =
  "    !hadError && (query || sent.length) && error(Errors.connection('CONNECTION_CLOSED', options, socket))\n";
const QUEUED_MARK = "agent-fleet: fail the statements waiting for a connection after a silence";
const FORGET_MARK = "agent-fleet: nothing is in flight on a closed connection";
const CLOSED_TIME = "    closedTime = performance.now()\n";
const STARTUP_CLOSE_MARK = "agent-fleet: a clean close during start-up fails its statements";
const STARTUP_CLOSE =
  "    socket.removeAllListeners()\n    socket = null\n\n    if (initial)\n      return reconnect()\n";
const UNSCHEDULED_MARK = "agent-fleet: a closed connection forgets its scheduled write";
const CLOSED_WRITE = "    clearImmediate(nextWriteTimer)\n    socket.removeListener('data', data)\n";
const SPECIES = "  static get [Symbol.species]() {\n    return Promise\n  }\n";
const UNCOPIED_MARK = "agent-fleet: a statement's message is sent as built";
const PREPARED = `  function prepared(q) {
    return Buffer.concat([
      Bind(q.parameters, q.statement.types, q.statement.name, q.cursorName),
      q.cursorFn
        ? Execute('', q.cursorRows)
        : ExecuteUnnamed
    ])
  }
`;
const BIND = "  function Bind(parameters, types, statement = '', portal = '') {\n";
const BIND_END = "    b.i16(0)\n\n    return b.end()\n  }\n";

export const patches = [
  {
    name: "closed-socket guard",
    files: ["src/connection.js", "cjs/src/connection.js"],
    mark: GUARD_MARK,
    edits: [
      [
        NEXT_WRITE,
        `${NEXT_WRITE}    if (!socket) { // ${GUARD_MARK}
      chunk = nextWriteTimer = null
      error(Errors.connection('CONNECTION_CLOSED', options, socket))
      return false
    }
`,
      ],
    ],
  },
  {
    name: "fail what was queued after the error",
    files: ["src/connection.js", "cjs/src/connection.js"],
    mark: CLOSED_MARK,
    edits: [
      [
        CLOSED_SETTLE,
        `    if (query || sent.length) // ${CLOSED_MARK}\n      error(Errors.connection('CONNECTION_CLOSED', options, socket))\n`,
      ],
    ],
  },
  {
    name: "remember a silence that fails the waiting statements",
    files: ["src/connection.js", "cjs/src/connection.js"],
    mark: QUEUED_MARK,
    edits: [
      [
        "  function error(err) {\n",
        `  function error(err) {\n    err && err.failQueued && (connection.failedBy = err) // ${QUEUED_MARK}\n`,
      ],
    ],
  },
  {
    name: "fail the statements waiting for a connection after a silence",
    files: ["src/index.js", "cjs/src/index.js"],
    mark: QUEUED_MARK,
    edits: [
      [
        "    queries.length && connect(c, queries.shift())\n  }\n",
        `    if (c.failedBy) { // ${QUEUED_MARK}
      const lost = c.failedBy
      c.failedBy = null
      while (queries.length)
        queries.shift().reject(lost)
    }
    queries.length && connect(c, queries.shift())
  }
`,
      ],
    ],
  },
  {
    name: "forget the statement in flight when the connection closes",
    files: ["src/connection.js", "cjs/src/connection.js"],
    mark: FORGET_MARK,
    edits: [[CLOSED_TIME, `    query = null // ${FORGET_MARK}\n    ended && terminate()\n${CLOSED_TIME}`]],
  },
  {
    name: "fail the statements of a connection closed during its start-up",
    files: ["src/connection.js", "cjs/src/connection.js"],
    mark: STARTUP_CLOSE_MARK,
    edits: [
      [
        STARTUP_CLOSE,
        `    socket.removeAllListeners()
    socket = null

    if (initial && !hadError && !terminated) { // ${STARTUP_CLOSE_MARK}
      const lost = Errors.connection('CONNECTION_CLOSED', options)
      lost.message += ' (closed during start-up, before any answer from Postgres)'
      connection.failedBy = lost
      queryError(initial, lost)
      initial = null
      hadError = true
    }
    if (initial)
      return reconnect()
`,
      ],
    ],
  },
  {
    name: "forget the scheduled write when the connection closes",
    files: ["src/connection.js", "cjs/src/connection.js"],
    mark: UNSCHEDULED_MARK,
    edits: [
      [
        CLOSED_WRITE,
        `    clearImmediate(nextWriteTimer)
    nextWriteTimer = chunk = null // ${UNSCHEDULED_MARK}
    socket.removeListener('data', data)
`,
      ],
    ],
  },
  {
    name: "send a statement's message as built",
    files: ["src/connection.js", "cjs/src/connection.js"],
    mark: UNCOPIED_MARK,
    edits: [
      [
        "    chunk = chunk ? Buffer.concat([chunk, x]) : Buffer.from(x)\n",
        `    chunk = chunk ? Buffer.concat([chunk, x]) : x // ${UNCOPIED_MARK}\n`,
      ],
      [
        PREPARED,
        `  function prepared(q) {
    return q.cursorFn
      ? Buffer.concat([Bind(q.parameters, q.statement.types, q.statement.name, q.cursorName), Execute('', q.cursorRows)])
      : Bind(q.parameters, q.statement.types, q.statement.name, q.cursorName, ExecuteUnnamed)
  }
`,
      ],
      [BIND, "  function Bind(parameters, types, statement = '', portal = '', then = null) {\n"],
      [
        BIND_END,
        `    b.i16(0)

    if (!then)
      return b.end()
    // \`then\` (Execute and Sync) goes into the same buffer, after the Bind; its bytes are all
    // ASCII, so written as a string they stay as they are. end() sets the first message's
    // length to the whole buffer's: the Bind's own is set again after it.
    const length = b.i - 1
    b.str(then.toString('latin1'))
    const out = b.end()
    out.writeUInt32BE(length, 1)
    return out
  }
`,
      ],
    ],
  },
  {
    name: "settle without closures",
    files: ["src/query.js", "cjs/src/query.js"],
    mark: SETTLE_MARK,
    edits: [
      [
        "    , originError = Symbol('OriginError')\n",
        "    , originError = Symbol('OriginError')\n    , settle = Symbol('settle')\n",
      ],
      [
        "    this.resolve = x => (this.active = false, resolve(x))\n    this.reject = x => (this.active = false, reject(x))\n\n    this.active = false\n",
        `    this[settle] = [resolve, reject] // ${SETTLE_MARK}\n\n    this.active = false\n`,
      ],
      [
        SPECIES,
        `${SPECIES}
  resolve(x) {
    this.active = false
    this[settle][0](x)
  }

  reject(x) {
    this.active = false
    this[settle][1](x)
  }
`,
      ],
    ],
  },
];

/**
 * Applies the patches that are not in place yet. Returns what could not be applied (an empty
 * list: postgres.js is patched); each problem is also passed to `warn`. Reads only, when
 * everything is in place already (`fleet` calls this at every start: bin/fleet.js).
 */
export function patchPostgres(warn = (line) => console.warn(line)) {
  const problems = [];
  const problem = (line) => {
    problems.push(line);
    warn(line);
  };
  let root;
  try {
    // …/postgres/cjs/src/index.js → …/postgres
    root = dirname(dirname(dirname(createRequire(import.meta.url).resolve("postgres"))));
  } catch {
    warn("patch-postgres: postgres is not installed; nothing to patch");
    return problems;
  }
  for (const patch of patches) {
    for (const file of patch.files) {
      const path = join(root, file);
      let text;
      try {
        text = readFileSync(path, "utf8");
      } catch {
        problem(`patch-postgres: ${path} not found; left as it is`);
        continue;
      }
      if (text.includes(patch.mark)) continue;
      // Each edit must match exactly once, or the file is not the one this patch was written for.
      if (!patch.edits.every(([original]) => text.split(original).length === 2)) {
        problem(`patch-postgres: ${path} does not look like postgres.js 3.4; ${patch.name} left out`);
        continue;
      }
      for (const [original, replacement] of patch.edits) text = text.replace(original, () => replacement);
      try {
        // Whole or not at all: another process starting at the same moment (several `fleet
        // worker`s on a fresh install) reads the old file or the new one, never half of one.
        const temporary = `${path}.${process.pid}.tmp`;
        try {
          writeFileSync(temporary, text);
          renameSync(temporary, path);
        } finally {
          rmSync(temporary, { force: true });
        }
      } catch (error) {
        problem(
          `patch-postgres: cannot write ${path} (${error.code ?? error.message}); ${patch.name} left out`,
        );
      }
    }
  }
  return problems;
}

// Run as the postinstall step (`node scripts/patch-postgres.mjs`), not when imported.
if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) patchPostgres();
