/**
 * The `parkedReason` filter of the session list and of a batch's resume (README, contracts
 * §14): a parked reason code (`attempts_exhausted`), or a whole stored reason with its detail
 * (`attempts_exhausted: 3 automatic resumes …`, or its part before a further ": "), as the
 * list shows it (session-list.ts matches the value or the value followed by ":"). Every stored
 * reason is `CODE` or `CODE: detail` with CODE one of PARK_REASONS, so a filter whose code is
 * none of them (a typo, `attemps_exhausted`; another word, `failed`) can match nothing: it is
 * refused with the allowed codes named, instead of answering an empty list or a resume of
 * nothing (`202` with `resumed: []`), which read as "nothing is parked for that".
 */
import { PARK_REASONS } from "./resume-policy.js";

const CODES: ReadonlySet<string> = new Set(PARK_REASONS);

/** Why `value` can be no parked-reason filter, or undefined when it can be one. */
export function parkedReasonFilterProblem(value: string): string | undefined {
  const colon = value.indexOf(":");
  const code = colon === -1 ? value : value.slice(0, colon);
  if (!CODES.has(code))
    return `must be a parked reason (${PARK_REASONS.join(", ")}), alone or followed by ": " and its detail as the session shows it; ${JSON.stringify(code)} is none`;
  // The stored detail follows ": " (fenced-writes.ts parkedReason, sweep-queries.ts park): a
  // code followed by ":" without the space, or by nothing, matches no stored reason either.
  if (colon !== -1 && (value[colon + 1] !== " " || value.length === colon + 2))
    return `must be a parked reason alone (${code}) or followed by ": " and its detail as the session shows it`;
  return undefined;
}
