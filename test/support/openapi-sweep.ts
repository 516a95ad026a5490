/**
 * What the sweeps of the API's trust boundary driven by its OpenAPI document share
 * (api-hostile-input: bytes no client should send; api-trust-sweep: what a person gets wrong):
 * the document read (operations, `$ref`s, schemas validated), the records every id of a
 * route names, and what a refused request must leave as it was (every table's rows, every
 * queue's jobs).
 */
import { Ajv2020 } from "ajv/dist/2020.js";
import type { FleetEnv } from "./fleet-env.js";

// biome-ignore lint/suspicious/noExplicitAny: the document and answers are JSON of every shape
export type Json = any;
export type Operation = { method: string; docPath: string; op: Json };

/** The API's OpenAPI document, read as the sweeps read it. */
export class OpenApiDoc {
  private readonly ajv = new Ajv2020({ strict: false, allErrors: false, validateFormats: false });
  private readonly compiled = new Map<Json, ReturnType<Ajv2020["compile"]>>();

  constructor(readonly doc: Json) {}

  /** Every operation the document lists. */
  operations(): Operation[] {
    return Object.entries(this.doc.paths as Record<string, Record<string, Json>>).flatMap(([docPath, ops]) =>
      Object.entries(ops).map(([method, op]) => ({ method: method.toUpperCase(), docPath, op })),
    );
  }

  /** `schema` with its `$ref`s followed to what they name. */
  resolveRef(schema: Json): Json {
    let s = schema;
    while (s?.$ref)
      s = (s.$ref as string)
        .slice(2)
        .split("/")
        .reduce((node: Json, part: string) => node?.[part], this.doc);
    return s;
  }

  /** Whether `value` is of `schema` (one of the document's, its components in reach). */
  validates(schema: Json, value: unknown): boolean {
    let check = this.compiled.get(schema);
    if (!check) {
      check = this.ajv.compile({ ...schema, components: this.doc.components });
      this.compiled.set(schema, check);
    }
    return check(value) === true;
  }

  /** The JSON types `schema` documents (of its branches, for a union). */
  typesOf(schema: Json): string[] {
    const s = this.resolveRef(schema);
    const t =
      s?.type ?? [...(s?.anyOf ?? []), ...(s?.oneOf ?? [])].flatMap((b: Json) => this.resolveRef(b)?.type);
    return [t].flat().filter((x): x is string => typeof x === "string");
  }
}

/** Which of the sweep's records an operation's `{id}` names. */
export function idKindOf(docPath: string): "batch" | "run" | "history" | "session" {
  if (docPath.startsWith("/v1/batches")) return "batch";
  if (docPath.startsWith("/v1/runs")) return "run";
  return docPath.includes("/history") ? "history" : "session";
}

/** `body` with `value` at `path`, made on the way where missing (a copy). */
export function setAt(body: Json, path: (string | number)[], value: unknown): Json {
  const copy = structuredClone(body ?? {});
  let node = copy;
  for (const [i, part] of path.entries()) {
    if (i === path.length - 1) {
      node[part] = value;
      break;
    }
    if (node[part] === null || typeof node[part] !== "object")
      node[part] = typeof path[i + 1] === "number" ? [] : {};
    node = node[part];
  }
  return copy;
}

/**
 * The records a route's `{id}` names (a session, one of its runs, a session to import a
 * history into, an open batch), made through `post` (the sweep's own request, which must
 * succeed), and a count of every table's rows as it stands.
 */
export async function sweepFixture(
  fleet: FleetEnv,
  agent: Json,
  post: (path: string, body: unknown) => Promise<Json>,
): Promise<{ ids: Record<string, string>; countRows: () => Promise<Record<string, number>> }> {
  const session = await post("/v1/sessions", { agent });
  const run = await post(`/v1/sessions/${session.id}/messages`, { content: "hi" });
  const history = await post("/v1/sessions", { agent });
  const batch = await post("/v1/batches", {
    sessions: [{ agent, input: "hi", customId: "c0" }],
    open: true,
  });
  const ids = { session: session.id, run: run.runId, history: history.id, batch: batch.id };
  const tables = (
    await fleet.database.sql<{ name: string }[]>`
      select quote_ident(table_schema) || '.' || quote_ident(table_name) as name
        from information_schema.tables
       where table_type = 'BASE TABLE' and table_schema not in ('pg_catalog', 'information_schema')`
  ).map((t) => t.name);
  const statement = `select ${tables.map((t, i) => `(select count(*) from ${t})::int as c${i}`).join(", ")}`;
  const countRows = async () => {
    const [row] = await fleet.database.sql.unsafe(statement);
    return Object.fromEntries(tables.map((t, i) => [t, (row as Json)[`c${i}`]]));
  };
  return { ids, countRows };
}

/** The jobs of each queue, in any state a job waits or runs in. */
export async function queuedJobs(fleet: FleetEnv): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const queue of ["runs", "resumes", "webhooks"]) {
    const base = `${fleet.config.prefix}:${queue}`;
    const counts = await Promise.all([
      fleet.redis.llen(`${base}:wait`),
      fleet.redis.llen(`${base}:paused`),
      fleet.redis.llen(`${base}:active`),
      fleet.redis.zcard(`${base}:prioritized`),
      fleet.redis.zcard(`${base}:delayed`),
      fleet.redis.zcard(`${base}:waiting-children`),
    ]);
    out[queue] = counts.reduce((a, b) => a + b, 0);
  }
  return out;
}

/** An answer as the sweeps read it: its status, text, JSON (undefined when it is none) and type. */
export type Answer = { status: number; text: string; json: Json; contentType: string | undefined };

/** The answer `chunks` make, with `status` and `contentType` as received. */
export function answerOf(status: number, contentType: string | undefined, chunks: Buffer[]): Answer {
  const text = Buffer.concat(chunks).toString("utf8");
  let json: Json;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status, text, json, contentType };
}
