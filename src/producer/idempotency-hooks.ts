/** `Idempotency-Key` on the API's `POST` and `DELETE` requests (contracts §9). */
import type { FastifyInstance, FastifyRequest } from "fastify";
import { ConflictError, refusedByFleetState, ValidationError } from "../shared/errors.js";
import { ABANDONED_AFTER_SECONDS, type IdempotencyStore } from "../shared/store/idempotency.js";
import { legacyRequestHash, requestHash, requestTarget } from "./request-hash.js";

/** How long a request waits for the answer of an earlier one with its Idempotency-Key. */
const IDEMPOTENCY_WAIT_MS = 30_000;
/** How often a request still being answered renews its key's claim (a quarter of the takeover bound). */
const RENEW_EVERY_MS = (ABANDONED_AFTER_SECONDS * 1000) / 4;
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;
/** How much of a path a 409 quotes (ids are at most 100 characters; a longer URL is a 414). */
const QUOTED_PATH_MAX = 200;

/** `POST /v1/sessions`: a request's method and path, without its query, cut to QUOTED_PATH_MAX (pure). */
export function requestLine(method: string, url: string): string {
  const path = url.split("?", 1)[0]!;
  return `${method} ${path.length > QUOTED_PATH_MAX ? `${path.slice(0, QUOTED_PATH_MAX)}…` : path}`;
}

/**
 * A request target in origin form, `/v1/sessions?x` (pure): one in absolute form,
 * `http://host/v1/sessions?x` (what a proxy may send, and what Fastify routes), read as the
 * path and query it names, so that its key is held as the same request's is. Read as it came,
 * such a request skipped the key (its URL does not start with `/v1/`): every retry acted again.
 */
