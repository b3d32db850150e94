// skillhost-sdk for JavaScript: write a skillhost skill as one function.
//
// A skill is a function `(ctx, params) => Result` exported as `execute` through `skill()`, in
// `app.js`; `skillhost skill build` turns it into `skill.wasm` with componentize-js. `params`
// is the JSON object the host has already validated against SKILL.md (defaults filled in);
// return a `Result` built with its small builder (a plain string counts as a success), or
// throw `InvalidParams` / `Failed`:
//
//     import { skill, Result, InvalidParams } from "./skillhost.js";
//
//     export const execute = skill((ctx, params) => {
//       const name = params.name.trim();
//       if (!name) throw new InvalidParams("name: must not be blank");
//       ctx.info(`greeting ${name}`);
//       return Result.success(`hello, ${name}`).meta("length", name.length);
//     });
//
// Host calls (memory search, session, log) throw `HostError` when the skill lacks the
// capability or the host refuses; its message is a sentence fit for the model, and an
// uncaught one becomes the call's `failed` error. Any other uncaught exception also becomes
// `failed`, with its name, message and first stack line, instead of "wasm unreachable".

import { search as memorySearch } from "skillhost:skill/memory@0.1.0";
import { get as sessionGet, set as sessionSet, keys as sessionKeys } from "skillhost:skill/session@0.1.0";
import { write as logWrite } from "skillhost:skill/log@0.1.0";

const KINDS = ["preference", "fact", "task-result", "snapshot", "pitfall", "general"];
const LEVELS = ["trace", "debug", "info", "warn", "error"];
const HOST_ERROR_PREFIX = { denied: "denied: ", "invalid-input": "invalid input: ", unavailable: "host unavailable: " };

/** The parameters were wrong; the message tells the caller how to fix the call. */
export class InvalidParams extends Error {
  constructor(message) {
    super(message);
    this.name = "InvalidParams";
  }
}

/** The skill failed for another reason; the message says what happened. */
export class Failed extends Error {
  constructor(message) {
    super(message);
    this.name = "Failed";
  }
}

/** A host call did not succeed: `kind` is `denied`, `invalid-input` or `unavailable`. */
export class HostError extends Error {
  constructor(kind, message) {
    super(`${HOST_ERROR_PREFIX[kind] ?? ""}${message}`);
    this.name = "HostError";
    this.kind = kind;
    this.reason = message;
  }
}

function hostCall(call, ...args) {
  try {
    return call(...args);
  } catch (e) {
    const variant = e && e.payload;
    if (variant && typeof variant.tag === "string") throw new HostError(variant.tag, String(variant.val));
    throw e;
  }
}

/** What a call returns: output text, status, metadata and proposed memories. */
export class Result {
  constructor(output, status) {
    this.output = String(output);
    this.status = status;
    this.metadata = [];
    this.memories = [];
  }

  /** The skill did what was asked; `output` holds the answer. */
  static success(output) {
    return new Result(output, "success");
  }

  /** The skill ran but could not do what was asked; `output` says why. */
  static failure(output) {
    return new Result(output, "failure");
  }

  /** The skill needs more input from the user; `question` is what to ask. */
  static requireMore(question) {
    return new Result(question, "require-more");
  }

  /** Add a machine-readable key/value fact (values are stored as text). */
  meta(key, value) {
    this.metadata.push([String(key), typeof value === "string" ? value : JSON.stringify(value)]);
    return this;
  }

  /**
   * Propose a memory (kept only with `memory: write`, within the skill's limits). `kind` is
   * one of preference, fact, task-result, snapshot, pitfall, general; `priority` 0..5.
   */
  remember(kind, content, priority = 2, tags = []) {
    if (!KINDS.includes(kind)) throw new TypeError(`memory kind ${JSON.stringify(kind)} is not one of ${KINDS.join(", ")}`);
    if (!Number.isInteger(priority) || priority < 0 || priority > 5) throw new RangeError(`memory priority ${priority} is not in 0..5`);
    this.memories.push({ kind, content: String(content), priority, tags: tags.map(String) });
    return this;
  }
}

/** The call's session and step, and the host interfaces. */
export class Context {
  constructor(sessionId, step) {
    this.sessionId = sessionId;
    this.step = step;
  }

  /** Long-term memory records relevant to `query`, best first (needs `memory: read`). */
  memorySearch(query, limit = 5) {
    return hostCall(memorySearch, String(query), limit);
  }

  /** A value from session working memory, or undefined (needs `session`). */
  sessionGet(key) {
    return hostCall(sessionGet, String(key));
  }

  /** Store a value in session working memory (needs `session`). */
  sessionSet(key, value) {
    hostCall(sessionSet, String(key), String(value));
  }

  /** All keys of session working memory, sorted (needs `session`). */
  sessionKeys() {
    return hostCall(sessionKeys);
  }

  /** A log line in the call report and the audit log (trace, debug, info, warn, error). */
  log(level, message) {
    if (!LEVELS.includes(level)) throw new TypeError(`log level ${JSON.stringify(level)} is not one of ${LEVELS.join(", ")}`);
    logWrite(level, String(message));
  }

  debug(message) {
    this.log("debug", message);
  }

  info(message) {
    this.log("info", message);
  }

  warn(message) {
    this.log("warn", message);
  }

  error(message) {
    this.log("error", message);
  }
}

function describe(e) {
  if (!(e instanceof Error)) return `uncaught exception: ${String(e)}`;
  const at = (e.stack || "").split("\n").find((line) => line.trim().length > 0);
  return `uncaught ${e.name}: ${e.message}${at ? ` (at ${at.trim()})` : ""}`;
}

/** The `execute` export: `export const execute = skill((ctx, params) => ...)` in `app.js`. */
export function skill(fn) {
  return function execute(call) {
    try {
      const params = call.params ? JSON.parse(call.params) : {};
      let result = fn(new Context(call.sessionId, call.step), params);
      if (typeof result === "string") result = Result.success(result);
      if (!(result instanceof Result)) throw new TypeError("the skill returned something other than a Result or a string");
      return { output: result.output, newMemories: result.memories, status: result.status, metadata: result.metadata };
    } catch (e) {
      if (e instanceof InvalidParams) throw { tag: "invalid-params", val: e.message };
      if (e instanceof Failed || e instanceof HostError) throw { tag: "failed", val: e.message };
      console.error(e && e.stack ? e.stack : String(e));
      throw { tag: "failed", val: describe(e) };
    }
  };
}
