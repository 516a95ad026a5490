/** Freezing plain data throughout (pure apart from the freeze): shared parses, hooks' views. */

/** `value` itself, frozen throughout (plain data), and answered. */
export function deepFreeze<T>(value: T): T {
  if (value === null || typeof value !== "object" || Object.isFrozen(value)) return value;
  for (const key of Reflect.ownKeys(value)) deepFreeze((value as Record<string | symbol, unknown>)[key]);
  return Object.freeze(value);
}
