/** CPU a process has used, read from /proc (Linux): for tests that check a process does not spin. */
import { readFile } from "node:fs/promises";

/** User and system CPU seconds process `pid` has used since it started. */
export async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8");
  // Fields after the command name (which may hold spaces), from the state: utime and stime
  // are fields 14 and 15 of the line, 12 and 13 after it, in clock ticks (100 a second).
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}
