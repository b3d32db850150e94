"""query-issue-kb in Python: a port of skills-src/query-issue-kb/src/lib.rs with the same
contract (ranking, output text, status, metadata, errors), checked against the Rust skill on
the shared cases in cases.json (tests/ports.rs).

Where Rust and Python differ, the Rust behaviour is reproduced on purpose: lengths that Rust
counts in bytes are counted in UTF-8 bytes here, `trim` strips Unicode White_Space only,
`{:?}` is Rust's string Debug form, JSON values print as serde_json prints them, and the
knowledge base is parsed by a small reader that reports errors in serde_json's words and
positions, so a broken file gives the same message in both languages.
"""

import math
import os
import unicodedata

from skillhost_sdk import Context, Failed, InvalidParams, Result, world

WORKSPACE = "/workspace"
DEFAULT_KB = "/workspace/kb.json"
DEFAULT_TOP = 3
MAX_TOP = 20
MAX_KB_BYTES = 32 * 1024 * 1024
SHOW_FIELD_CHARS = 700
MAX_QUERY_CHARS = 2000
K1 = 1.2

# (entry field, weight, BM25 length normalization b), in the Rust order.
FIELDS = [
    ("id", 3.0, 0.0),
    ("tags", 3.0, 0.3),
    ("title", 2.5, 0.3),
    ("symptom", 2.0, 0.75),
    ("cause", 1.0, 0.75),
    ("fix", 1.0, 0.75),
]

STOP_WORDS = frozenset(
    """a an and are as at be by can did do does for from has have how i in into is it its my of on or our so
    that the their then there these this to was we were what when where which while who why will with you your
    after before during about any some all also get got issue problem""".split()
)

# Rust's `char::is_whitespace` (Unicode White_Space), which `str::trim` strips; Python's
# `str.strip` also strips U+001C..U+001F.
WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B)) + "\u2028\u2029\u202f\u205f\u3000"


def rust_trim(s):
    return s.strip(WHITE_SPACE)


def rust_debug(s):
    """`format!("{:?}", s)` for a str."""
    out = ['"']
    for c in s:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif c == "\0":
            out.append("\\0")
        elif not _printable(c):
            out.append("\\u{%x}" % ord(c))
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def _printable(c):
    """Whether Rust's str Debug shows `c` as itself: not a control, format, separator or
    unassigned character, and not Grapheme_Extend (combining marks are escaped too)."""
    if c == " ":
        return True
    cat = unicodedata.category(c)
    if cat in ("Mn", "Me") or ord(c) in OTHER_GRAPHEME_EXTEND:
        return False
    return cat not in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs")


# Grapheme_Extend beyond the Mn and Me categories (Unicode's Other_Grapheme_Extend).
OTHER_GRAPHEME_EXTEND = frozenset(
    [0x09BE, 0x09D7, 0x0B3E, 0x0B57, 0x0BBE, 0x0BD7, 0x0CC2, 0x0CD5, 0x0CD6, 0x0D3E, 0x0D57, 0x0DCF, 0x0DDF]
    + [0x1B35, 0x200C, 0x302E, 0x302F, 0xFF9E, 0xFF9F, 0x1133E, 0x11357, 0x114B0, 0x114BD, 0x115AF, 0x11930]
    + [0x1D165] + list(range(0x1D16E, 0x1D173)) + list(range(0xE0020, 0xE0080)) + list(range(0x1F3FB, 0x1F400))
)

# Marks that Unicode counts as Alphabetic (Other_Alphabetic: vowel signs and the like),
# which Rust's `is_alphanumeric` accepts and Python's `isalnum` does not; by name, as
# Python's unicodedata has no property lookup.
_OTHER_ALPHABETIC_NAMES = ("VOWEL SIGN", "SIGN ANUSVARA", "SIGN VISARGA", "SIGN CANDRABINDU", "LENGTH MARK", "CIRCLED LATIN")


def _is_alphabetic(c):
    if c.isalpha() or unicodedata.category(c) == "Nl":
        return True
    if unicodedata.category(c) in ("Mn", "Mc", "So"):
        name = unicodedata.name(c, "")
        return any(part in name for part in _OTHER_ALPHABETIC_NAMES)
    return False


