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

// Grapheme_Extend (Mn, Me and Other_Grapheme_Extend) as hex code-point ranges, generated from
// Python's unicodedata 14.0.0: Rust's str Debug escapes these (StarlingMonkey has no \p{...}).
const GRAPHEME_EXTEND = (
  "300-36f,483-489,591-5bd,5bf,5c1-5c2,5c4-5c5,5c7,610-61a,64b-65f,670,6d6-6dc,6df-6e4,6e7-6e8,6ea-6ed," +
  "711,730-74a,7a6-7b0,7eb-7f3,7fd,816-819,81b-823,825-827,829-82d,859-85b,898-89f,8ca-8e1,8e3-902,93a," +
  "93c,941-948,94d,951-957,962-963,981,9bc,9be,9c1-9c4,9cd,9d7,9e2-9e3,9fe,a01-a02,a3c,a41-a42,a47-a48," +
  "a4b-a4d,a51,a70-a71,a75,a81-a82,abc,ac1-ac5,ac7-ac8,acd,ae2-ae3,afa-aff,b01,b3c,b3e-b3f,b41-b44,b4d," +
  "b55-b57,b62-b63,b82,bbe,bc0,bcd,bd7,c00,c04,c3c,c3e-c40,c46-c48,c4a-c4d,c55-c56,c62-c63,c81,cbc,cbf," +
  "cc2,cc6,ccc-ccd,cd5-cd6,ce2-ce3,d00-d01,d3b-d3c,d3e,d41-d44,d4d,d57,d62-d63,d81,dca,dcf,dd2-dd4,dd6," +
  "ddf,e31,e34-e3a,e47-e4e,eb1,eb4-ebc,ec8-ecd,f18-f19,f35,f37,f39,f71-f7e,f80-f84,f86-f87,f8d-f97," +
  "f99-fbc,fc6,102d-1030,1032-1037,1039-103a,103d-103e,1058-1059,105e-1060,1071-1074,1082,1085-1086," +
  "108d,109d,135d-135f,1712-1714,1732-1733,1752-1753,1772-1773,17b4-17b5,17b7-17bd,17c6,17c9-17d3,17dd," +
  "180b-180d,180f,1885-1886,18a9,1920-1922,1927-1928,1932,1939-193b,1a17-1a18,1a1b,1a56,1a58-1a5e,1a60," +
  "1a62,1a65-1a6c,1a73-1a7c,1a7f,1ab0-1ace,1b00-1b03,1b34-1b3a,1b3c,1b42,1b6b-1b73,1b80-1b81,1ba2-1ba5," +
  "1ba8-1ba9,1bab-1bad,1be6,1be8-1be9,1bed,1bef-1bf1,1c2c-1c33,1c36-1c37,1cd0-1cd2,1cd4-1ce0,1ce2-1ce8," +
  "1ced,1cf4,1cf8-1cf9,1dc0-1dff,200c,20d0-20f0,2cef-2cf1,2d7f,2de0-2dff,302a-302f,3099-309a,a66f-a672," +
  "a674-a67d,a69e-a69f,a6f0-a6f1,a802,a806,a80b,a825-a826,a82c,a8c4-a8c5,a8e0-a8f1,a8ff,a926-a92d," +
  "a947-a951,a980-a982,a9b3,a9b6-a9b9,a9bc-a9bd,a9e5,aa29-aa2e,aa31-aa32,aa35-aa36,aa43,aa4c,aa7c,aab0," +
  "aab2-aab4,aab7-aab8,aabe-aabf,aac1,aaec-aaed,aaf6,abe5,abe8,abed,fb1e,fe00-fe0f,fe20-fe2f,ff9e-ff9f," +
  "101fd,102e0,10376-1037a,10a01-10a03,10a05-10a06,10a0c-10a0f,10a38-10a3a,10a3f,10ae5-10ae6," +
  "10d24-10d27,10eab-10eac,10f46-10f50,10f82-10f85,11001,11038-11046,11070,11073-11074,1107f-11081," +
  "110b3-110b6,110b9-110ba,110c2,11100-11102,11127-1112b,1112d-11134,11173,11180-11181,111b6-111be," +
  "111c9-111cc,111cf,1122f-11231,11234,11236-11237,1123e,112df,112e3-112ea,11300-11301,1133b-1133c," +
  "1133e,11340,11357,11366-1136c,11370-11374,11438-1143f,11442-11444,11446,1145e,114b0,114b3-114b8," +
  "114ba,114bd,114bf-114c0,114c2-114c3,115af,115b2-115b5,115bc-115bd,115bf-115c0,115dc-115dd," +
  "11633-1163a,1163d,1163f-11640,116ab,116ad,116b0-116b5,116b7,1171d-1171f,11722-11725,11727-1172b," +
  "1182f-11837,11839-1183a,11930,1193b-1193c,1193e,11943,119d4-119d7,119da-119db,119e0,11a01-11a0a," +
  "11a33-11a38,11a3b-11a3e,11a47,11a51-11a56,11a59-11a5b,11a8a-11a96,11a98-11a99,11c30-11c36," +
  "11c38-11c3d,11c3f,11c92-11ca7,11caa-11cb0,11cb2-11cb3,11cb5-11cb6,11d31-11d36,11d3a,11d3c-11d3d," +
  "11d3f-11d45,11d47,11d90-11d91,11d95,11d97,11ef3-11ef4,16af0-16af4,16b30-16b36,16f4f,16f8f-16f92," +
  "16fe4,1bc9d-1bc9e,1cf00-1cf2d,1cf30-1cf46,1d165,1d167-1d169,1d16e-1d172,1d17b-1d182,1d185-1d18b," +
  "1d1aa-1d1ad,1d242-1d244,1da00-1da36,1da3b-1da6c,1da75,1da84,1da9b-1da9f,1daa1-1daaf,1e000-1e006," +
  "1e008-1e018,1e01b-1e021,1e023-1e024,1e026-1e02a,1e130-1e136,1e2ae,1e2ec-1e2ef,1e8d0-1e8d6," +
  "1e944-1e94a,1f3fb-1f3ff,e0020-e007f,e0100-e01ef"
)
  .split(",")
  .map((r) => r.split("-").map((h) => parseInt(h, 16)))
  .map(([a, b]) => [a, b ?? a]);

/** Whether Rust's Debug shows `cp` as itself: not a control, format, separator or combining character. */
function printable(cp) {
  if (cp === 0x20) return true;
  if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) return false;
  const hidden = [
    [0xa0, 0xa0], [0xad, 0xad], [0x600, 0x605], [0x61c, 0x61c], [0x6dd, 0x6dd], [0x70f, 0x70f], [0x1680, 0x1680],
    [0x180e, 0x180e], [0x2000, 0x200f], [0x2028, 0x202f], [0x205f, 0x2064], [0x2066, 0x206f], [0x3000, 0x3000],
    [0xd800, 0xf8ff], [0xfeff, 0xfeff], [0xfff9, 0xfffb], [0xe0001, 0xe0001], [0xe0020, 0xe007f], [0xf0000, 0x10ffff],
  ];
  if (hidden.some(([a, b]) => cp >= a && cp <= b)) return false;
  return !GRAPHEME_EXTEND.some(([a, b]) => cp >= a && cp <= b);
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
