/**
 * `fleet session delete ID` and `fleet batch delete ID`: erase a session (or a batch with all
 * its sessions) through the HTTP API (`DELETE /v1/…`). Prints the API's answer as JSON; exit
 * 0 when deleted, 2 for an id that does not exist (or is another tenant's) or an API that
 * cannot be reached, 1 for a 5xx.
 */
import { type AnswerOptions, printAnswer } from "./api-client.js";

export type DeleteOptions = AnswerOptions;

export function sessionDeleteCommand(id: string, options: DeleteOptions = {}): Promise<number> {
  return printAnswer(options, "fleet session delete", (client) => client.deleteSession(id));
}

export function batchDeleteCommand(id: string, options: DeleteOptions = {}): Promise<number> {
  return printAnswer(options, "fleet batch delete", (client) => client.deleteBatch(id));
}
