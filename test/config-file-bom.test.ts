/**
 * FLEET_MODEL_ENDPOINTS and FLEET_PRICES may name a JSON file. One saved with a UTF-8 byte
 * order mark (Notepad's "UTF-8 with BOM", Windows PowerShell's `Out-File -Encoding utf8`)
 * stopped every role at start with `is not valid JSON: Unexpected token '\uFEFF'`, a character
 * no editor shows. The mark is skipped, as RFC 8259 lets a JSON reader do and as the CLI's own
 * files (`fleet resume-point --file`, batch files, exports) and `.env` skip it.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseModelEndpoints } from "../src/shared/model-endpoints.js";
import { parsePrices } from "../src/shared/prices.js";

const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

describe("a JSON file named by FLEET_MODEL_ENDPOINTS or FLEET_PRICES, saved with a byte order mark", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "config-file-bom-"));
  });
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("FLEET_MODEL_ENDPOINTS reads it as its JSON", async () => {
    const file = join(dir, "endpoints.json");
    await writeFile(
      file,
      Buffer.concat([
        BOM,
        Buffer.from('{"vllm": {"provider": "openai", "baseUrl": "http://10.0.0.5:8000/v1"}}\r\n'),
      ]),
    );
    expect([...parseModelEndpoints(file, {}).keys()]).toEqual(["vllm"]);
  });

  it("FLEET_PRICES reads it as its JSON", async () => {
    const file = join(dir, "prices.json");
    await writeFile(file, Buffer.concat([BOM, Buffer.from('{"my-model": {"input": 1, "output": 2}}\r\n')]));
    expect(parsePrices(file, dir)).toEqual(parsePrices('{"my-model": {"input": 1, "output": 2}}', dir));
  });
});