def json_text(v):
    """serde_json's Display of a value: compact, keys sorted (serde_json's default map)."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _float_text(v)
    if isinstance(v, str):
        return _json_string(v)
    if isinstance(v, list):
        return "[" + ",".join(json_text(x) for x in v) + "]"
    return "{" + ",".join(_json_string(k) + ":" + json_text(v[k]) for k in sorted(v)) + "}"


def _shortest_digits(f):
    """(digits, k) with abs(f) == int(digits) * 10**k, digits the shortest round-trip form."""
    r = repr(abs(f))
    mantissa, _, exp = r.partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0") or "0"
    k = int(exp or 0) - len(frac)
    stripped = digits.rstrip("0")
    k += len(digits) - len(stripped)
    return stripped or "0", k


def _float_text(f):
    """serde_json's (ryu's) text for a finite f64."""
    if not math.isfinite(f):
        return "null"
    sign = "-" if math.copysign(1.0, f) < 0 else ""
    if f == 0:
        return sign + "0.0"
    d, k = _shortest_digits(f)
    kk = len(d) + k
    if 0 <= k and kk <= 16:
        body = d + "0" * k + ".0"
    elif 0 < kk <= 16:
        body = d[:kk] + "." + d[kk:]
    elif -5 < kk <= 0:
        body = "0." + "0" * (-kk) + d
    elif len(d) == 1:
        body = f"{d}e{kk - 1}"
    else:
        body = f"{d[0]}.{d[1:]}e{kk - 1}"
    return sign + body


def _json_string(s):
    out = ['"']
    for c in s:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif c == "\b":
            out.append("\\b")
        elif c == "\f":
            out.append("\\f")
        elif ord(c) < 0x20:
            out.append("\\u%04x" % ord(c))
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


# ---------------------------------------------------------------------------------------
# Knowledge base: a JSON reader with serde_json's error messages
# ---------------------------------------------------------------------------------------


class KbError(Exception):
    pass


class _Reader:
    """Parses the knowledge base like `serde_json::from_str::<Vec<Entry>>`, down to the
    error text (`expected value at line 3 column 5`)."""

    def __init__(self, text):
        self.s = text
        self.i = 0

    def error(self, msg, at=None, peeked=False):
        """serde_json's position: line, and column in bytes since the line's start."""
        at = self.i if at is None else at
        line = self.s.count("\n", 0, at) + 1
        start = self.s.rfind("\n", 0, at) + 1
        col = len(self.s[start:at].encode("utf-8", "surrogatepass"))
        if peeked and at < len(self.s):
            col += 1
        return KbError(f"{msg} at line {line} column {col}")

    def peek_error(self, msg):
        # serde_json reports a peeked byte's error one byte past where it stands.
        return self.error(msg, peeked=True)

    def ws(self):
        s, i = self.s, self.i
        while i < len(s) and s[i] in " \t\n\r":
            i += 1
        self.i = i

    def peek(self):
        self.ws()
        return self.s[self.i] if self.i < len(self.s) else None

    def eof(self, what):
        return self.error(f"EOF while parsing {what}")

    def value(self):
        c = self.peek()
        if c is None:
            raise self.eof("a value")
        if c == "[":
            self.i += 1
            items = []
            if self.peek() == "]":
                self.i += 1
                return items
            if self.peek() is None:
                raise self.eof("a list")
            while True:
                items.append(self.value())
                c = self.peek()
                if c == ",":
                    self.i += 1
                    if self.peek() == "]":
                        raise self.peek_error("trailing comma")
                    continue
                if c == "]":
                    self.i += 1
                    return items
                if c is None:
                    raise self.eof("a list")
                raise self.peek_error("expected `,` or `]`")
        if c == "{":
            self.i += 1
            obj = {}
            if self.peek() == "}":
                self.i += 1
                return obj
            first = True
            while True:
                c = self.peek()
                if c is None:
                    raise self.eof("an object" if first else "a value")
                first = False
                if c != '"':
                    raise self.peek_error("key must be a string")
                self.i += 1
                key = self.string()
                c = self.peek()
                if c is None:
                    raise self.eof("an object")
                if c != ":":
                    raise self.peek_error("expected `:`")
                self.i += 1
                obj[key] = self.value()
                c = self.peek()
                if c == ",":
                    self.i += 1
                    if self.peek() == "}":
                        raise self.peek_error("trailing comma")
                    continue
                if c == "}":
                    self.i += 1
                    return obj
                if c is None:
                    raise self.eof("an object")
                raise self.peek_error("expected `,` or `}`")
        if c == '"':
            self.i += 1
            return self.string()
        for word, val in (("true", True), ("false", False), ("null", None)):
            if c == word[0]:
                for j, w in enumerate(word):
                    if self.i + j >= len(self.s):
                        self.i += j
                        raise self.eof("a value")
                    if self.s[self.i + j] != w:
                        self.i += j
                        raise self.error("expected ident", self.i + 1)
                self.i += len(word)
                return val
        if c == "-" or c.isdigit() and c.isascii():
            return self.number()
        raise self.peek_error("expected value")

    def number(self):
        s, start = self.s, self.i
        i = start
        if s[i] == "-":
            i += 1
        if i >= len(s):
            self.i = i
            raise self.error("invalid number")
        if not ("0" <= s[i] <= "9"):
            self.i = i
            raise self.error("invalid number", i + 1)
        if s[i] == "0":
            i += 1
            if i < len(s) and "0" <= s[i] <= "9":
                self.i = i
                raise self.error("invalid number", i + 1)
        while i < len(s) and "0" <= s[i] <= "9":
            i += 1
        is_float = False
        if i < len(s) and s[i] == ".":
            is_float = True
            i += 1
            if i >= len(s):
                self.i = i
                raise self.eof("a value")
            if not ("0" <= s[i] <= "9"):
                self.i = i
                raise self.error("invalid number", i + 1)
            while i < len(s) and "0" <= s[i] <= "9":
                i += 1
        if i < len(s) and s[i] in "eE":
            is_float = True
            i += 1
            if i < len(s) and s[i] in "+-":
                i += 1
            if i >= len(s):
                self.i = i
                raise self.eof("a value")
            if not ("0" <= s[i] <= "9"):
                self.i = i
                raise self.error("invalid number", i + 1)
            while i < len(s) and "0" <= s[i] <= "9":
                i += 1
        self.i = i
        text = s[start:i]
        if not is_float:
            v = int(text)
            if -(2**63) <= v < 2**64:
                return v
        f = float(text)
        if math.isinf(f):
            raise self.error("number out of range")
        return f

    def string(self):
        s = self.s
        out = []
        i = self.i
        while True:
            if i >= len(s):
                self.i = i
                raise self.eof("a string")
            c = s[i]
            if c == '"':
                self.i = i + 1
                return "".join(out)
            if c == "\\":
                i += 1
                if i >= len(s):
                    self.i = i
                    raise self.eof("a string")
                e = s[i]
                simple = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
                if e in simple:
                    out.append(simple[e])
                    i += 1
                elif e == "u":
                    code = self._hex4(i + 1)
                    i += 5
                    if 0xDC00 <= code < 0xE000:
                        raise self.error("lone leading surrogate in hex escape", i)
                    if 0xD800 <= code < 0xDC00:
                        # serde_json consumes the character that should start `\\u` of the pair.
                        for want in "\\u":
                            if i >= len(s):
                                self.i = i
                                raise self.eof("a string")
                            if s[i] != want:
                                raise self.error("unexpected end of hex escape", i + 1)
                            i += 1
                        low = self._hex4(i)
                        i += 4
                        if not 0xDC00 <= low < 0xE000:
                            raise self.error("lone leading surrogate in hex escape", i)
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    out.append(chr(code))
                else:
                    raise self.error("invalid escape", i + 1)
            elif ord(c) < 0x20:
                raise self.error("control character (\\u0000-\\u001F) found while parsing a string", i + 1)
            else:
                out.append(c)
                i += 1

    def _hex4(self, at):
        if at + 4 > len(self.s):
            self.i = len(self.s)
            raise self.eof("a string")
        digits = self.s[at : at + 4]
        if any(d not in "0123456789abcdefABCDEF" for d in digits):
            # serde_json takes the four bytes first, then says they were not hex.
            raise self.error("invalid escape", at + 4)
        return int(digits, 16)

    def end(self):
        if self.peek() is not None:
            raise self.peek_error("trailing characters")


def _unexpected(v):
    """serde's `Unexpected` wording for a JSON value of the wrong type."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean `{json_text(v)}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{_serde_float(v)}`"
    if isinstance(v, str):
        return f"string {rust_debug(v)}"
    if isinstance(v, list):
        return "sequence"
    return "map"


