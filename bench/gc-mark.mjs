/**
 * Preloaded into a benchmark's worker by `bench:scale --gc` (gc-trace.ts GC_MARK_ARGS, with
 * `--expose-gc --trace-gc-nvp`): each SIGUSR2 runs a full collection and then prints
 * `gc-mark N` (N = 1, 2, …). The `--trace-gc-nvp` lines between two marks then add up to what
 * the process allocated between them, exactly: each line counts the bytes allocated since
 * the collection before it, so a window cut at arbitrary points counted the allocations
 * before it up to its first collection and missed those after its last (up to one young
 * generation each way).
 */
let marks = 0;
process.on("SIGUSR2", () => {
  globalThis.gc();
  marks++;
  process.stdout.write(`gc-mark ${marks}\n`);
});
