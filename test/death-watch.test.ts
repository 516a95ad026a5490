/**
 * DeathWatch (sweeper/liveness.ts): a worker or sweeper counts as dead only when two looks at
 * least `confirmMs` apart both missed it. `observe` judges a whole set of owners at once and
 * forgets the rest; `observeOne` (sweep locks' holders, met one at a time) keeps the others'
 * observations, and its memory is bounded.
 */
import { describe, expect, it } from "vitest";
import { DeathWatch } from "../src/sweeper/liveness.js";

describe("DeathWatch", () => {
  it("observe: dead once missing in two looks confirmMs apart; seen again, it starts over", () => {
    const watch = new DeathWatch(150);
    expect(watch.observe(new Set(), ["a", "b"], 0)).toEqual(new Set());
    expect(watch.pending()).toBe(true);
    expect(watch.observe(new Set(["b"]), ["a", "b"], 100)).toEqual(new Set());
    expect(watch.observe(new Set(["b"]), ["a", "b"], 150)).toEqual(new Set(["a"]));
    // `a` no longer owns anything: forgotten, so missing again starts a new confirmation.
    expect(watch.observe(new Set(), ["b"], 200)).toEqual(new Set());
    expect(watch.observe(new Set(), ["a"], 400)).toEqual(new Set());
  });

  it("observeOne: one holder at a time, the others' looks kept", () => {
    const watch = new DeathWatch(150);
    expect(watch.observeOne("a", false, 0)).toBe(false);
    expect(watch.observeOne("b", false, 50)).toBe(false);
    expect(watch.observeOne("a", false, 100)).toBe(false); // not confirmMs apart yet
    expect(watch.observeOne("a", false, 150)).toBe(true);
    expect(watch.observeOne("b", false, 200)).toBe(true); // b's first look was kept
    expect(watch.observeOne("b", true, 250)).toBe(false); // listed again: a reconnect
    expect(watch.observeOne("b", false, 500)).toBe(false); // a new confirmation starts
  });

  it("observeOne remembers at most maxMissing ids, then starts over", () => {
    const watch = new DeathWatch(150, 2);
    watch.observeOne("a", false, 0);
    watch.observeOne("b", false, 0);
    watch.observeOne("c", false, 0); // the memory is full: cleared, then c remembered
    expect(watch.observeOne("a", false, 300)).toBe(false);
    expect(watch.observeOne("c", false, 300)).toBe(true);
  });

  it("reset forgets every look", () => {
    const watch = new DeathWatch(150);
    watch.observeOne("a", false, 0);
    watch.reset();
    expect(watch.pending()).toBe(false);
    expect(watch.observeOne("a", false, 200)).toBe(false);
  });
});
