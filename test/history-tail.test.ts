/**
 * history-tail.ts keeps the pairing walk of a growing history: its answers must be exactly
 * those of a walk of the whole (resumePoint, tailState), for any history, malformed ones too,
 * and also for an array that was cut or had its end replaced since the last question.
 */
import { describe, expect, it } from "vitest";
import {
  resumePointAfter,
  resumePointOfTail,
  tailStateAfter,
  wellFormedBeforeTail,
} from "../src/shared/history-tail.js";
import type { Message } from "../src/shared/messages.js";
import { resumePoint } from "../src/shared/resume-point.js";
import { STOP_REASONS } from "../src/shared/stop-reasons.js";
import { tailState } from "../src/shared/tail-state.js";

/** A small deterministic generator (mulberry32), so a failure can be replayed. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Every known stop reason and one the fleet does not know. */
const STOPS = [...STOP_REASONS, "odd"];

/** Mostly well-paired messages, with now and then a result for no call, a second answer, a duplicate id. */
function nextMessage(rand: () => number, open: string[]): Message {
  const r = rand();
  if (open.length > 0 && r < 0.6) {
    const id = rand() < 0.03 ? "nobody" : rand() < 0.5 ? open.shift()! : open[0]!;
    return { role: "tool", toolCallId: id, name: "t", content: "r", success: true };
  }
  if (r < 0.75) {
    const n = Math.floor(rand() * 3) + 1;
    const ids = Array.from({ length: n }, () => `c${Math.floor(rand() * 50)}`);
    open.splice(0, open.length, ...ids);
    return {
      role: "assistant",
      content: "a",
      stopReason: rand() < 0.85 ? "tool_use" : STOPS[Math.floor(rand() * STOPS.length)]!,
      toolCalls: ids.map((id) => ({ id, name: "t", arguments: {} })),
    };
  }
  open.length = 0;
  if (r < 0.85)
    return { role: "assistant", content: "a", stopReason: STOPS[Math.floor(rand() * STOPS.length)]! };
  return rand() < 0.5 ? { role: "user", content: "u" } : { role: "internal", content: "i" };
}

