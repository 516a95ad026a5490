/**
 * `fleet session events ID on|off`: turn a session's event stream on or off after its creation
 * (`PATCH /v1/sessions/:id`). Prints `{id, sessionEvents}`; exit 0 when set, 2 for a word other
 * than on or off, an id that does not exist (or is another tenant's), on for a session of a
 * batch created without streams, or an API that cannot be reached; 1 for a 5xx.
 */
import { ValidationError } from "../shared/errors.js";
import { type AnswerOptions, printAnswer } from "./api-client.js";

export function sessionEventsCommand(
  id: string,
  setting: string,
  options: AnswerOptions = {},
): Promise<number> {
  if (setting !== "on" && setting !== "off")
    throw new ValidationError("setting", `must be on or off, not ${JSON.stringify(setting)}`);
  return printAnswer(options, "fleet session events", (client) =>
    client.setSessionEvents(id, setting === "on"),
  );
}