def _serde_float(f):
    """serde's `Unexpected::Float`: Rust's `{}` (never an exponent), `.0` for whole numbers."""
    sign = "-" if math.copysign(1.0, f) < 0 else ""
    if f == 0:
        return sign + "0.0"
    d, k = _shortest_digits(f)
    if k >= 0:
        return sign + d + "0" * k + ".0"
    if len(d) > -k:
        return sign + d[:k] + "." + d[k:]
    return sign + "0." + "0" * (-k - len(d)) + d


def _value_text(v):
    return v if isinstance(v, str) else json_text(v)


def _text_or_number(v):
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, (bool, int, float)):
        return json_text(v)
    if isinstance(v, list):
        return "; ".join(_value_text(x) for x in v)
    raise ValueError("expected text, found an object")


def _tag_list(v):
    if v is None:
        return []
    if isinstance(v, str):
        return [t for t in (rust_trim(t) for t in v.split(",")) if t]
    if isinstance(v, list):
        return [_value_text(x) for x in v]
    raise ValueError("tags: expected a list of strings")


def parse_kb(text):
    """The entries of the knowledge base `text`, or KbError in serde_json's words."""
    r = _Reader(text)
    # serde_json checks the type of each value as it reaches it, so the reader works in
    # the same order: the outer value must be an array, each element an object.
    c = r.peek()
    if c is None:
        raise r.eof("a value")
    if c == "{":
        raise r.error("invalid type: map, expected a sequence")
    if c != "[":
        v = r.value()
        raise r.error(f"invalid type: {_unexpected(v)}, expected a sequence")
    r.i += 1
    entries = []
    first = True
    while True:
        c = r.peek()
        if c == "]":
            if not first:
                raise r.peek_error("trailing comma")
            r.i += 1
            break
        if c is None:
            raise r.eof("a list" if first else "a value")
        if c == "[":
            r.i += 1
            entries.append(_entry_seq(r))
        elif c != "{":
            v = r.value()
            raise r.error(f"invalid type: {_unexpected(v)}, expected struct Entry")
        else:
            r.i += 1
            entries.append(_entry(r))
        first = False
        c = r.peek()
        if c == ",":
            r.i += 1
            if r.peek() == "]":
                raise r.peek_error("trailing comma")
            continue
        if c == "]":
            r.i += 1
            break
        if c is None:
            raise r.eof("a list")
        raise r.peek_error("expected `,` or `]`")
    r.end()
    return entries


