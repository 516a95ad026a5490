/**
 * `npm run soak:report -- FILE.csv [--warmup-min N]`: the soak's report (bench/soak.ts) again,
 * from the CSV it wrote, e.g. while a soak is still running or after it was stopped.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { parseCsv, report } from "./soak-sample.js";
import { parsed, usage, wholeNumber } from "./support.js";

const { values, positionals } = parsed(() =>
  parseArgs({ options: { "warmup-min": { type: "string", default: "5" } }, allowPositionals: true }),
);
if (positionals.length !== 1) usage("give the soak's CSV file");
const samples = parseCsv(readFileSync(positionals[0]!, "utf8"));
if (samples.length === 0) usage(`${positionals[0]} holds no samples`);
const start = Math.min(...samples.map((s) => s.t));
console.log(report(samples, start + wholeNumber("warmup-min", values["warmup-min"], 0) * 60_000));