describe("history-tail", () => {
  it("answers as a walk of the whole history, at every append, with and without messages to come", () => {
    for (let seed = 1; seed <= 200; seed++) {
      const rand = random(seed);
      const history: Message[] = [];
      const open: string[] = [];
      expect(resumePointAfter(history)).toEqual(resumePoint(history));
      for (let i = 0; i < 40; i++) {
        const next = nextMessage(rand, open);
        const more = rand() < 0.3 ? [next, nextMessage(rand, open)] : [next];
        expect(resumePointAfter(history, more), `seed ${seed} at ${i}`).toEqual(
          resumePoint([...history, ...more]),
        );
        expect(tailStateAfter(history, more)).toBe(tailState([...history, ...more]));
        // Sometimes pushed, sometimes only asked about (a run's last step stored with its end).
        if (rand() < 0.8) history.push(...more);
        expect(resumePointAfter(history), `seed ${seed} at ${i}`).toEqual(resumePoint(history));
      }
    }
  });

  it("answers from the tail (the last assistant message on) while the stored state says well formed, pages appended too", () => {
    let checked = 0;
    for (let seed = 1; seed <= 200; seed++) {
      const rand = random(seed);
      const history: Message[] = [];
      const open: string[] = [];
      for (let i = 0; i < 40; i++) {
        const stored = tailState(history);
        const page = Array.from({ length: 1 + Math.floor(rand() * 3) }, () => nextMessage(rand, open));
        let start = history.length - 1;
        while (start >= 0 && history[start]!.role !== "assistant") start--;
        start = Math.max(start, 0);
        if (wellFormedBeforeTail(stored, history.length)) {
          const whole = [...history, ...page];
          expect(resumePointOfTail(history.slice(start), start), `seed ${seed} at ${i}`).toEqual(
            resumePoint(history),
          );
          expect(
            resumePointOfTail([...history.slice(start), ...page], start),
            `seed ${seed} at ${i}`,
          ).toEqual(resumePoint(whole));
          checked++;
        } else expect(stored === "malformed" && resumePoint(history)).toMatchObject({ reason: "malformed" });
        history.push(...page);
      }
    }
    expect(checked).toBeGreaterThan(300);
  });

  it("walks again an array that was cut or whose end was replaced", () => {
    const history: Message[] = [
      { role: "user", content: "u" },
      {
        role: "assistant",
        content: "a",
        stopReason: "tool_use",
        toolCalls: [{ id: "c1", name: "t", arguments: {} }],
      },
    ];
    expect(tailStateAfter(history)).toBe("tools_pending");
    history.length = 1;
    expect(tailStateAfter(history)).toBe("awaiting_model");
    history.push({ role: "assistant", content: "a", stopReason: "end_turn" });
    expect(tailStateAfter(history)).toBe("completed");
    history[1] = { role: "tool", toolCallId: "c1", name: "t", content: "r", success: true };
    expect(resumePointAfter(history)).toEqual(resumePoint(history));
    expect(tailStateAfter(history)).toBe("malformed");
  });

  it("gives a malformed history's first problem however it grows", () => {
    const history: Message[] = [
      { role: "user", content: "u" },
      { role: "tool", toolCallId: "x", name: "t", content: "r", success: true },
    ];
    const first = resumePointAfter(history);
    expect(first).toEqual({
      resumable: false,
      reason: "malformed",
      detail: 'messages[1] answers no call of the step it follows ("x")',
    });
    history.push(
      { role: "user", content: "again" },
      { role: "assistant", content: "a", stopReason: "end_turn" },
    );
    expect(resumePointAfter(history)).toEqual(first);
  });

  it("a copy of the walk shares what it can: an append without tool calls makes no Map or Set", () => {
    const step = (ids: string[]): Message => ({
      role: "assistant",
      content: "a",
      stopReason: "tool_use",
      toolCalls: ids.map((id) => ({ id, name: "t", arguments: {} })),
    });
    const result = (id: string): Message => ({
      role: "tool",
      toolCallId: id,
      name: "t",
      content: "r",
      success: true,
    });
    const history: Message[] = [{ role: "user", content: "u" }, step(["c1", "c2"]), result("c1")];
    expect(tailStateAfter(history)).toBe("tools_pending"); // the walk of `history` is kept
    const tails: string[] = [];
    const made = countCollections(() => {
      tails.push(tailStateAfter(history, [{ role: "assistant", content: "done", stopReason: "end_turn" }]));
      tails.push(tailStateAfter(history, [{ role: "user", content: "more" }]));
    });
    expect(tails).toEqual(["malformed", "malformed"]);
    expect(made).toBe(0);
    // Asking about a result copies the answers before adding to them: the kept walk is unmoved,
    // and so is a copy when the kept walk goes on with the same result afterwards.
    expect(tailStateAfter(history, [result("c2")])).toBe("awaiting_model");
    expect(resumePointAfter(history)).toEqual(resumePoint(history));
    expect(tailStateAfter(history, [result("c2"), result("c2")])).toBe("malformed");
    history.push(result("c2"));
    expect(resumePointAfter(history)).toEqual(resumePoint(history));
    expect(tailStateAfter(history, [step(["c3"])])).toBe("tools_pending");
    expect(tailStateAfter(history, [result("c1")])).toBe("malformed");
    expect(resumePointAfter(history)).toEqual(resumePoint(history));
  });
});

/** How many Maps and Sets `run` constructs (the global constructors, counted for its duration). */
function countCollections(run: () => void): number {
  const globals = globalThis as { Map: MapConstructor; Set: SetConstructor };
  const { Map: RealMap, Set: RealSet } = globals;
  let made = 0;
  const counted = <C extends object>(real: C): C =>
    new Proxy(real, {
      construct(target, args, newTarget) {
        made++;
        return Reflect.construct(target as new (...a: unknown[]) => object, args, newTarget);
      },
    });
  globals.Map = counted(RealMap);
  globals.Set = counted(RealSet);
  try {
    run();
  } finally {
    globals.Map = RealMap;
    globals.Set = RealSet;
  }
  return made;
}