def _entry_error(r, msg):
    """A field's error: serde_json still closes the entry (`end_map`) before it places the
    error, so it stands past the entry's `}` when that comes next."""
    if r.peek() == "}":
        r.i += 1
    return r.error(msg)


ENTRY_FIELDS = ("id", "title", "symptom", "cause", "fix", "tags")


def _set_field(entry, key, v):
    entry[key] = _tag_list(v) if key == "tags" else _text_or_number(v)


def _entry_seq(r):
    """An entry written as a JSON array: serde fills the fields in declaration order."""
    entry = {"id": "", "title": "", "symptom": "", "cause": "", "fix": "", "tags": []}

    def close_error(msg):
        # serde_json ends the list (`end_seq`) before it places the error.
        if r.peek() == "]":
            r.i += 1
        return r.error(msg)

    for k, key in enumerate(ENTRY_FIELDS):
        c = r.peek()
        if c == "]":
            break
        if k > 0:
            if c is None:
                raise r.peek_error("EOF while parsing a list")
            if c != ",":
                raise r.peek_error("expected `,` or `]`")
            r.i += 1
            c = r.peek()
            if c == "]":
                raise r.peek_error("trailing comma")
        if c is None:
            raise r.eof("a list" if k == 0 else "a value")
        v = r.value()
        try:
            _set_field(entry, key, v)
        except ValueError as e:
            raise close_error(str(e)) from None
    c = r.peek()
    if c == "]":
        r.i += 1
        return entry
    if c is None:
        raise r.eof("a list")
    if c == ",":
        r.i += 1
        if r.peek() == "]":
            raise r.peek_error("trailing comma")
    raise r.peek_error("trailing characters")


