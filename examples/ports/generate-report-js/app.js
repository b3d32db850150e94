// generate-report in JavaScript: a port of skills-src/generate-report/src/lib.rs (and the
// parts of skills-src/shared/findings it uses) with the same contract: the same report text,
// refusals, metadata and session use, checked against the Rust skill on the shared cases in
// cases.json (tests/ports.rs).
//
// Where JavaScript and Rust differ, the Rust behaviour is reproduced on purpose: `trim` and
// `split_whitespace` use Unicode White_Space (not JS's `\s`), lengths count code points, line
// numbers are u64 (BigInt: a citation past u64::MAX is not a citation), `{:?}` is Rust's
// string Debug form and JSON values print as serde_json prints them (keys sorted).

import { skill, Result, InvalidParams } from "./skillhost.js";

const DEFAULT_KEY = "findings";
const MAX_KEY_CHARS = 64;
const MAX_CLAIM_CHARS = 2000;
const MAX_EVIDENCE_PER_FINDING = 50;
const MAX_FINDINGS = 200;
const DEFAULT_TITLE = "Log analysis report";
const MAX_TITLE_CHARS = 200;
const U64_MAX = 18446744073709551615n;

const CITATION_HELP =
  "Every conclusion needs at least one evidence entry of the form L<n>: a line number from " +
  'read-log-file output, e.g. "L1243" or "L1243: RX overrun". Add the lines that support each conclusion ' +
  "(read-log-file with a keyword finds them), or drop the conclusion.";

// Rust's char::is_whitespace (Unicode White_Space).
const WS = "\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000";
const isWs = (c) => WS.includes(c);

/** Rust's `str::trim_start_matches` over a set of characters. */
function trimStartChars(s, set) {
  const chars = Array.from(s);
  let i = 0;
  while (i < chars.length && set.includes(chars[i])) i++;
  return chars.slice(i).join("");
}

/** Rust's `str::trim`. */
function trim(s) {
  const chars = Array.from(s);
  let a = 0;
  let b = chars.length;
  while (a < b && isWs(chars[a])) a++;
  while (b > a && isWs(chars[b - 1])) b--;
  return chars.slice(a, b).join("");
}

/** Every run of whitespace turned into one space, ends trimmed (`split_whitespace`). */
function oneLine(s) {
  const words = [];
  let word = "";
  for (const c of s) {
    if (isWs(c)) {
      if (word) words.push(word);
      word = "";
    } else {
      word += c;
    }
  }
  if (word) words.push(word);
  return words.join(" ");
}

const charLen = (s) => Array.from(s).length;

/** The first `max` characters of `s`, with `...` when something was cut. */
function clip(s, max) {
  const chars = Array.from(s);
  return chars.length > max ? `${chars.slice(0, max).join("")}...` : s;
}

/** Whether Rust's Debug shows `cp` as itself: not a control, format or separator character. */
function printable(cp) {
  if (cp === 0x20) return true;
  if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) return false;
  const hidden = [
    [0xa0, 0xa0], [0xad, 0xad], [0x600, 0x605], [0x61c, 0x61c], [0x6dd, 0x6dd], [0x70f, 0x70f], [0x1680, 0x1680],
    [0x180e, 0x180e], [0x2000, 0x200f], [0x2028, 0x202f], [0x205f, 0x2064], [0x2066, 0x206f], [0x3000, 0x3000],
    [0xd800, 0xf8ff], [0xfeff, 0xfeff], [0xfff9, 0xfffb], [0xe0001, 0xe0001], [0xe0020, 0xe007f], [0xf0000, 0x10ffff],
  ];
  return !hidden.some(([a, b]) => cp >= a && cp <= b);
}

