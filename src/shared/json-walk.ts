/**
 * One depth-first walk over a parsed JSON value, in document order, for the checks every
 * request body goes through (nesting, storable text, prototype keys, finite numbers).
 *
 * A body may hold millions of values (16 MB of `[0,0,…]`), so the walk allocates nothing per
 * value: its stack holds one frame per open container (memory grows with the nesting, not
 * with the size), and a value's path is built only when asked for — once, for the error.
 * Iterative, so any nesting depth is safe.
 */

export type JsonPath = (string | number)[];

/**
 * What a visit decides for a value: `"stop"` ends the walk at it (its path is returned),
 * `"skip"` leaves a container's children out, `undefined` goes on.
 */
export type Verdict = "stop" | "skip" | undefined;

/**
 * `value` at `path()` (its key is the path's last element, null for the root), `depth`
 * containers below the root. `path` builds a new array; call it only when needed.
 */
export type Visit = (
  value: unknown,
  key: string | number | null,
  depth: number,
  path: () => JsonPath,
) => Verdict;

type Frame = { value: object; keys: string[] | null; next: number; key: string | number | null };

const isContainer = (value: unknown): value is object => value !== null && typeof value === "object";

function frameOf(value: object, key: string | number | null): Frame {
  return { value, keys: Array.isArray(value) ? null : Object.keys(value), next: 0, key };
}

/** The path of the first value `visit` stops at, or undefined when it stops at none. */
export function findInJson(root: unknown, visit: Visit): JsonPath | undefined {
  const stack: Frame[] = [];
  let current: string | number | null = null;
  // The frames below the root name the containers; `current` names the value being visited.
  const path = (): JsonPath => {
    const out: JsonPath = [];
    for (let i = 1; i < stack.length; i++) out.push(stack[i]!.key as string | number);
    if (current !== null) out.push(current);
    return out;
  };
  const first = visit(root, null, 0, path);
  if (first === "stop") return [];
  if (first === "skip" || !isContainer(root)) return undefined;
  stack.push(frameOf(root, null));
  while (stack.length > 0) {
    const top = stack[stack.length - 1]!;
    const keys = top.keys;
    if (top.next >= (keys ? keys.length : (top.value as unknown[]).length)) {
      stack.pop();
      continue;
    }
    const index = top.next++;
    const key: string | number = keys ? keys[index]! : index;
    // An own `__proto__` key (JSON.parse makes one) shadows the accessor: this reads it.
    const child = keys ? (top.value as Record<string, unknown>)[key] : (top.value as unknown[])[index];
    current = key;
    const verdict = visit(child, key, stack.length, path);
    if (verdict === "stop") return path();
    if (verdict !== "skip" && isContainer(child)) stack.push(frameOf(child, key));
  }
  return undefined;
}