def _entry(r):
    entry = {"id": "", "title": "", "symptom": "", "cause": "", "fix": "", "tags": []}
    seen = set()
    if r.peek() == "}":
        r.i += 1
        return entry
    first = True
    while True:
        c = r.peek()
        if c is None:
            raise r.eof("an object" if first else "a value")
        first = False
        if c != '"':
            raise r.peek_error("key must be a string")
        r.i += 1
        key = r.string()
        if key in seen:
            raise _entry_error(r, f"duplicate field `{key}`")
        c = r.peek()
        if c is None:
            raise r.eof("an object")
        if c != ":":
            raise r.peek_error("expected `:`")
        r.i += 1
        v = r.value()
        if key in entry:
            seen.add(key)
            try:
                _set_field(entry, key, v)
            except ValueError as e:
                raise _entry_error(r, str(e)) from None
        c = r.peek()
        if c == ",":
            r.i += 1
            if r.peek() == "}":
                raise r.peek_error("trailing comma")
            continue
        if c == "}":
            r.i += 1
            return entry
        if c is None:
            raise r.eof("an object")
        raise r.peek_error("expected `,` or `}`")


# ---------------------------------------------------------------------------------------
# Tokenizer
# ---------------------------------------------------------------------------------------


def is_cjk(c):
    o = ord(c)
    return (
        0x3040 <= o <= 0x30FF
        or 0x3400 <= o <= 0x4DBF
        or 0x4E00 <= o <= 0x9FFF
        or 0xAC00 <= o <= 0xD7AF
        or 0xF900 <= o <= 0xFAFF
        or 0x20000 <= o <= 0x2FA1F
    )


def _blen(s):
    return len(s.encode("utf-8"))


def stem(w):
    n = _blen(w)
    if n > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if n > 3 and w.endswith("s") and not w.endswith("ss") and not w.endswith("us") and not w.endswith("is"):
        return w[:-1]
    return w


def _is_alphanumeric(c):
    """Rust's `char::is_alphanumeric`: Alphabetic or Numeric (Nd, Nl, No)."""
    return c.isalnum() or unicodedata.category(c) in ("Nl", "No") or _is_alphabetic(c)


def push_word(word, out):
    if not word:
        return
    lower = word.lower()
    if lower in STOP_WORDS:
        return
    if len(lower) < 2 and not all("0" <= c <= "9" for c in lower):
        return
    stemmed = stem(lower)
    base = stemmed.rstrip("0123456789")
    if _blen(base) >= 3 and _blen(base) < _blen(stemmed) and any(_is_alphabetic(c) for c in base):
        out.append(base)
    out.append(stemmed)


def tokenize(text):
    out = []
    word = []
    cjk = []

    def flush_cjk():
        if len(cjk) == 1:
            out.append(cjk[0])
        else:
            for a, b in zip(cjk, cjk[1:]):
                out.append(a + b)
        cjk.clear()

    for c in text:
        if is_cjk(c):
            push_word("".join(word), out)
            word.clear()
            cjk.append(c)
        elif _is_alphanumeric(c):
            if cjk:
                flush_cjk()
            word.append(c)
        else:
            push_word("".join(word), out)
            word.clear()
            if cjk:
                flush_cjk()
    push_word("".join(word), out)
    if cjk:
        flush_cjk()
    return out


# ---------------------------------------------------------------------------------------
# Index and ranking
# ---------------------------------------------------------------------------------------


def _field_text(e, f):
    return " ".join(e["tags"]) if f == "tags" else e[f]


