/** The built-in tools (contracts.md §5) and the tool registry, in a temporary directory. */
import { lstat, mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { ValidationError } from "../src/shared/errors.js";
import { CANCELLED_BEFORE_START_TEXT } from "../src/shared/resume-plan.js";
import { BUILTIN_TOOL_NAMES } from "../src/shared/tool-names.js";
import { builtinTools, safePath } from "../src/worker/tools/builtin.js";
import { executeTool, MAX_TOOL_RESULT_CHARS } from "../src/worker/tools/execute-tool.js";
import { type Tool, ToolRegistry, toolLabel } from "../src/worker/tools/registry.js";

let base: string;
let toolDir: string;
let outside: string;
let registry: ToolRegistry;

beforeAll(async () => {
  base = await mkdtemp(join(tmpdir(), "fleet-tools-"));
  toolDir = join(base, "tools");
  outside = join(base, "outside");
  await mkdir(outside, { recursive: true });
  registry = new ToolRegistry().register(...builtinTools(toolDir));
  // builtinTools creates the directory lazily; links are made after it exists.
  await mkdir(toolDir, { recursive: true });
  await symlink(outside, join(toolDir, "dir-link"));
  await writeFile(join(outside, "victim.txt"), "original\n");
  await symlink(join(outside, "victim.txt"), join(toolDir, "file-link.txt"));
  await symlink(join(outside, "not-yet.txt"), join(toolDir, "dangling-link.txt"));
  await symlink(join(outside, "gone"), join(toolDir, "dangling-dir"));
  await mkdir(join(toolDir, "real-sub"));
  await symlink(join(toolDir, "real-sub"), join(toolDir, "inner-link"));
});

afterAll(async () => {
  await rm(base, { recursive: true, force: true });
});

function run(name: string, args: Record<string, unknown>, signal = new AbortController().signal) {
  return executeTool(registry.get(name), name, args, { callId: "c1", callKey: "k", sessionId: "s1", signal });
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

describe("write_file and append_file", () => {
  it("write_file writes (and replaces) a file, creating directories", async () => {
    expect(await run("write_file", { path: "notes.txt", content: "hi" })).toEqual({
      success: true,
      content: "wrote notes.txt",
    });
    await run("write_file", { path: "notes.txt", content: "hello" });
    expect(await readFile(join(toolDir, "notes.txt"), "utf8")).toBe("hello");
    expect((await run("write_file", { path: "sub/dir/n.txt", content: "x" })).success).toBe(true);
    expect(await readFile(join(toolDir, "sub/dir/n.txt"), "utf8")).toBe("x");
  });

  it("append_file appends one line per call", async () => {
    expect((await run("append_file", { path: "log.txt", line: "one" })).success).toBe(true);
    expect((await run("append_file", { path: "log.txt", line: "two" })).success).toBe(true);
    expect(await readFile(join(toolDir, "log.txt"), "utf8")).toBe("one\ntwo\n");
  });

  const escapes: [string, () => string][] = [
    ["a parent path", () => "../x.txt"],
    ["a nested parent path", () => "sub/../../x.txt"],
    ["an absolute path outside", () => join(outside, "abs.txt")],
    ["a symlinked directory pointing outside", () => "dir-link/x.txt"],
    ["a new directory under a symlinked directory", () => "dir-link/newdir/x.txt"],
    ["a symlinked file pointing outside", () => "file-link.txt"],
    ["a dangling symlink pointing outside", () => "dangling-link.txt"],
    ["a path under a dangling symlinked directory", () => "dangling-dir/x.txt"],
  ];

  for (const tool of ["write_file", "append_file"]) {
    it.each(escapes)(`${tool} refuses %s`, async (_what, path) => {
      const args =
        tool === "write_file" ? { path: path(), content: "pwned" } : { path: path(), line: "pwned" };
      const result = await run(tool, args);
      expect(result.success).toBe(false);
      expect(result.content).toMatch(/outside/);
    });
  }

  it("left nothing outside the tool directory after the refusals", async () => {
    expect(await readFile(join(outside, "victim.txt"), "utf8")).toBe("original\n");
    expect(await exists(join(outside, "x.txt"))).toBe(false);
    expect(await exists(join(outside, "abs.txt"))).toBe(false);
    expect(await exists(join(outside, "newdir"))).toBe(false);
    expect(await exists(join(outside, "not-yet.txt"))).toBe(false);
    expect(await exists(join(outside, "gone"))).toBe(false);
    expect(await exists(join(base, "x.txt"))).toBe(false);
  });

  it("follows a symlink that stays inside the tool directory", async () => {
    expect((await run("write_file", { path: "inner-link/f.txt", content: "in" })).success).toBe(true);
    expect(await readFile(join(toolDir, "real-sub/f.txt"), "utf8")).toBe("in");
  });

  it("refuses the tool directory itself", async () => {
    const result = await run("write_file", { path: ".", content: "x" });
    expect(result.success).toBe(false);
  });

  it.each(["..notes", "...", "sub/..hidden", "..d/x.txt", "..\u2215x"])(
    "accepts %j, a name inside that begins with two dots (before: refused as outside)",
    async (path) => {
      for (const name of ["write_file", "append_file"]) {
        const args = name === "write_file" ? { path, content: "in" } : { path, line: "more" };
        const result = await run(name, args);
        expect(result).toEqual({
          success: true,
          content: `${name === "write_file" ? "wrote" : "appended to"} ${path}`,
        });
      }
      expect(await readFile(join(toolDir, path), "utf8")).toBe("inmore\n");
    },
  );

  it.each(["..", "../x.txt", "a/../../x.txt", "..d/../../x.txt"])("still refuses %j", async (path) => {
    const result = await run("write_file", { path, content: "x" });
    expect(result).toEqual({ success: false, content: `Refused: "${path}" is outside the tool directory.` });
  });

  it("accepts an absolute path inside the tool directory", async () => {
    const result = await run("write_file", { path: join(toolDir, "inside.txt"), content: "in" });
    expect(result.success).toBe(true);
    expect(await readFile(join(toolDir, "inside.txt"), "utf8")).toBe("in");
  });

  it.each([
    ["write_file", { content: "x" }, "path"],
    ["write_file", { path: "a.txt" }, "content"],
    ["write_file", { path: "", content: "x" }, "path"],
    ["append_file", { path: "a.txt", line: 3 }, "line"],
    ["sleep", { ms: -1 }, "ms"],
    ["sleep", { ms: "soon" }, "ms"],
    ["fail", {}, "message"],
  ] as [string, Record<string, unknown>, string][])(
    "%s with invalid arguments %j names %s",
    async (name, args, field) => {
      const result = await run(name, args);
      expect(result.success).toBe(false);
      expect(result.content).toMatch(/^Invalid arguments: /);
      expect(result.content).toContain(field);
    },
  );
});

describe("the O_NOFOLLOW open (no realpath per call)", () => {
  // Links made here, next to the ones above: at the top (the fast path, no lookup at all)
  // and one folder down (the folder's real path, resolved once).
  beforeAll(async () => {
    await writeFile(join(outside, "top-victim.txt"), "top original\n");
    await symlink(join(outside, "top-victim.txt"), join(toolDir, "top-out.txt"));
    await symlink(join(toolDir, "real-sub", "kept.txt"), join(toolDir, "top-in.txt"));
    await writeFile(join(toolDir, "real-sub", "kept.txt"), "kept\n");
    await symlink(join(toolDir, "real-sub", "never.txt"), join(toolDir, "top-dangling-in.txt"));
    await symlink(join(outside, "top-never.txt"), join(toolDir, "top-dangling-out.txt"));
    await mkdir(join(toolDir, "deep"));
    await symlink(join(outside, "top-victim.txt"), join(toolDir, "deep", "out.txt"));
    await symlink(outside, join(toolDir, "deep", "out-dir"));
  });

  const argsFor = (tool: string, path: string, text: string) =>
    tool === "write_file" ? { path, content: text } : { path, line: text };

  for (const tool of ["write_file", "append_file"]) {
    it(`${tool} refuses a top-level link to a file outside and leaves that file alone`, async () => {
      expect(await run(tool, argsFor(tool, "top-out.txt", "pwned"))).toEqual({
        success: false,
        content: 'Refused: "top-out.txt" leads outside the tool directory.',
      });
      expect(await readFile(join(outside, "top-victim.txt"), "utf8")).toBe("top original\n");
      expect((await lstat(join(toolDir, "top-out.txt"))).isSymbolicLink()).toBe(true);
    });

    it(`${tool} refuses a link to a file outside one folder down`, async () => {
      const result = await run(tool, argsFor(tool, "deep/out.txt", "pwned"));
      expect(result).toEqual({
        success: false,
        content: 'Refused: "deep/out.txt" leads outside the tool directory.',
      });
      expect(await readFile(join(outside, "top-victim.txt"), "utf8")).toBe("top original\n");
    });

    it(`${tool} refuses dangling links, inside or outside, and creates nothing`, async () => {
      for (const path of ["top-dangling-in.txt", "top-dangling-out.txt"]) {
        const result = await run(tool, argsFor(tool, path, "pwned"));
        expect(result).toEqual({
          success: false,
          content: `Refused: "${path}" leads outside the tool directory.`,
        });
      }
      expect(await exists(join(toolDir, "real-sub", "never.txt"))).toBe(false);
      expect(await exists(join(outside, "top-never.txt"))).toBe(false);
    });

    it(`${tool} refuses a linked folder leading outside, also for a file that exists there`, async () => {
      for (const path of [
        "deep/out-dir/top-victim.txt",
        "deep/out-dir/fresh.txt",
        "deep/out-dir/new/f.txt",
      ]) {
        const result = await run(tool, argsFor(tool, path, "pwned"));
        expect(result).toEqual({
          success: false,
          content: `Refused: "${path}" leads outside the tool directory.`,
        });
      }
      expect(await readFile(join(outside, "top-victim.txt"), "utf8")).toBe("top original\n");
      expect(await exists(join(outside, "fresh.txt"))).toBe(false);
      expect(await exists(join(outside, "new"))).toBe(false);
    });

    it(`${tool} creates missing nested folders`, async () => {
      const path = `fresh-${tool}/a/b/c.txt`;
      expect((await run(tool, argsFor(tool, path, "nested"))).success).toBe(true);
      expect(await readFile(join(toolDir, path), "utf8")).toBe(tool === "write_file" ? "nested" : "nested\n");
    });
  }

  it("write_file and append_file follow a top-level link that stays inside, keeping the link", async () => {
    expect(await run("write_file", { path: "top-in.txt", content: "via link" })).toEqual({
      success: true,
      content: "wrote top-in.txt",
    });
    expect(await readFile(join(toolDir, "real-sub", "kept.txt"), "utf8")).toBe("via link");
    expect((await lstat(join(toolDir, "top-in.txt"))).isSymbolicLink()).toBe(true);
    expect((await run("append_file", { path: "top-in.txt", line: "+1" })).success).toBe(true);
    expect(await readFile(join(toolDir, "real-sub", "kept.txt"), "utf8")).toBe("via link+1\n");
  });

  it("write_file truncates a longer file, at the top and nested", async () => {
    for (const path of ["trunc.txt", "deep/trunc.txt"]) {
      await run("write_file", { path, content: "a much longer first version\n" });
      expect((await run("write_file", { path, content: "short" })).success).toBe(true);
      expect(await readFile(join(toolDir, path), "utf8")).toBe("short");
    }
  });

  it("append_file keeps what is there, at the top and nested", async () => {
    for (const path of ["grow.txt", "deep/grow.txt"]) {
      await run("write_file", { path, content: "first\n" });
      await run("append_file", { path, line: "second" });
      await run("append_file", { path, line: "third" });
      expect(await readFile(join(toolDir, path), "utf8")).toBe("first\nsecond\nthird\n");
    }
  });

  it("writes into the real folder when the tool directory itself is reached through a link", async () => {
    const linked = join(base, "tools-link");
    await symlink(toolDir, linked);
    const viaLink = new ToolRegistry().register(...builtinTools(linked));
    const context = { callId: "c2", callKey: "k", sessionId: "s2", signal: new AbortController().signal };
    const write = (path: string) =>
      executeTool(viaLink.get("write_file"), "write_file", { path, content: "L" }, context);
    expect((await write("via-root-link.txt")).success).toBe(true);
    expect((await write("deep/via-root-link.txt")).success).toBe(true);
    expect(await readFile(join(toolDir, "via-root-link.txt"), "utf8")).toBe("L");
    expect(await readFile(join(toolDir, "deep/via-root-link.txt"), "utf8")).toBe("L");
    expect((await write("top-out.txt")).success).toBe(false);
    expect(await readFile(join(outside, "top-victim.txt"), "utf8")).toBe("top original\n");
  });

  it("keeps the exported safePath check", async () => {
    expect(await safePath(toolDir, "a/b.txt")).toBe(join(toolDir, "a/b.txt"));
    await expect(safePath(toolDir, "../x.txt")).rejects.toThrow('Refused: "../x.txt" is outside');
    await expect(safePath(toolDir, "top-out.txt")).rejects.toThrow('Refused: "top-out.txt" leads outside');
  });
});

describe("sleep and fail", () => {
  it("sleep waits and reports", async () => {
    expect(await run("sleep", { ms: 5 })).toEqual({ success: true, content: "slept 5 ms" });
  });

  it("sleep stops when its signal aborts", async () => {
    // Real timers, watched through spies: the sleep's own timer is told apart by its delay,
    // 61,237 ms, which nothing else sets (a 60 s one could be another file's leftover). Files share this process (isolate: false), so counting timers (fake ones, as
    // before) also counted one that an earlier file's leftovers set meanwhile. The spies are
    // restored in the finally, with no fake timers around: a spy restored after
    // `vi.useRealTimers()` put the fake setTimeout back and hung the next file (82120ad).
    const SLEEP_MS = 61_237;
    const set = vi.spyOn(globalThis, "setTimeout");
    const clear = vi.spyOn(globalThis, "clearTimeout");
    try {
      const controller = new AbortController();
      const pending = run("sleep", { ms: SLEEP_MS }, controller.signal);
      const turn = () => new Promise<"still sleeping">((r) => setImmediate(() => r("still sleeping")));
      const sleepTimer = () => {
        const at = set.mock.calls.findIndex(([, ms]) => ms === SLEEP_MS);
        return at < 0 ? undefined : (set.mock.results[at]?.value as NodeJS.Timeout);
      };
      while (sleepTimer() === undefined) await turn(); // asleep
      expect(clear).not.toHaveBeenCalledWith(sleepTimer());
      controller.abort(new Error("cancelled by shutdown"));
      // Ended within the abort's own turn, its timer cleared (not left to fire in a minute).
      expect(await Promise.race([pending, turn()])).toEqual({
        success: false,
        content: "cancelled by shutdown",
      });
      expect(clear).toHaveBeenCalledWith(sleepTimer());
    } finally {
      set.mockRestore();
      clear.mockRestore();
    }
    expect(globalThis.setTimeout).not.toBe(set);
  });

  it("sleep with an already aborted signal fails at once", async () => {
    const controller = new AbortController();
    controller.abort(new Error("already stopped"));
    // Its own run: a call whose run's signal is aborted before the tool starts runs no tool.
    const context = { callId: "c1", callKey: "k", sessionId: "s1", signal: controller.signal };
    await expect(registry.get("sleep")!.run({ ms: 60_000 }, context)).rejects.toThrow("already stopped");
    expect(await run("sleep", { ms: 60_000 }, controller.signal)).toEqual({
      success: false,
      content: CANCELLED_BEFORE_START_TEXT,
      notStarted: true,
    });
  });

  it("fail always fails with its message", async () => {
    expect(await run("fail", { message: "boom" })).toEqual({ success: false, content: "boom" });
    expect(await run("fail", { message: "boom" })).toEqual({ success: false, content: "boom" });
  });
});

describe("ToolRegistry", () => {
  const echo: Tool = {
    name: "echo",
    description: "echo",
    parameters: { type: "object" },
    async run(args, context) {
      return `${JSON.stringify(args)} ${context.callId} ${context.sessionId}`;
    },
  };

  it("returns the specs of the named tools, in order", () => {
    const r = new ToolRegistry().register(echo, ...builtinTools(toolDir));
    expect(r.specs(["sleep", "echo"]).map((s) => s.name)).toEqual(["sleep", "echo"]);
    expect(r.specs(["echo"])[0]).toEqual({
      name: "echo",
      description: "echo",
      parameters: { type: "object" },
    });
    expect(r.names()).toContain("write_file");
  });

  it("throws a ValidationError for an unknown tool name", () => {
    const r = new ToolRegistry().register(echo);
    let error: unknown;
    try {
      r.specs(["echo", "nope"]);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe("agent.tools");
    expect((error as ValidationError).message).toContain("nope");
  });

  it("registers exactly the built-in names the API knows before any worker starts", () => {
    expect(builtinTools(toolDir).map((t) => t.name)).toEqual([...BUILTIN_TOOL_NAMES]);
  });

  it("labels metrics only with registered names", () => {
    const r = new ToolRegistry().register(echo);
    expect(toolLabel(r, "echo")).toBe("echo");
    expect(toolLabel(r, "made_up")).toBe("unregistered");
  });

  it.each(["", "has space", "dots.not.allowed", "x".repeat(65), "slash/name"])(
    "refuses to register %j",
    (name) => {
      expect(() => new ToolRegistry().register({ ...echo, name })).toThrow(ValidationError);
    },
  );

  it("refuses a tool whose parameters schema is of another type than object (providers refuse it)", () => {
    expect(() => new ToolRegistry().register({ ...echo, parameters: { type: "string" } })).toThrow(
      'tool "echo": parameters must be a JSON Schema of type "object", not "string"',
    );
    // No type at all is a tool without arguments: providers get `type: "object"` added.
    expect(() => new ToolRegistry().register({ ...echo, parameters: {} })).not.toThrow();
  });

  it("passes the call id and session id to the tool", async () => {
    const result = await executeTool(
      echo,
      "echo",
      { a: 1 },
      {
        callId: "call-9",
        callKey: "sess-3:4:call-9",
        sessionId: "sess-3",
        signal: new AbortController().signal,
      },
    );
    expect(result).toEqual({ success: true, content: '{"a":1} call-9 sess-3' });
  });

  it("answers an unknown or unlisted tool with a failed result instead of throwing", async () => {
    expect(
      await executeTool(
        undefined,
        "ghost",
        {},
        { callId: "c", callKey: "k", sessionId: "s", signal: new AbortController().signal },
      ),
    ).toEqual({ success: false, content: 'no tool named "ghost" is available to this agent' });
  });

  it("turns a non-Error throw into a failed result", async () => {
    const weird: Tool = {
      ...echo,
      async run() {
        throw "plain string";
      },
    };
    expect(
      await executeTool(
        weird,
        "echo",
        {},
        { callId: "c", callKey: "k", sessionId: "s", signal: new AbortController().signal },
      ),
    ).toEqual({ success: false, content: "plain string" });
  });

  it("a result longer than 1,000,000 characters is cut there with a note, never inside a surrogate pair", async () => {
    const context = { callId: "c", callKey: "k", sessionId: "s", signal: new AbortController().signal };
    const huge: Tool = { ...echo, run: async () => "x".repeat(2_500_000) };
    const cut = await executeTool(huge, "echo", {}, context);
    expect(cut.success).toBe(true);
    expect(cut.content.startsWith("x".repeat(MAX_TOOL_RESULT_CHARS))).toBe(true);
    expect(cut.content.slice(MAX_TOOL_RESULT_CHARS)).toBe(
      "\n[truncated: the tool returned 2,500,000 characters; the first 1,000,000 are kept]",
    );
    // An emoji across the limit is kept whole or left out whole.
    const pair = await executeTool(
      { ...echo, run: async () => `${"y".repeat(MAX_TOOL_RESULT_CHARS - 1)}😀tail` },
      "echo",
      {},
      context,
    );
    expect(pair.content.slice(0, MAX_TOOL_RESULT_CHARS)).toBe(`${"y".repeat(MAX_TOOL_RESULT_CHARS - 1)}\n`);
    const exact = await executeTool(
      { ...echo, run: async () => "z".repeat(MAX_TOOL_RESULT_CHARS) },
      "echo",
      {},
      context,
    );
    expect(exact.content).toHaveLength(MAX_TOOL_RESULT_CHARS);
  });

  it("a tool that ignores its signal is no longer waited for once the grace after the abort has passed", async () => {
    const controller = new AbortController();
    const context = { callId: "c", callKey: "k", sessionId: "s", signal: controller.signal };
    const deaf: Tool = { ...echo, run: () => new Promise<string>(() => {}) };
    const pending = executeTool(deaf, "echo", {}, context, { abandonAfterMs: 50 });
    let settled = false;
    void pending.then(() => {
      settled = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(settled).toBe(false); // not aborted: a long tool is waited for
    controller.abort();
    expect(await pending).toEqual({
      success: false,
      content:
        "the tool did not stop within 50 ms of being asked to; it may still be running, and whatever it changes may or may not happen",
    });
    // A tool that honours the signal in time gives its own answer.
    const polite = new AbortController();
    const listening: Tool = {
      ...echo,
      run: (_args, { signal }) =>
        new Promise<string>((_resolve, reject) =>
          signal.addEventListener("abort", () => reject(new Error("stopped"))),
        ),
    };
    const stopped = executeTool(
      listening,
      "echo",
      {},
      { ...context, signal: polite.signal },
      {
        abandonAfterMs: 1_000,
      },
    );
    await new Promise((resolve) => setTimeout(resolve, 20));
    polite.abort();
    expect(await stopped).toEqual({ success: false, content: "stopped" });
  });

  it("a result that is not a string (a loosely typed user tool) is stored as text", async () => {
    const context = { callId: "c", callKey: "k", sessionId: "s", signal: new AbortController().signal };
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    for (const [returned, text] of [
      [42, "42"],
      [{ a: 1 }, '{"a":1}'],
      [[1, "x"], '[1,"x"]'],
      [undefined, ""],
      [null, ""],
      [true, "true"],
      [10n, "10"],
      [circular, "(the tool's result cannot be shown as text: Converting circular structure to JSON)"],
    ] as const) {
      // biome-ignore lint/suspicious/noExplicitAny: a JavaScript tool returns what it likes
      const loose: Tool = { ...echo, run: async () => returned as any };
      expect(await executeTool(loose, "echo", {}, context), String(text)).toEqual({
        success: true,
        content: text,
      });
    }
  });
});
