/**
 * SessionEventsSwitch with small fakes: two PATCHes at once, the "off" one's drop landing in
 * Redis after the "on" one has written the stream, end with the stream Postgres says (on).
 */
import { describe, expect, it } from "vitest";
import { SessionEventsSwitch } from "../src/producer/session-events-switch.js";
import type { EventsSettingChange } from "../src/shared/store/session-events-setting.js";

function fakes() {
  const state = { on: true, stream: true, ops: [] as string[] };
  let release: () => void = () => {};
  const dropHeld = new Promise<void>((resolve) => (release = resolve));
  let holdNextDrop = true;
  const sw = new SessionEventsSwitch({
    setting: {
      set: async (_tenant, _id, on): Promise<EventsSettingChange> => {
        state.on = on;
        return { outcome: "set" };
      },
      isOn: async () => state.on,
    },
    sync: async () => {
      state.ops.push("sync");
      state.stream = true;
    },
    drop: async () => {
      state.ops.push("drop");
      if (holdNextDrop) {
        holdNextDrop = false;
        await dropHeld;
      }
      state.stream = false;
    },
    onStreamError: () => {},
  });
  return { state, sw, release: () => release() };
}

describe("SessionEventsSwitch", () => {
  it("an off whose drop lands after a later on's sync writes the stream again: the setting and the stream agree", async () => {
    const { state, sw, release } = fakes();
    const off = sw.patch("t", "s", { sessionEvents: false });
    await new Promise((resolve) => setImmediate(resolve));
    expect(await sw.patch("t", "s", { sessionEvents: true })).toEqual({ id: "s", sessionEvents: true });
    expect(state.stream).toBe(true);
    release();
    expect(await off).toEqual({ id: "s", sessionEvents: false });
    expect(state.on).toBe(true);
    expect(state.stream).toBe(true);
    expect(state.ops).toEqual(["drop", "sync", "sync"]);
  });

  it("one PATCH acts once on Redis when nobody else changes the setting", async () => {
    const { state, sw, release } = fakes();
    release();
    await sw.patch("t", "s", { sessionEvents: false });
    await sw.patch("t", "s", { sessionEvents: true });
    expect(state.ops).toEqual(["drop", "sync"]);
    expect(state.stream).toBe(true);
  });
});
