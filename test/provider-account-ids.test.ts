/**
 * A provider's error names the operator's account with it: OpenAI's rate limits quote the
 * organization ("Rate limit reached for gpt-4o in organization org-… on tokens per min"), its
 * refusals the project ("Project `proj_…` does not have access to model …"). That text is a
 * run's `error` and its session's parked reason, which every tenant of the fleet reads; the
 * fleet already scrubs OPENAI_ORG_ID and OPENAI_PROJECT_ID when they are set
 * (scrub-secrets.ts), but a key's own organization and project are named by the provider
 * whatever the environment says. They read `org-[redacted]` and `proj_[redacted]`. Against a
 * local HTTP server answering as OpenAI does.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { scrubSecrets } from "../src/shared/scrub-secrets.js";
import { callModel } from "../src/worker/call-model.js";
import { OpenAIModel } from "../src/worker/models/openai.js";

const ORG = "org-3xAmPlE9rGaNiZaTi0n1D2q";
const PROJECT = "proj_Ab12Cd34Ef56Gh78Ij90Kl12";
const RATE_LIMIT = `Rate limit reached for gpt-4o in organization ${ORG} on tokens per min (TPM): Limit 30000, Used 29518, Requested 1073. Please try again in 1.182s.`;
const NO_ACCESS = `Project \`${PROJECT}\` does not have access to model \`gpt-5\``;

let http: Server;
let baseUrl = "";
let answer: { status: number; message: string; code: string } = { status: 500, message: "", code: "" };

beforeAll(async () => {
  http = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(answer.status, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: answer.message, type: "requests", code: answer.code } }));
    });
  });
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(http.address() as AddressInfo).port}/v1`;
});
afterAll(async () => {
  http.closeAllConnections();
  await new Promise<void>((resolve) => http.close(() => resolve()));
});

async function failedStep(): Promise<string> {
  const model = new OpenAIModel({ provider: "openai", model: "gpt-4o", baseUrl }, { keyless: true });
  const step = await callModel(
    model,
    {
      sessionId: "s1",
      history: [{ role: "user", content: "hi" }],
      tools: [],
      signal: new AbortController().signal,
    },
    { sleep: async () => {} },
  );
  if (step.ok) throw new Error("the step was expected to fail");
  return step.error;
}

describe("the operator's OpenAI organization and project in the errors tenants read", () => {
  it("a rate limit's organization reads org-[redacted]", async () => {
    answer = { status: 429, message: RATE_LIMIT, code: "rate_limit_exceeded" };
    const error = await failedStep();
    // Before: "… in organization org-3xAmPlE9rGaNiZaTi0n1D2q on tokens per min …"
    expect(error).not.toContain(ORG);
    expect(error).toContain("Rate limit reached for gpt-4o in organization org-[redacted] on tokens per min");
  });

  it("a refusal's project reads proj_[redacted]", async () => {
    answer = { status: 403, message: NO_ACCESS, code: "model_not_found" };
    const error = await failedStep();
    expect(error).not.toContain(PROJECT);
    expect(error).toContain("Project `proj_[redacted]` does not have access to model `gpt-5`");
  });

  it("words that only begin like one are left alone (pure)", () => {
    expect(scrubSecrets("an org-wide limit; proj_x; see org-level settings")).toBe(
      "an org-wide limit; proj_x; see org-level settings",
    );
    expect(scrubSecrets(`${ORG} and ${PROJECT}`)).toBe("org-[redacted] and proj_[redacted]");
  });
});
