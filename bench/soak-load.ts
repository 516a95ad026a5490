/**
 * The soak's continuous, mixed load (bench/soak.ts) through the public API: batches of
 * scripted sessions with webhooks, cancels, follow-ups on long sessions, SSE readers that
 * come and go (some slow), list, batch and results reads. It never waits for the fleet to
 * keep up: each activity runs on its own timer and counts what it did and what failed.
 */
import { createServer } from "node:http";
import { FleetClient } from "../src/producer/client.js";
import type { AgentConfigInput } from "../src/shared/agent-config.js";

export type LoadStats = {
  counts: Record<string, number>;
  stop(): Promise<void>;
};

const rand = (lo: number, hi: number) => lo + Math.floor(Math.random() * (hi - lo + 1));
const pick = <T>(items: T[]): T | undefined => items[Math.floor(Math.random() * items.length)];

/** A scripted agent: one or two tool steps (sleep), then an answer; small model delays. */
function agent(toolSteps: number): AgentConfigInput {
  const steps = [];
  for (let i = 0; i < toolSteps; i++) {
    steps.push({
      text: `step ${i}`,
      toolCalls: [{ name: "sleep", arguments: { ms: rand(20, 300) } }],
      delayMs: rand(20, 200),
    });
  }
  steps.push({ text: "done: the answer is 42.", delayMs: rand(20, 100) });
  return { model: { provider: "scripted", steps }, tools: ["sleep"], maxTurns: 10 } as AgentConfigInput;
}

