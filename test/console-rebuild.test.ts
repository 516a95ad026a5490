/**
 * The console's route (contracts §14) across a rebuild under a running API: the API read
 * index.html once at start, so after `npm run build:console` it kept naming the old
 * content-hashed assets, which the build had removed — a blank page until a restart. Now
 * index.html is read again when it changed on disk (and only then), the assets are looked up
 * at each request, and a console built after the API started is served too. The route
 * in-process, over a scratch directory laid out as Vite lays out dist/console.
 */
import { mkdir, mkdtemp, readdir, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Fastify, { type FastifyInstance } from "fastify";
import { afterAll, describe, expect, it } from "vitest";
import { consolePages } from "../src/producer/console-route.js";

/** What `vite build` with `emptyOutDir` does: the directory emptied, then the new files written. */
async function build(dir: string, hash: string, extra = ""): Promise<void> {
  for (const entry of await readdir(dir)) await rm(join(dir, entry), { recursive: true, force: true });
  await mkdir(join(dir, "assets"));
  await writeFile(join(dir, "assets", `index-${hash}.js`), `console.log("${hash}");`);
  await writeFile(
    join(dir, "index.html"),
    `<!doctype html><html><head><script type="module" src="/console/assets/index-${hash}.js"></script></head><body><div id="app"></div>${extra}</body></html>`,
  );
}

/** The route of an API started now over `dir`. */
async function startRoute(dir: string): Promise<FastifyInstance> {
  const app = Fastify();
  app.register(consolePages(dir));
  await app.ready();
  return app;
}

describe("the console route across rebuilds", () => {
  const dirs: string[] = [];
  const apps: FastifyInstance[] = [];
  const scratch = async () => {
    const dir = await mkdtemp(join(tmpdir(), "fleet-console-build-"));
    dirs.push(dir);
    return dir;
  };
  const started = async (dir: string) => {
    const app = await startRoute(dir);
    apps.push(app);
    return async (url: string) => app.inject({ method: "GET", url });
  };

  afterAll(async () => {
    for (const app of apps) await app.close();
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it("serves each rebuild's page and assets without a restart", async () => {
    const dir = await scratch();
    await build(dir, "AAAA1111");
    const get = await started(dir);
    const first = await get("/console");
    expect(first.statusCode).toBe(200);
    expect(first.body).toContain("index-AAAA1111.js");
    expect((await get("/console/assets/index-AAAA1111.js")).body).toBe('console.log("AAAA1111");');

    // Rebuilt under the running API: other hashes, a page of another length.
    await build(dir, "BBBB2222", "<!-- rebuilt -->");
    for (const url of ["/console", "/console/sessions/abc", "/console/batches/x"]) {
      const page = await get(url);
      expect(page.statusCode, url).toBe(200);
      expect(page.body, url).toContain("index-BBBB2222.js");
      expect(page.body, url).not.toContain("AAAA1111");
    }
    const asset = await get("/console/assets/index-BBBB2222.js");
    expect(asset.statusCode).toBe(200);
    expect(asset.body).toBe('console.log("BBBB2222");');
    expect((await get("/console/assets/index-AAAA1111.js")).statusCode).toBe(404);

    // A rebuild whose page has the same length: told apart by its time (and file).
    await build(dir, "CCCC3333", "<!-- rebuilt -->");
    expect((await get("/console")).body).toContain("index-CCCC3333.js");

    // Emptied (a build on its way): the page that says to build, not a page naming lost files.
    await rm(join(dir, "index.html"));
    expect((await get("/console")).statusCode).toBe(503);
  });

  it("serves a console built after the API started", async () => {
    const dir = await scratch();
    const get = await started(dir);
    const before = await get("/console");
    expect(before.statusCode).toBe(503);
    expect(before.body).toContain("npm run build");
    await build(dir, "FFFF6666");
    expect((await get("/console/sessions/abc")).body).toContain("index-FFFF6666.js");
    expect((await get("/console/assets/index-FFFF6666.js")).statusCode).toBe(200);
  });

  it("reads index.html again only when it changed, not at each request", async () => {
    const dir = await scratch();
    await build(dir, "DDDD4444");
    const index = join(dir, "index.html");
    // A time in whole seconds, which utimes sets back exactly.
    const then = new Date("2026-01-01T00:00:00Z");
    await utimes(index, then, then);
    const get = await started(dir);
    const html = (await get("/console")).body;
    expect(html).toContain("index-DDDD4444.js");
    // Rewritten in place with the same size and its old time: the cached page is served,
    // which shows the file was not read again.
    await writeFile(index, html.replace("DDDD4444", "EEEE5555"));
    await utimes(index, then, then);
    expect((await get("/console")).body).toContain("index-DDDD4444.js");
    // Touched: read again.
    const later = new Date(then.getTime() + 1_000);
    await utimes(index, later, later);
    expect((await get("/console")).body).toContain("index-EEEE5555.js");
  });
});
