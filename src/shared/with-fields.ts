/**
 * `{ ...base, ...fields }` without the object spread: a new object with `base`'s own
 * enumerable keys and then `fields`', in the same order, a key of `fields` that `base` has
 * keeping its place with the new value.
 *
 * Why not the spread: in Node 20's V8 (11.3) an object literal that starts with a spread gets
 * a map (hidden class) cloned from the source's and detached from V8's transition tree, and
 * each property the literal then adds that the source lacks makes a new map, for every object,
 * since a detached map records no transitions. So `{ ...m, seq, createdAt }` allocated two maps
 * per call (200,000 objects in a micro-benchmark: 800 ms of CPU and 400,000 maps, against 30–45
 * ms and no new map for `Object.assign`), and no two of its results share a shape: every read of
 * them further on misses its inline cache, and optimized code that met one is deoptimized by the
 * next ("wrong map"). `Object.assign` onto a fresh object goes through the ordinary transitions
 * from the empty object's map, which all such objects share. The worker made about 24 detached
 * maps per session this way (V8's `--log-maps` in `npm run bench`; docs/performance.md).
 *
 * For objects whose keys are the code's own (a message, log fields, a deps bag): `Object.assign`
 * sets where the spread defines, which differs only for an own key named `__proto__`.
 */
export function withFields<A extends object, B extends object>(base: A, fields: B): A & B {
  return Object.assign({}, base, fields);
}