def rank(entries, query_terms):
    """[(index, score, matched terms)], best first, as the Rust `rank` computes them."""
    docs = []
    for e in entries:
        fields = []
        for f, _, _ in FIELDS:
            toks = tokenize(_field_text(e, f))
            tf = {}
            for t in toks:
                tf[t] = tf.get(t, 0) + 1
            fields.append((tf, len(toks)))
        docs.append(fields)
    n = float(len(docs))
    avg_len = []
    for i in range(len(FIELDS)):
        total = sum(d[i][1] for d in docs)
        avg_len.append(max(total / max(n, 1.0), 1.0))
    unique = []
    for t in query_terms:
        if t not in unique:
            unique.append(t)
    idf = []
    for t in unique:
        df = float(sum(1 for d in docs if any(t in tf for tf, _ in d)))
        idf.append(math.log(1.0 + (n - df + 0.5) / (df + 0.5)))

    ranked = []
    for i, d in enumerate(docs):
        score = 0.0
        matched = []
        for ti, t in enumerate(unique):
            term_score = 0.0
            for fi, (_, weight, b) in enumerate(FIELDS):
                tf, length = d[fi]
                c = tf.get(t)
                if c is not None:
                    c = float(c)
                    norm = 1.0 - b + b * float(length) / avg_len[fi]
                    term_score += weight * c * (K1 + 1.0) / (c + K1 * norm)
            if term_score > 0.0:
                score += idf[ti] * term_score
                matched.append(t)
        if score > 0.0:
            coverage = len(matched) / float(max(len(unique), 1))
            score *= 0.5 + 0.5 * coverage
            ranked.append((i, score, matched))
    ranked.sort(key=lambda r: (-r[1], r[0]))
    return ranked


# ---------------------------------------------------------------------------------------
# Parameters and I/O
# ---------------------------------------------------------------------------------------


def resolve_path(raw):
    p = rust_trim(raw)
    if not p:
        return DEFAULT_KB
    b = p.encode("utf-8")
    if "\0" in p or "\\" in p or (len(b) >= 2 and b[1:2] == b":"):
        raise InvalidParams(f"kb_path: {rust_debug(p)} is not a sandbox path; pass a guest path such as {DEFAULT_KB}")
    if p.startswith("/"):
        return p
    rel = p
    while rel.startswith("./"):
        rel = rel[2:]
    return f"{WORKSPACE}/{rel}"


def parse_params(obj):
    if not isinstance(obj, dict):
        raise InvalidParams('parameters must be a JSON object like {"query": "RX overrun DMA"}')
    q = obj["query"] if "query" in obj else obj.get("keyword")
    if isinstance(q, str) and rust_trim(q):
        query = rust_trim(q)
    elif q is None or isinstance(q, str):
        raise InvalidParams(
            'query: required; describe the symptom in a few keywords, e.g. {"query": "uart RX overrun garbage console"}'
        )
    else:
        raise InvalidParams(f"query: expected a string, got {json_text(q)}")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidParams(
            f"query: {len(query)} characters is too long; use a few keywords (at most {MAX_QUERY_CHARS} characters)"
        )
    kb = obj.get("kb_path")
    if kb is None:
        kb_path = DEFAULT_KB
    elif isinstance(kb, str):
        kb_path = resolve_path(kb)
    else:
        raise InvalidParams(f"kb_path: expected a string, got {json_text(kb)}")
    t = obj.get("top")
    if t is None:
        top = DEFAULT_TOP
    elif isinstance(t, (int, float)) and not isinstance(t, bool):
        v = t if isinstance(t, int) else (int(t) if math.isfinite(t) and t == int(t) and t >= 0 else None)
        if v is None or not 1 <= v <= MAX_TOP:
            raise InvalidParams(
                f"top: {json_text(t)} is out of range; use an integer from 1 to {MAX_TOP} (default {DEFAULT_TOP})"
            )
        top = v
    else:
        raise InvalidParams(f"top: expected an integer from 1 to {MAX_TOP}, got {json_text(t)}")
    return query, kb_path, top


def dir_listing(d, limit=30):
    """The Rust SDK's `dir_listing`: sorted names, directories with a `/`, or None."""
    try:
        with os.scandir(d) as it:
            names = [e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in it]
    except OSError:
        return None
    names.sort(key=lambda n: n.encode("utf-8", "surrogateescape"))
    more = max(len(names) - limit, 0)
    s = ", ".join(names[:limit])
    if more:
        s += f" (+{more} more)"
    return s or "(empty)"


def _os_error(e):
    """Rust's io::Error Display for an OS error."""
    return f"{e.strerror} (os error {e.errno})"


