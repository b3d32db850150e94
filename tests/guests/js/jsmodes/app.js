// skillhost's JavaScript SDK test skill: one mode per SDK feature (the same as pymodes).

import { skill, Result, InvalidParams } from "./skillhost.js";

export const execute = skill((ctx, params) => {
  const { mode, arg } = params;
  if (mode === "greet") {
    ctx.info(`greeting ${arg}`);
    return Result.success(`hello, ${arg} from ${ctx.sessionId} step ${ctx.step}`)
      .meta("chars", arg.length)
      .remember("fact", `greeted ${arg} in js`, 2, ["js"]);
  }
  if (mode === "bad") throw new InvalidParams('arg: give a number, e.g. {"arg": "3"}');
  if (mode === "boom") {
    const present = { present: 1 };
    return present.missing.value;
  }
  if (mode === "search") {
    const hits = ctx.memorySearch(arg, 5);
    return Result.success(hits.map((h) => h.content).join("\n")).meta("hits", hits.length);
  }
  if (mode === "session") {
    const before = ctx.sessionGet("py") ?? null;
    ctx.sessionSet("py", arg);
    return Result.success(JSON.stringify({ before, after: ctx.sessionGet("py") ?? null, keys: ctx.sessionKeys() }));
  }
  throw new InvalidParams(`mode: unknown mode ${JSON.stringify(mode)}`);
});
