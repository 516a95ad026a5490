/**
 * A tool that throws an Error with a huge message: its keys are scrubbed (result-text.ts), and
 * it is stored cut to MAX_TOOL_RESULT_CHARS. The whole message was scrubbed before the cut: a
 * 100 MB message held the worker's event loop ~0.9 s for text that was then thrown away.
 */
import { describe, expect, it } from "vitest";
import { REDACTED, scrubSecrets } from "../src/shared/scrub-secrets.js";
import { executeTool } from "../src/worker/tools/execute-tool.js";
import type { Tool } from "../src/worker/tools/registry.js";
import { boundedErrorText, MAX_TOOL_RESULT_CHARS } from "../src/worker/tools/result-text.js";

const KEY = "k3y-0f-the-w0rker-that-must-n0t-leak";
const env = { GATEWAY_API_KEY: KEY };

describe("a tool's huge error message", () => {
  it("is cut before it is scrubbed: the scrubber is given little more than the stored bound", () => {
    const given: number[] = [];
    const recording = (text: string, secrets: readonly string[]) => {
      given.push(text.length);
      return scrubSecrets(text, secrets);
    };
    const message = "x".repeat(20_000_000);
    const text = boundedErrorText(new Error(message), { env, scrub: recording });
    expect(given).toHaveLength(1);
    expect(given[0]).toBeLessThan(MAX_TOOL_RESULT_CHARS + 100_000);
    expect(text.startsWith("x".repeat(MAX_TOOL_RESULT_CHARS))).toBe(true);
    // The note says how long the message really was, not how long the scrubbed piece was.
    expect(text).toMatch(
      /\[truncated: the tool returned 20,000,000 characters; the first 1,000,000 are kept\]$/,
    );
  });

  it("still scrubs a key that straddles the cut, as a value of the environment or by its shape", () => {
    for (const secret of [KEY, `sk-${"a".repeat(5_000)}`, `Bearer ${"b".repeat(5_000)}`]) {
      // It begins 12 characters before the cut, after a blank (a key's shape begins at a word).
      const start = MAX_TOOL_RESULT_CHARS - 12;
      const message = `${"x".repeat(start - 1)} ${secret} ${"y".repeat(3_000_000)}`;
      const text = boundedErrorText(new Error(message), { env });
      const scrubbed = scrubSecrets(` ${secret} ${"y".repeat(12)}`, [KEY]).slice(1, 13);
      expect(text.slice(start, MAX_TOOL_RESULT_CHARS), secret.slice(0, 10)).toBe(scrubbed);
      expect(text).not.toContain(secret.slice(0, 20));
      expect(text).toContain(`the tool returned ${message.length.toLocaleString("en")} characters`);
    }
  });

  it("is what executeTool answers, and a short one is scrubbed whole and not cut", async () => {
    const tool: Tool = {
      name: "t",
      description: "",
      parameters: { type: "object", properties: {} },
      run: async () => {
        throw new Error(`upstream refused api_key=${KEY}`);
      },
    };
    const context = { callId: "c", callKey: "k", sessionId: "s", signal: new AbortController().signal };
    expect(await executeTool(tool, "t", {}, context)).toEqual({
      success: false,
      content: `upstream refused api_key=${REDACTED}`,
    });
    expect(boundedErrorText(new Error(`a ${KEY} b`), { env })).toBe(`a ${REDACTED} b`);
  });
});
