/** SharedNextReads (pure): reads that arrive during one share the next, never one begun before they asked. */
import { expect, it } from "vitest";
import { SharedNextReads } from "../src/shared/store/shared-next-reads.js";

function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

it("a read asked during another waits for a read of its own, shared with the others asked meanwhile", async () => {
  const reads = new SharedNextReads<number>();
  const loads: ReturnType<typeof deferred<number>>[] = [];
  const load = () => {
    const d = deferred<number>();
    loads.push(d);
    return d.promise;
  };
  const first = reads.read("b", load);
  const second = reads.read("b", load);
  const third = reads.read("b", load);
  const elsewhere = reads.read("c", load);
  expect(loads).toHaveLength(2); // "b" once, "c" once: the second and third wait for "b"'s first to settle
  loads[0]!.resolve(1);
  expect(await first).toBe(1);
  await new Promise((resolve) => setImmediate(resolve));
  expect(loads).toHaveLength(3); // one more read of "b", for both
  loads[2]!.resolve(2);
  expect([await second, await third]).toEqual([2, 2]);
  loads[1]!.reject(new Error("lost"));
  await expect(elsewhere).rejects.toThrow("lost");
  await new Promise((resolve) => setImmediate(resolve));
  expect(reads.size).toBe(0);
  // A failed read fails its sharers only; the next read is a new one.
  const failing = reads.read("b", load);
  const sharer = reads.read("b", load);
  loads[3]!.reject(new Error("down"));
  await expect(failing).rejects.toThrow("down");
  await new Promise((resolve) => setImmediate(resolve));
  loads[4]!.resolve(5);
  expect(await sharer).toBe(5);
  expect(await reads.read("b", async () => 6)).toBe(6);
});