export function startLoad(options: {
  baseUrl: string;
  apiKey: string;
  hookPort: number;
  batchEveryMs: number;
  log: (line: string) => void;
}): LoadStats {
  const fleet = new FleetClient({ baseUrl: options.baseUrl, apiKey: options.apiKey });
  const counts: Record<string, number> = {
    sessions: 0,
    batches: 0,
    batchesEnded: 0,
    followUps: 0,
    cancels: 0,
    sseOpened: 0,
    sseEvents: 0,
    webhooks: 0,
    webhooksRefused: 0,
    reads: 0,
    errors: 0,
  };
  const control = new AbortController();
  const timers: NodeJS.Timeout[] = [];
  const inFlight = new Set<Promise<unknown>>();
  const recentSessions: string[] = [];
  const openBatches = new Set<string>();
  const endedBatches: string[] = [];
  const longSessions: { id: string; lastRun: string | null }[] = [];
  let errorsLogged = 0;

  const track = (what: string, work: () => Promise<unknown>) => {
    if (control.signal.aborted) return;
    const p = work()
      .catch((error) => {
        if (control.signal.aborted) return;
        counts.errors!++;
        if (errorsLogged++ < 20) options.log(`load: ${what} failed: ${(error as Error).message}`);
      })
      .finally(() => inFlight.delete(p));
    inFlight.add(p);
  };
  const every = (ms: number, what: string, work: () => Promise<unknown>) =>
    timers.push(setInterval(() => track(what, work), ms));

  // Webhook receiver: 200, except 1 in 10 deliveries refused with a 500 (retried).
  const receiver = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (Math.random() < 0.1) {
        counts.webhooksRefused!++;
        res.writeHead(500).end();
      } else {
        counts.webhooks!++;
        res.writeHead(200).end();
      }
    });
  });
  receiver.listen(options.hookPort, "127.0.0.1");

  const submitBatch = async () => {
    const size = rand(200, 400);
    const sessions = Array.from({ length: size }, (_, i) => ({
      agent: agent(rand(1, 2)),
      input: `task ${i}`,
      customId: `c${i}`,
      metadata: { soak: true },
    }));
    const created = await fleet.createBatch(sessions, {
      webhook: { url: `http://127.0.0.1:${options.hookPort}/hook` },
      idempotencyKey: `soak-batch-${counts.batches}-${Date.now()}`,
    });
    counts.batches!++;
    counts.sessions! += size;
    openBatches.add(created.id);
    for (const s of created.sessions) recentSessions.push(s.id);
    recentSessions.splice(0, Math.max(0, recentSessions.length - 2000));
    // A quarter of the batches cancelled whole a moment later; otherwise a few sessions.
    if (counts.batches! % 4 === 0) {
      setTimeout(
        () => track("cancel batch", () => fleet.cancelBatch(created.id).then(() => counts.cancels!++)),
        3000,
      );
    } else {
      for (const s of created.sessions.filter(() => Math.random() < 0.03)) {
        setTimeout(
          () => track("cancel session", () => fleet.cancelSession(s.id).then(() => counts.cancels!++)),
          rand(0, 5000),
        );
      }
    }
    // A batch-events reader follows it to its end (or 2 minutes).
    track("batch events", async () => {
      const signal = AbortSignal.any([control.signal, AbortSignal.timeout(120_000)]);
      counts.sseOpened!++;
      for await (const _ of fleet.batchEvents(created.id, { signal })) counts.sseEvents!++;
    });
  };

  const pollBatches = async () => {
    for (const id of [...openBatches]) {
      const batch = await fleet.getBatch(id);
      counts.reads!++;
      if (batch.status !== "running") {
        openBatches.delete(id);
        endedBatches.push(id);
        counts.batchesEnded!++;
      }
    }
    const ended = pick(endedBatches);
    if (ended) {
      for await (const _ of fleet.batchResults(ended)) counts.reads!++;
    }
    await fleet.listSessions({ status: "completed", limit: 50 });
  };

  const followUps = async () => {
    if (longSessions.length < 10) {
      const { id } = await fleet.createSession({ agent: agent(1) });
      longSessions.push({ id, lastRun: null });
    }
    for (const s of longSessions) {
      if (s.lastRun) {
        const run = await fleet.getRun(s.lastRun);
        if (run.status !== "ended") continue;
      }
      const { runId } = await fleet.send(s.id, `follow-up ${counts.followUps}`);
      s.lastRun = runId;
      counts.followUps!++;
    }
  };

  /** One SSE reader: connects, reads for a while (slowly, 1 in 3), disconnects. */
  const sseReader = async () => {
    const long = Math.random() < 0.3 ? pick(longSessions)?.id : undefined;
    const id = long ?? pick(recentSessions);
    if (!id) return;
    const reader = new AbortController();
    const stopReader = () => reader.abort();
    control.signal.addEventListener("abort", stopReader, { once: true });
    const slow = Math.random() < 0.33;
    try {
      const response = await fetch(`${options.baseUrl}/v1/sessions/${id}/events?after=0-0`, {
        headers: { authorization: `Bearer ${options.apiKey}` },
        signal: reader.signal,
      });
      counts.sseOpened!++;
      if (!response.ok || !response.body) {
        await response.body?.cancel();
        return;
      }
      const body = response.body.getReader();
      const until = Date.now() + rand(1000, 15_000);
      while (Date.now() < until) {
        const next = await Promise.race([
          body.read(),
          new Promise<null>((done) => setTimeout(() => done(null), until - Date.now())),
        ]);
        if (next === null || next.done) break;
        counts.sseEvents! += (new TextDecoder().decode(next.value).match(/^event:/gm) ?? []).length;
        if (slow) await new Promise((done) => setTimeout(done, rand(2000, 8000)));
      }
    } catch (error) {
      if ((error as Error).name !== "AbortError") throw error;
    } finally {
      reader.abort();
      control.signal.removeEventListener("abort", stopReader);
    }
  };

  track("batch", submitBatch);
  every(options.batchEveryMs, "batch", submitBatch);
  every(10_000, "poll batches", pollBatches);
  every(15_000, "follow-ups", followUps);
  every(1_500, "SSE reader", sseReader);

  return {
    counts,
    async stop() {
      for (const t of timers) clearInterval(t);
      control.abort();
      await Promise.allSettled([...inFlight]);
      // The receiver stays up: webhooks of batches that end while the fleet drains still land.
      receiver.unref();
    },
  };
}
