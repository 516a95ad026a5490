/** `fleet resume-point SESSION_ID`: the resume point of a stored session (writes nothing). */
import { loadConfig } from "../shared/config.js";
import { openDatabase } from "../shared/db/client.js";
import { NotFoundError } from "../shared/errors.js";
import { checkDatabase } from "../shared/preflight.js";
import type { ResumePointJson } from "../shared/resume-point.js";
import { SessionQueries } from "../shared/store/session-queries.js";

export async function storedResumePoint(sessionId: string): Promise<ResumePointJson> {
  const config = loadConfig();
  await checkDatabase(config.databaseUrl, config.preflightTimeoutMs);
  const database = openDatabase(config.databaseUrl, { max: 1 });
  try {
    const queries = new SessionQueries(database);
    if (!(await queries.getSession(sessionId))) throw new NotFoundError(`session ${sessionId}`);
    return await queries.resumePoint(sessionId);
  } finally {
    await database.close();
  }
}