export function originForm(url: string): string {
  if (url.startsWith("/")) return url;
  const rest = /^https?:\/\/[^/?#]*(.*)$/is.exec(url)?.[1];
  if (rest === undefined) return url;
  return rest.startsWith("/") ? rest : `/${rest}`;
}

/**
 * The 409's words for a key the tenant used for another request (pure): what differs — the
 * method and path, named, or the body — and never the other request's body. `stored`: the
 * method and path the key was first used with (null: a key claimed before they were kept).
 */
export function reusedKeyMessage(line: string, stored: string | null): string {
  const fix =
    "an Idempotency-Key stands for one request (its method, path and body): send this one with a new key";
  if (stored === null)
    return `this Idempotency-Key was used within 24 h for another request (another method, path or body); ${fix}`;
  if (stored === line)
    return `this Idempotency-Key was used within 24 h for ${stored} with another body (or query); ${fix}`;
  return `this Idempotency-Key was used within 24 h for another request, ${stored}, not ${line}; ${fix}`;
}

/**
 * Whether an answer is kept for its key (pure). Not a 5xx or a 429 (nothing was done, or it
 * is not known), nor a 409 `running`: a resume refused because a run was on its way did
 * nothing and says "not now" as a 429 does. Kept, its retry with the key — once the run had
 * gone — got the same 409 back for 24 h. Nor (decided by the hooks, from the error) a 400 of
 * a FleetStateError: a tool no worker had registered yet, a tenant cap; kept, the retry after
 * the operator deployed the worker with the tool got the same 400 for 24 h. Nor a 404 of what the
 * operator's settings leave out (a webhook secret rotated while per-tenant secrets are off).
 */
export function keepsAnswer(status: number, payload: string): boolean {
  if (status >= 500 || status === 429) return false;
  if (status !== 409) return true;
  try {
    return (JSON.parse(payload) as { error?: { reason?: unknown } }).error?.reason !== "running";
  } catch {
    return true;
  }
}

/**
 * `Idempotency-Key` on every `POST /v1/…` (contracts §9) and `DELETE /v1/…`: after the body is parsed and the
 * caller known, the key is claimed in Postgres before the handler acts; the answer is
 * stored as it is sent. The same key with the same method, path and body replays it (also
 * while the first request is still being answered: this one waits for it); with another
 * method, path or body it is a 409 `idempotency_key_reused` that says which differs.
 */
export function idempotencyHooks(
  app: FastifyInstance,
  store: Pick<IdempotencyStore, "begin" | "wait" | "complete" | "release"> &
    Partial<Pick<IdempotencyStore, "renew">>,
  options: { renewEveryMs?: number } = {},
): void {
  app.decorateRequest("idempotencyKey", "");
  // While its request is answered, a claimed key is renewed: only a request that died (its
  // API gone) leaves a claim to be taken over.
  const renewals = new WeakMap<FastifyRequest, NodeJS.Timeout>();
  const stopRenewing = (request: FastifyRequest) => {
    clearInterval(renewals.get(request));
    renewals.delete(request);
  };
  // Requests refused by the fleet as it stands (a FleetStateError, a 404 of what the operator's
  // settings leave out): their answer is not kept.
  const refusedByState = new WeakSet<FastifyRequest>();
  app.addHook("onError", async (request, _reply, error) => {
    if (refusedByFleetState(error)) refusedByState.add(request);
  });
  app.addHook("preHandler", async (request, reply) => {
    const header = request.headers["idempotency-key"];
    if (request.method !== "POST" && request.method !== "DELETE") return;
    const url = originForm(request.url);
    if (header === undefined || !url.startsWith("/v1/")) return;
    const key = Array.isArray(header) ? header[0]! : header;
    if (!IDEMPOTENCY_KEY.test(key))
      throw new ValidationError("Idempotency-Key", "must be 1 to 255 visible ASCII characters");
    const line = requestLine(request.method, url);
    let hash = requestHash(request.method, requestTarget(url, request.query), request.body);
    let state = await store.begin(request.tenant, key, hash, line);
    // Stored by a release that hashed the URL as it came (its query in the order sent) or the
    // body in its own key order: the same request still replays (or waits) rather than being
    // refused.
    const earlier = [
      requestHash(request.method, url, request.body),
      legacyRequestHash(request.method, url, request.body),
    ];
    for (const before of earlier) {
      if (state.state !== "reused" || before === hash) continue;
      const again = await store.begin(request.tenant, key, before, line);
      if (again.state !== "reused") [hash, state] = [before, again];
    }
    if (state.state === "pending")
      state = await store.wait(request.tenant, key, hash, IDEMPOTENCY_WAIT_MS, line);
    switch (state.state) {
      case "new": {
        request.idempotencyKey = key;
        const [tenant, claimed, renew] = [request.tenant, hash, store.renew?.bind(store)];
        if (!renew) return;
        const timer = setInterval(() => {
          renew(tenant, key, claimed).catch((error: unknown) => {
            request.log.warn({ err: error }, "could not renew the claim of an Idempotency-Key");
          });
        }, options.renewEveryMs ?? RENEW_EVERY_MS);
        timer.unref();
        renewals.set(request, timer);
        return;
      }
      case "reused":
        throw new ConflictError("idempotency_key_reused", reusedKeyMessage(line, state.requestLine));
      case "pending":
        throw new ConflictError(
          "idempotency_key_in_use",
          "a request with this Idempotency-Key is still being answered; try again",
        );
      case "replay":
        return reply
          .code(state.statusCode)
          .header("content-type", "application/json; charset=utf-8")
          .header("idempotent-replayed", "true")
          .send(state.response);
    }
  });
  app.addHook("onResponse", async (request) => stopRenewing(request));
  app.addHook("onSend", async (request, reply, payload) => {
    if (!request.idempotencyKey) return payload;
    stopRenewing(request);
    const key = request.idempotencyKey;
    request.idempotencyKey = "";
    const status = reply.statusCode;
    // The answer goes out whatever happens to its record: a failure here (Postgres lost at
    // this moment) made a request that had acted — a session created, a run queued — answer
    // 500 or 503, whose retry acts again once its key is taken over.
    try {
      if (typeof payload === "string" && keepsAnswer(status, payload) && !refusedByState.has(request))
        await store.complete(request.tenant, key, status, payload);
      else await store.release(request.tenant, key);
    } catch (error) {
      request.log.error(
        { err: error, status },
        "the answer of a request with an Idempotency-Key could not be stored: a retry with its key waits, and acts again once the key is taken over (120 s)",
      );
    }
    return payload;
  });
}