/** Rust's `format!("{:?}", s)` for a str. */
function debugStr(s) {
  let out = '"';
  for (const c of s) {
    const cp = c.codePointAt(0);
    if (c === '"') out += '\\"';
    else if (c === "\\") out += "\\\\";
    else if (c === "\n") out += "\\n";
    else if (c === "\r") out += "\\r";
    else if (c === "\t") out += "\\t";
    else if (cp === 0) out += "\\0";
    else if (!printable(cp)) out += `\\u{${cp.toString(16)}}`;
    else out += c;
  }
  return `${out}"`;
}

/** serde_json's Display of a value: compact, object keys sorted (its default map). */
function jsonText(v) {
  if (v === null || v === undefined) return "null";
  if (Array.isArray(v)) return `[${v.map(jsonText).join(",")}]`;
  if (typeof v === "object") {
    const keys = Object.keys(v).sort(byUtf8);
    return `{${keys.map((k) => `${JSON.stringify(k)}:${jsonText(v[k])}`).join(",")}}`;
  }
  return JSON.stringify(v);
}

/** Rust's `String` order (UTF-8 bytes, which is code-point order). */
function byUtf8(a, b) {
  const x = Array.from(a, (c) => c.codePointAt(0));
  const y = Array.from(b, (c) => c.codePointAt(0));
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

const isDigit = (c) => c >= "0" && c <= "9";

/** `^[Ll]\d+` with the line number (a u64 >= 1) and what follows the digits, or null. */
function parseCitation(raw) {
  const s = trim(raw);
  if (!(s.startsWith("L") || s.startsWith("l"))) return null;
  const rest = s.slice(1);
  let n = 0;
  while (n < rest.length && isDigit(rest[n])) n++;
  if (n === 0) return null;
  const line = BigInt(rest.slice(0, n));
  if (line === 0n || line > U64_MAX) return null;
  return { line, tail: rest.slice(n) };
}

function isValidKey(key) {
  return charLen(key) <= MAX_KEY_CHARS && Array.from(key).every((c) => /[A-Za-z0-9]/.test(c) || "_-.:".includes(c));
}

/** The `findings` parameter as a list: an array, a single object, or the JSON text of either. */
function findingsList(v) {
  if (Array.isArray(v)) return { ok: v };
  if (v !== null && typeof v === "object") return { ok: [v] };
  if (typeof v === "string") {
    let inner;
    try {
      inner = JSON.parse(v);
    } catch {
      return { err: "a string" };
    }
    if (inner !== null && typeof inner === "object") return findingsList(inner);
    return { err: "a string" };
  }
  return { err: jsonText(v) };
}

const label = (c) => (c.to !== null ? `L${c.line}-L${c.to}` : `L${c.line}`);

/** A citation `{line, to, text}` from an evidence entry, or null. */
function citation(raw) {
  const parsed = parseCitation(raw);
  if (!parsed) return null;
  const { line } = parsed;
  let tail = parsed.tail;
  let to = null;
  if (tail.startsWith("-")) {
    const r = tail.slice(1);
    const r2 = r.startsWith("L") || r.startsWith("l") ? r.slice(1) : r;
    let m = 0;
    while (m < r2.length && isDigit(r2[m])) m++;
    if (m > 0) {
      const end = BigInt(r2.slice(0, m));
      if (end <= U64_MAX) {
        if (end > line) to = end;
        tail = r2.slice(m);
      }
    }
  }
  const text = trim(trimStartChars(tail, [":", " ", "-", "\u2014", "\t", ","]));
  return { line, to, text: oneLine(text) };
}

const sameCite = (a, b) => a.line === b.line && a.to === b.to && a.text === b.text;

function parseConclusion(i, v, source) {
  if (v === null || typeof v !== "object" || Array.isArray(v)) {
    throw new InvalidParams(`${source}[${i}]: expected an object {"claim": "...", "evidence": ["L123"]}, got ${jsonText(v)}`);
  }
  const rawClaim = Object.hasOwn(v, "claim") ? v.claim : null;
  let claim;
  if (typeof rawClaim === "string" && trim(rawClaim)) {
    claim = oneLine(rawClaim);
  } else if (rawClaim === null || typeof rawClaim === "string") {
    throw new InvalidParams(`${source}[${i}].claim: required; state the conclusion in one sentence`);
  } else {
    throw new InvalidParams(`${source}[${i}].claim: expected a string, got ${jsonText(rawClaim)}`);
  }
  if (charLen(claim) > MAX_CLAIM_CHARS) {
    throw new InvalidParams(
      `${source}[${i}].claim: longer than ${MAX_CLAIM_CHARS} characters; state the conclusion in a sentence or two`,
    );
  }
  const ev = Object.hasOwn(v, "evidence") ? v.evidence : null;
  const raw = ev === null ? [] : Array.isArray(ev) ? ev : [ev];
  if (raw.length > MAX_EVIDENCE_PER_FINDING) {
    throw new InvalidParams(
      `${source}[${i}].evidence: ${raw.length} entries; cite at most ${MAX_EVIDENCE_PER_FINDING} key lines per conclusion`,
    );
  }
  const cites = [];
  const rejected = [];
  for (const e of raw) {
    const c = typeof e === "string" ? citation(e) : null;
    if (c) {
      if (!cites.some((x) => sameCite(x, c))) cites.push(c);
    } else {
      rejected.push(typeof e === "string" ? clip(oneLine(e), 80) : clip(jsonText(e), 80));
    }
  }
  const rawNote = Object.hasOwn(v, "note") ? v.note : null;
  const note = typeof rawNote === "string" && oneLine(rawNote) ? oneLine(rawNote) : null;
  return { claim, cites, rejected, note };
}

function stringParam(obj, key, fallback) {
  const v = Object.hasOwn(obj, key) ? obj[key] : null;
  if (v === null) return fallback;
  if (typeof v === "string") return trim(v) ? oneLine(v) : fallback;
  throw new InvalidParams(`${key}: expected a string, got ${jsonText(v)}`);
}

const cmpBig = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

function render(title, conclusions, source) {
  const n = conclusions.length;
  let md = `# ${title}\n\n`;
  md += `${n} conclusion${n === 1 ? "" : "s"} from ${source}, each backed by log lines (\`L<n>\` is the 1-based line number in the analysed log).\n\n`;
  md += "## Conclusions\n\n";
  conclusions.forEach((c, i) => {
    md += `${i + 1}. ${c.claim} [${c.cites.map(label).join(", ")}]\n`;
  });
  md += "\n## Evidence\n";
  conclusions.forEach((c, i) => {
    md += `\n### ${i + 1}. ${clip(c.claim, 160)}\n\n`;
    for (const cite of c.cites) {
      md += cite.text ? `- \`${label(cite)}\`: ${cite.text}\n` : `- \`${label(cite)}\`\n`;
    }
    if (c.note !== null) md += `\n_Note: ${c.note}_\n`;
  });
  // Rust's BTreeMap<(line, Option<to>), _>: by line, then a single line before any range.
  const index = [];
  conclusions.forEach((c, i) => {
    for (const cite of c.cites) {
      let entry = index.find((e) => e.line === cite.line && e.to === cite.to);
      if (!entry) {
        entry = { line: cite.line, to: cite.to, users: [] };
        index.push(entry);
      }
      if (!entry.users.includes(i + 1)) entry.users.push(i + 1);
    }
  });
  index.sort((a, b) => {
    const byLine = cmpBig(a.line, b.line);
    if (byLine !== 0) return byLine;
    if (a.to === null || b.to === null) return (a.to === null ? 0 : 1) - (b.to === null ? 0 : 1);
    return cmpBig(a.to, b.to);
  });
  md += "\n## Cited lines\n\n| Line | Supports conclusion |\n|---|---|\n";
  for (const e of index) md += `| ${label(e)} | ${e.users.join(", ")} |\n`;
  return md;
}

export const execute = skill((ctx, params) => {
  if (params === null || typeof params !== "object" || Array.isArray(params)) {
    throw new InvalidParams(
      'parameters must be a JSON object like {"title": "...", "findings": [{"claim": "...", "evidence": ["L123"]}]}',
    );
  }
  const title = clip(stringParam(params, "title", DEFAULT_TITLE), MAX_TITLE_CHARS);
  const key = stringParam(params, "key", DEFAULT_KEY);
  if (!isValidKey(key)) {
    throw new InvalidParams(
      `key: ${debugStr(key)} is not a valid snapshot key; use the key given to write-analysis-snapshot (default "${DEFAULT_KEY}")`,
    );
  }

  const findingsParam = Object.hasOwn(params, "findings") ? params.findings : null;
  let given = [];
  if (findingsParam !== null) {
    const list = findingsList(findingsParam);
    if (list.err !== undefined) {
      const example = typeof findingsParam === "string" ? '; e.g. [{"claim": "...", "evidence": ["L123"]}]' : "";
      throw new InvalidParams(`findings: expected a list of {claim, evidence} objects, got ${list.err}${example}`);
    }
    given = list.ok;
  }
  let raw;
  let source;
  let sourceLabel;
  if (given.length > 0) {
    [raw, source, sourceLabel] = [given, "params", "the given findings"];
  } else {
    const stored = ctx.sessionGet(key);
    let list = [];
    const text = stored === undefined || stored === null ? "" : trim(stored);
    if (text) {
      let parsed;
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      if (!Array.isArray(parsed)) {
        throw new InvalidParams(
          `key: session key ${debugStr(key)} does not hold a findings list written by write-analysis-snapshot; pass findings directly or use the right key`,
        );
      }
      list = parsed;
    }
    if (list.length === 0) {
      throw new InvalidParams(
        `no findings to report: pass findings, e.g. [{"claim": "RX overruns coincide with flash erases", "evidence": ["L1243"]}], ` +
          `or run write-analysis-snapshot first (session key ${debugStr(key)} is empty)`,
      );
    }
    [raw, source, sourceLabel] = [list, `session:${key}`, `session snapshot "${key}"`];
  }
  if (raw.length > MAX_FINDINGS) {
    throw new InvalidParams(
      `findings: ${raw.length} conclusions; a report takes at most ${MAX_FINDINGS}, consolidate related ones`,
    );
  }

  const conclusions = raw.map((v, i) => parseConclusion(i, v, "findings"));

  // The guardrail: every conclusion must cite at least one line.
  const uncited = [];
  conclusions.forEach((c, i) => {
    if (c.cites.length > 0) return;
    const why =
      c.rejected.length === 0
        ? "no evidence given"
        : `evidence ${c.rejected.map(debugStr).join(", ")} is not an L<n> citation`;
    uncited.push(`- conclusion ${i + 1} "${clip(c.claim, 200)}": ${why}`);
  });
  if (uncited.length > 0) {
    ctx.warn(`refused report: ${uncited.length} of ${conclusions.length} conclusions uncited`);
    throw new InvalidParams(
      `Refusing to write the report: ${uncited.length} of ${conclusions.length} conclusion(s) cite no log line.\n${uncited.join("\n")}\n${CITATION_HELP}`,
    );
  }

  const ignored = conclusions.reduce((sum, c) => sum + c.rejected.length, 0);
  let md = render(title, conclusions, sourceLabel);
  if (ignored > 0) {
    md += `\n_${ignored} evidence ${ignored === 1 ? "entry was" : "entries were"} not an L<n> citation and ${ignored === 1 ? "was" : "were"} left out._\n`;
  }
  const citations = conclusions.reduce((sum, c) => sum + c.cites.length, 0);
  const distinct = new Set(conclusions.flatMap((c) => c.cites.map((x) => x.line)));
  ctx.info(`report: ${conclusions.length} conclusions, ${citations} citations`);
  return Result.success(md)
    .meta("conclusions", conclusions.length)
    .meta("citations", citations)
    .meta("distinct_lines", distinct.size)
    .meta("ignored_evidence", ignored)
    .meta("source", source)
    .meta("title", title);
});