def load_kb(path):
    try:
        st = os.stat(path)
    except OSError as e:
        i = path.rfind("/")
        d = "/" if i <= 0 else path[:i]
        listing = dir_listing(d)
        if listing is not None:
            listing = f" Files in {d}: {listing}."
        else:
            ws = dir_listing(WORKSPACE)
            listing = f" Files in {WORKSPACE}: {ws}." if ws is not None else ""
        if isinstance(e, FileNotFoundError):
            raise InvalidParams(
                f"kb_path: {path} does not exist inside the sandbox (the workspace is mounted at {WORKSPACE}).{listing}"
            ) from None
        raise Failed(f"cannot open knowledge base {path}: {_os_error(e)}.{listing}") from None
    if os.path.isdir(path):
        raise InvalidParams(f"kb_path: {path} is a directory; pass the JSON file, e.g. {DEFAULT_KB}")
    if st.st_size > MAX_KB_BYTES:
        raise Failed(
            f"knowledge base {path} is {st.st_size // (1024 * 1024)} MiB; this skill reads at most {MAX_KB_BYTES // (1024 * 1024)} MiB"
        )
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise Failed(f"cannot read knowledge base {path}: {_os_error(e)}") from None
    text = raw.decode("utf-8", errors="replace").lstrip("\ufeff")
    try:
        return parse_kb(text)
    except KbError as e:
        raise Failed(
            f"knowledge base {path} is not a JSON array of {{id, title, symptom, cause, fix, tags}} objects: {e}"
        ) from None


def clip(s, n):
    s = rust_trim(s)
    return s[:n] + "..." if len(s) > n else s


def execute(ctx: Context, params: dict) -> Result:
    query, kb_path, top = parse_params(params)
    terms = tokenize(query)
    if not terms:
        raise InvalidParams(
            f'query: {rust_debug(query)} has no searchable words once stop words are dropped; use specific terms such as "RX overrun DMA flash"'
        )
    entries = load_kb(kb_path)
    ctx.info(f"ranking {len(entries)} knowledge-base entries for {rust_debug(query)}")

    if not entries:
        return (
            Result.success(f"The knowledge base {kb_path} is empty: nothing to match {rust_debug(query)} against.")
            .meta("hits", 0)
            .meta("matches", 0)
            .meta("kb_entries", 0)
            .meta("kb_path", kb_path)
        )

    ranked = rank(entries, terms)
    if not ranked:
        counts = {}
        for e in entries:
            for t in e["tags"]:
                t = t.lower()
                counts[t] = counts.get(t, 0) + 1
        tags = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].encode("utf-8", "surrogateescape")))
        tag_list = [t for t, _ in tags[:20]]
        out = (
            f"No knowledge-base entry matched {rust_debug(query)} ({len(entries)} entries searched in {kb_path}).\n"
            "Try other keywords: the component (uart, dma, flash, i2c, clock), the symptom as the log words it "
            "(overrun, framing error, timeout, garbage), or the error code."
        )
        if tag_list:
            out += f"\nTags used in this knowledge base: {', '.join(tag_list)}."
        return (
            Result.success(out)
            .meta("hits", 0)
            .meta("matches", 0)
            .meta("kb_entries", len(entries))
            .meta("kb_path", kb_path)
        )

    shown = ranked[:top]
    out = [
        f"{len(ranked)} of {len(entries)} knowledge-base entries match {rust_debug(query)} ({kb_path}); showing the best {len(shown)}:\n"
    ]
    for rank_no, (index, score, matched) in enumerate(shown):
        e = entries[index]
        entry_id = rust_trim(e["id"]) or f"#{index + 1}"
        out.append(f"\n{rank_no + 1}. [{entry_id}] {clip(e['title'], 200)} (score {score:.2f}; matched: {', '.join(matched)})\n")
        for label, key in (("Symptom", "symptom"), ("Cause", "cause"), ("Fix", "fix")):
            if rust_trim(e[key]):
                out.append(f"   {label}: {clip(e[key], SHOW_FIELD_CHARS)}\n")
        if e["tags"]:
            out.append(f"   Tags: {', '.join(e['tags'])}\n")
    out.append(
        "\nA knowledge-base entry is a past incident, not proof: confirm its symptom in the log (cite L<n> lines) before concluding.\n"
    )
    ids = [rust_trim(entries[index]["id"]) for index, _, _ in shown]
    return (
        Result.success("".join(out))
        .meta("hits", len(shown))
        .meta("matches", len(ranked))
        .meta("kb_entries", len(entries))
        .meta("top_id", ids[0] if ids else "")
        .meta("top_score", f"{shown[0][1]:.3f}")
        .meta("ids", ",".join(ids))
        .meta("kb_path", kb_path)
    )


WitWorld = world(execute)
