//! Output guardrail for evidence-style agents (SPEC section 6): every conclusion of the final
//! answer cites the log line that supports it, and every cited line is one a skill actually
//! returned. Nothing is removed: an uncited conclusion gets ` [unsupported: no log line
//! cited]`, a citation of a line no skill returned gets ` [L9999: not in any skill result]`,
//! so the reader sees what is backed and what is not. Running the check again on its own
//! output adds nothing.
//!
//! A **citation** is `L<n>` (or `l<n>`, as generate-report accepts), `n >= 1`, not glued to
//! letters or digits on either side (`L2TP`, `HL7` are not citations); a range `L120-L125`,
//! `L120-125`, `L120–125` (also `—` or `~`); lists such as `L12, L40` or `[L11, L1242]` are
//! several citations. A single line is *grounded* when a skill result contained it, a range
//! when both of its ends were.
//!
//! A **conclusion** is a unit of the answer's Markdown that asserts something:
//! - each list item (bullet or numbered, with its continuation lines) is one unit, cited
//!   when any citation appears anywhere in it, as generate-report writes
//!   `1. claim [L11, L1242]`;
//! - each sentence of a paragraph is one unit (sentences end at `.`, `!` or `?` before
//!   whitespace, or at `。`, `！`, `？`); a sentence made only of citations, such as
//!   `(L1242)` after the full stop, belongs to the sentence before it.
//!
//! Not conclusions: headings, code blocks, tables, block quotes (quoted log lines), HTML,
//! rules, questions (ending in `?` / `？`), lead-ins ending in `:` / `：`, and units with no
//! letters once citations are taken out.
//!
//! **Where**: when the answer has headings naming its conclusions (conclusion, root cause,
//! cause, finding, diagnosis, summary, verdict, answer; 结论, 根因, 原因, 发现, 总结, 诊断),
//! only the units under them (down to the next heading of the same or a higher level) are
//! conclusions; introductions, evidence listings and notes elsewhere are not. Without such a
//! heading, every unit of the answer is.
//!
//! generate-report applies the same citation rule to structured findings and refuses an
//! uncited one before the report exists; this check is for answers the model writes itself.
//! The citation syntax is parsed here independently of `skill-findings::parse_citation`
//! (a guest crate) because prose needs word boundaries and ranges found anywhere in a
//! sentence, not an evidence entry that starts with `L`.

use std::collections::BTreeSet;

use serde::Serialize;

/// Appended to a conclusion that cites no line.
pub const UNSUPPORTED_MARK: &str = "[unsupported: no log line cited]";
/// Ends the flag put after a citation of a line no skill returned: `[L9999` + this.
const NOT_RETURNED_SUFFIX: &str = ": not in any skill result]";

/// The answer with its marks, and what was found.
#[derive(Debug, Clone, Serialize)]
pub struct CheckedAnswer {
    pub text: String,
    pub report: EvidenceReport,
}

/// What the guardrail found, for the audit log.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EvidenceReport {
    pub conclusions: usize,
    /// Conclusions with at least one citation.
    pub cited: usize,
    /// Conclusions with at least one grounded citation.
    pub grounded: usize,
    /// Conclusions with no citation, each marked unsupported.
    pub unsupported: Vec<MarkedConclusion>,
    /// Citations of lines no skill returned, each flagged.
    pub not_returned: Vec<FlaggedCitation>,
    /// Marks added by this check (0 when the answer had been checked already).
    pub marks_added: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MarkedConclusion {
    /// 1-based line of the answer where the conclusion starts.
    pub line: usize,
    /// The conclusion, clipped.
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlaggedCitation {
    pub line: usize,
    /// As written in the answer (`L9999`, `L120-125`).
    pub citation: String,
}

/// A citation in text: byte span and the lines it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Citation {
    pub start: usize,
    pub end: usize,
    pub first: u64,
    pub last: u64,
}

/// The line numbers a skill output shows as `L<n>: ...` at the start of a line (how
/// read-log-file prints the lines it read); the loop unions them over the session's results.
pub fn returned_lines(output: &str) -> BTreeSet<u64> {
    output
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix('L')?;
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 || !rest[digits..].starts_with(':') {
                return None;
            }
            rest[..digits].parse::<u64>().ok().filter(|n| *n >= 1)
        })
        .collect()
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Digits at the start of `s`, as a line number (>= 1), and their length.
fn line_number(s: &str) -> Option<(u64, usize)> {
    let len = s.bytes().take_while(u8::is_ascii_digit).count();
    let n = s.get(..len)?.parse::<u64>().ok().filter(|n| *n >= 1)?;
    Some((n, len))
}

/// Every citation in `text`, in order, leaving out the ones inside our own flags.
pub fn citations(text: &str) -> Vec<Citation> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts = matches!(bytes[i], b'L' | b'l') && (i == 0 || !is_word_byte(bytes[i - 1]));
        let Some((first, len)) = starts.then(|| line_number(&text[i + 1..])).flatten() else {
            i += 1;
            continue;
        };
        let mut end = i + 1 + len;
        let mut last = first;
        // A range: a dash or tilde, an optional `L`, a second number not below the first.
        let after = &text[end..];
        let sep = ['-', '\u{2013}', '\u{2014}', '~'].into_iter().find(|c| after.starts_with(*c));
        if let Some(sep) = sep {
            let rest = &after[sep.len_utf8()..];
            let (rest, l_len) = match rest.strip_prefix(['L', 'l']) {
                Some(r) => (r, 1),
                None => (rest, 0),
            };
            if let Some((to, to_len)) = line_number(rest) {
                let to_end = end + sep.len_utf8() + l_len + to_len;
                if to >= first && bytes.get(to_end).is_none_or(|b| !is_word_byte(*b)) {
                    last = to;
                    end = to_end;
                }
            }
        }
        if bytes.get(end).is_some_and(|b| is_word_byte(*b)) {
            i = end;
            continue;
        }
        let is_our_flag = i > 0 && bytes[i - 1] == b'[' && text[end..].starts_with(NOT_RETURNED_SUFFIX);
        if !is_our_flag {
            out.push(Citation { start: i, end, first, last });
        }
        i = end;
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum LineKind {
    Blank,
    /// Fence lines, code, tables, quotes, HTML, rules: never conclusions.
    Skip,
    Heading {
        level: usize,
        names_conclusions: bool,
    },
    ListItem,
    Text,
}

const CONCLUSION_WORDS: [&str; 7] = ["conclusion", "cause", "finding", "diagnos", "summary", "verdict", "answer"];
const CONCLUSION_WORDS_ZH: [&str; 6] = ["结论", "根因", "原因", "发现", "总结", "诊断"];

fn names_conclusions(heading: &str) -> bool {
    let lower = heading.to_lowercase();
    let at_word_start =
        |w: &str| lower.match_indices(w).any(|(i, _)| !lower[..i].chars().next_back().is_some_and(char::is_alphabetic));
    CONCLUSION_WORDS.iter().any(|w| at_word_start(w)) || CONCLUSION_WORDS_ZH.iter().any(|w| lower.contains(w))
}

fn is_list_marker(t: &str) -> bool {
    if t.starts_with("- ") || t.starts_with("* ") || t.starts_with("+ ") || matches!(t, "-" | "*" | "+") {
        return true;
    }
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    (1..=9).contains(&digits) && {
        let rest = &t[digits..];
        rest.starts_with(". ") || rest.starts_with(") ") || rest == "." || rest == ")"
    }
}

/// Classify each line; fenced code is tracked across lines.
fn classify(lines: &[&str]) -> Vec<LineKind> {
    let mut fence: Option<char> = None;
    lines
        .iter()
        .map(|line| {
            let t = line.trim_start();
            if let Some(open) = fence {
                if t.starts_with(if open == '`' { "```" } else { "~~~" }) {
                    fence = None;
                }
                return LineKind::Skip;
            }
            if t.starts_with("```") || t.starts_with("~~~") {
                fence = t.chars().next();
                return LineKind::Skip;
            }
            if t.is_empty() {
                return LineKind::Blank;
            }
            let hashes = t.bytes().take_while(|b| *b == b'#').count();
            if (1..=6).contains(&hashes) && (t.len() == hashes || t[hashes..].starts_with([' ', '\t'])) {
                let text = t[hashes..].trim().trim_end_matches('#');
                return LineKind::Heading { level: hashes, names_conclusions: names_conclusions(text) };
            }
            let is_rule = t.chars().filter(|c| !c.is_whitespace()).count() >= 3
                && t.chars().all(|c| c.is_whitespace() || "-*_=".contains(c));
            if is_rule || t.starts_with(['|', '>', '<']) {
                return LineKind::Skip;
            }
            if is_list_marker(t) { LineKind::ListItem } else { LineKind::Text }
        })
        .collect()
}

/// A unit to check: byte span in the answer and the line it starts on.
struct Unit {
    start: usize,
    end: usize,
    line: usize,
}

/// Split a paragraph span into sentence spans; citation-only sentences join the previous one.
fn sentences(answer: &str, start: usize, end: usize, line_of: &dyn Fn(usize) -> usize) -> Vec<Unit> {
    let text = &answer[start..end];
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut from = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next = chars.peek().map(|(_, n)| *n);
        let ends = match c {
            '。' | '！' | '？' => true,
            '.' | '!' | '?' => next.is_none_or(char::is_whitespace) && !ends_with_abbreviation(&text[from..i]),
            _ => false,
        };
        if ends {
            let end = i + c.len_utf8() + trailing_citations(&text[i + c.len_utf8()..]);
            spans.push((from, end));
            from = end;
            while chars.peek().is_some_and(|(j, _)| *j < end) {
                chars.next();
            }
        }
    }
    if from < text.len() {
        spans.push((from, text.len()));
    }
    let mut out: Vec<Unit> = Vec::new();
    for (s, e) in spans {
        let piece = &text[s..e];
        if piece.trim().is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(prev) if !has_letters(piece) => prev.end = start + e,
            _ => {
                let lead = piece.len() - piece.trim_start().len();
                out.push(Unit { start: start + s + lead, end: start + e, line: line_of(start + s + lead) });
            }
        }
    }
    out
}

/// Length of a bracketed group of citations, `(L42)` or `[L11, L12]`, right after a full
/// stop: it belongs to the sentence it follows. 0 when there is none.
fn trailing_citations(rest: &str) -> usize {
    let lead = rest.len() - rest.trim_start().len();
    let t = &rest[lead..];
    let close = match t.chars().next() {
        Some('(') => ')',
        Some('[') => ']',
        Some('（') => '）',
        Some('【') => '】',
        _ => return 0,
    };
    match t.find(close) {
        Some(end) if !citations(&t[..end]).is_empty() && !has_letters(&t[..end]) => lead + end + close.len_utf8(),
        _ => 0,
    }
}

fn ends_with_abbreviation(before: &str) -> bool {
    let word = before.rsplit(|c: char| c.is_whitespace() || c == '(').next().unwrap_or("").to_lowercase();
    matches!(word.as_str(), "e.g" | "i.e" | "etc" | "vs" | "cf" | "approx" | "no" | "fig")
}

/// `text` without our marks and flags.
fn strip_marks(text: &str) -> String {
    let mut rest = text.replace(&format!(" {UNSUPPORTED_MARK}"), "").replace(UNSUPPORTED_MARK, "");
    while let Some(at) = rest.find(NOT_RETURNED_SUFFIX) {
        let mut open = rest[..at].rfind('[').unwrap_or(at);
        if rest[..open].ends_with(' ') {
            open -= 1;
        }
        rest.replace_range(open..at + NOT_RETURNED_SUFFIX.len(), "");
    }
    rest
}

/// Does `text` say anything once citations and our marks are taken out?
fn has_letters(text: &str) -> bool {
    let mut rest = strip_marks(text);
    for c in citations(&rest).iter().rev() {
        rest.replace_range(c.start..c.end, "");
    }
    rest.chars().any(char::is_alphabetic)
}

/// The unit's text without trailing marks, emphasis and closing brackets: what its last
/// punctuation is judged on.
fn core_end(text: &str) -> &str {
    let mut t = text.trim_end();
    loop {
        let before = t;
        t = t.strip_suffix(UNSUPPORTED_MARK).unwrap_or(t).trim_end();
        t = t.trim_end_matches(['*', '_', ')', ']', '）', '」', '"', '\'', '”']).trim_end();
        if t == before {
            return t;
        }
    }
}

/// Check `answer` against the lines skill results returned; see the module docs.
pub fn check_evidence(answer: &str, returned: &BTreeSet<u64>) -> CheckedAnswer {
    let mut starts = Vec::new();
    let mut lines = Vec::new();
    let mut offset = 0;
    for raw in answer.split_inclusive('\n') {
        starts.push(offset);
        lines.push(raw.trim_end_matches(['\n', '\r']));
        offset += raw.len();
    }
    let line_of = |byte: usize| starts.partition_point(|s| *s <= byte);
    let kinds = classify(&lines);
    let scoped = kinds.iter().any(|k| matches!(k, LineKind::Heading { names_conclusions: true, .. }));

    let mut units: Vec<Unit> = Vec::new();
    let mut scope: Option<usize> = None; // level of the conclusions heading we are under
    let mut i = 0;
    while i < lines.len() {
        let kind = kinds[i];
        if let LineKind::Heading { level, names_conclusions } = kind {
            if names_conclusions {
                scope = Some(level);
            } else if scope.is_some_and(|s| level <= s) {
                scope = None;
            }
            i += 1;
            continue;
        }
        if !matches!(kind, LineKind::ListItem | LineKind::Text) {
            i += 1;
            continue;
        }
        // A list item or a paragraph runs over the text lines that follow it.
        let mut j = i + 1;
        while j < lines.len() && kinds[j] == LineKind::Text {
            j += 1;
        }
        let in_scope = !scoped || scope.is_some();
        if in_scope {
            let (start, end) = (starts[i], starts[j - 1] + lines[j - 1].len());
            if kind == LineKind::ListItem {
                let t = lines[i].trim_start();
                let marker_len = if t.starts_with(['-', '*', '+']) {
                    1
                } else {
                    t.bytes().take_while(|b| b.is_ascii_digit()).count() + 1
                };
                let body = starts[i] + (lines[i].len() - t.len()) + marker_len;
                let lead = answer[body..end].len() - answer[body..end].trim_start().len();
                units.push(Unit { start: body + lead, end, line: i + 1 });
            } else {
                units.extend(sentences(answer, start, end, &line_of));
            }
        }
        i = j;
    }

    let mut report = EvidenceReport::default();
    let mut inserts: Vec<(usize, String)> = Vec::new();
    for unit in &units {
        let text = &answer[unit.start..unit.end];
        let core = core_end(text);
        if !has_letters(text) || core.ends_with(['?', '？', ':', '：']) {
            continue;
        }
        report.conclusions += 1;
        let cites = citations(text);
        let mut grounded = false;
        for c in &cites {
            if returned.contains(&c.first) && returned.contains(&c.last) {
                grounded = true;
                continue;
            }
            let token = &text[c.start..c.end];
            let flag = format!("[{token}{NOT_RETURNED_SUFFIX}");
            report.not_returned.push(FlaggedCitation { line: line_of(unit.start + c.start), citation: token.into() });
            if !text[c.end..].trim_start().starts_with(&flag) {
                inserts.push((unit.start + c.end, format!(" {flag}")));
            }
        }
        if !cites.is_empty() {
            report.cited += 1;
        }
        if grounded {
            report.grounded += 1;
        }
        if cites.is_empty() {
            report
                .unsupported
                .push(MarkedConclusion { line: unit.line, text: crate::text::one_line(&strip_marks(core), 120) });
            if !text.contains(UNSUPPORTED_MARK) {
                // Before the closing full stop, like a citation would be.
                let trimmed = text.trim_end();
                let at = match trimmed.chars().next_back() {
                    Some(c @ ('.' | '!' | '。' | '！' | ';' | '；')) => trimmed.len() - c.len_utf8(),
                    _ => trimmed.len(),
                };
                inserts.push((unit.start + at, format!(" {UNSUPPORTED_MARK}")));
            }
        }
    }
    report.marks_added = inserts.len();
    inserts.sort_by_key(|(at, _)| *at);
    let mut text = String::with_capacity(answer.len() + inserts.iter().map(|(_, s)| s.len()).sum::<usize>());
    let mut from = 0;
    for (at, mark) in inserts {
        text.push_str(&answer[from..at]);
        text.push_str(&mark);
        from = at;
    }
    text.push_str(&answer[from..]);
    CheckedAnswer { text, report }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(ns: &[u64]) -> BTreeSet<u64> {
        ns.iter().copied().collect()
    }

    fn spans(text: &str) -> Vec<(u64, u64)> {
        citations(text).iter().map(|c| (c.first, c.last)).collect()
    }

    #[test]
    fn citation_forms() {
        assert_eq!(spans("see L12, L40 and [L11, L1242]"), vec![(12, 12), (40, 40), (11, 11), (1242, 1242)]);
        assert_eq!(
            spans("L120-L125 L120-125 L120–125 L120—L125 L7~9"),
            vec![(120, 125); 4].into_iter().chain([(7, 9)]).collect::<Vec<_>>()
        );
        assert_eq!(spans("(L42)，根因是L42的"), vec![(42, 42), (42, 42)]);
        assert_eq!(spans("l45: x"), vec![(45, 45)]);
        // Not citations: glued to letters or digits, zero, no digits, absurd numbers.
        assert_eq!(spans("L2TP HL7 UL94 L0 L L<n> xL5 L5x L99999999999999999999999"), vec![]);
        // A backwards range is a citation of its first line only.
        assert_eq!(spans("L130-120"), vec![(130, 130)]);
        // Our own flags are not citations.
        assert_eq!(spans("L9 [L9: not in any skill result]"), vec![(9, 9)]);
    }

    #[test]
    fn returned_lines_are_the_l_n_colon_lines_of_an_output() {
        let out =
            "Matches in uart.log:\nL1240: flash: erase sector 12\n  L1243: RX overrun\nfirst L9 seen\nL0: no\nLx: no\n";
        assert_eq!(returned_lines(out), lines(&[1240, 1243]));
    }

    #[test]
    fn an_uncited_conclusion_is_marked_and_a_cited_one_is_not() {
        let answer = "## Conclusions\n\n1. RX overruns follow flash erases [L1240, L1243]\n2. The console prints garbage after each overrun\n";
        let checked = check_evidence(answer, &lines(&[1240, 1243]));
        assert_eq!(
            checked.text,
            "## Conclusions\n\n1. RX overruns follow flash erases [L1240, L1243]\n2. The console prints garbage after each overrun [unsupported: no log line cited]\n"
        );
        let r = &checked.report;
        assert_eq!((r.conclusions, r.cited, r.grounded, r.marks_added), (2, 1, 1, 1));
        assert_eq!(
            r.unsupported,
            vec![MarkedConclusion { line: 4, text: "The console prints garbage after each overrun".into() }]
        );
    }

    #[test]
    fn citations_of_lines_no_skill_returned_are_flagged() {
        let answer = "The ring runs dry during erases (L1240-L1242, L9999).";
        let checked = check_evidence(answer, &lines(&[1240, 1241, 1242]));
        assert_eq!(
            checked.text,
            "The ring runs dry during erases (L1240-L1242, L9999 [L9999: not in any skill result])."
        );
        assert_eq!(checked.report.not_returned, vec![FlaggedCitation { line: 1, citation: "L9999".into() }]);
        assert_eq!((checked.report.grounded, checked.report.unsupported.len()), (1, 0));
        // A range is grounded only when both of its ends were returned.
        let checked = check_evidence("Overrun (L1240–1250).", &lines(&[1240]));
        assert_eq!(checked.text, "Overrun (L1240–1250 [L1240–1250: not in any skill result]).");
    }

    #[test]
    fn sentences_of_paragraphs_are_conclusions_and_the_rest_is_not() {
        let answer = "# Report\n\nWhat happened here?\nThe DMA ring runs dry. (L42) The UART then drops bytes. At 3.5 ms per erase, e.g. sector 12, latency grows [L43].\n\nThe chain:\n\n```\nL1 not a conclusion\n```\n\n| Line | text |\n|---|---|\n| L7 | x |\n\n> quoted log line\n\nL42, L43\n";
        let checked = check_evidence(answer, &lines(&[42, 43]));
        assert_eq!(checked.text, answer.replace("drops bytes.", "drops bytes [unsupported: no log line cited]."));
        assert_eq!(checked.report.conclusions, 3, "{:#?}", checked.report);
        assert_eq!(checked.report.unsupported[0].line, 4);
    }

    #[test]
    fn under_conclusion_headings_only_their_sections_count() {
        let answer = "# Why does the UART print garbage?\n\n3 conclusions from the log.\n\n## Root cause\n\n- The flash erase starves the RX DMA [L1240]\n\n### Detail\n\nIt happens on every erase.\n\n## Evidence\n\n- `L1240`: flash: erase sector\n\n_Note: per KB-005_\n";
        let checked = check_evidence(answer, &lines(&[1240]));
        assert_eq!(checked.report.conclusions, 2, "{:#?}", checked.report);
        assert_eq!(checked.text, answer.replace("every erase.", "every erase [unsupported: no log line cited]."));
    }

    #[test]
    fn chinese_conclusions() {
        let answer = "## 结论\n\n根因是闪存擦除期间DMA描述符环耗尽(L42)。串口因此输出乱码。\n- 中断延迟升高（L43）\n- 是否与波特率有关？\n";
        let checked = check_evidence(answer, &lines(&[42, 43]));
        assert_eq!(
            checked.text,
            "## 结论\n\n根因是闪存擦除期间DMA描述符环耗尽(L42)。串口因此输出乱码 [unsupported: no log line cited]。\n- 中断延迟升高（L43）\n- 是否与波特率有关？\n"
        );
        assert_eq!((checked.report.conclusions, checked.report.grounded), (3, 2));
    }

    #[test]
    fn checking_twice_adds_nothing() {
        let answer = "## Findings\n\n- Overruns follow erases (L5, L9999)\n- Garbage follows overruns\n\nThe ring is too small. It has 16 entries [L6].\n";
        let once = check_evidence(answer, &lines(&[5, 6]));
        assert_eq!(once.report.marks_added, 3);
        let twice = check_evidence(&once.text, &lines(&[5, 6]));
        assert_eq!(twice.text, once.text);
        assert_eq!(twice.report.marks_added, 0);
        assert_eq!(twice.report.unsupported, once.report.unsupported, "still unsupported, still reported");
        assert_eq!(twice.report.not_returned, once.report.not_returned);
    }

    #[test]
    fn a_generate_report_report_passes_as_it_is() {
        let report = "# Why does the UART occasionally print garbage?\n\n2 conclusions from session:findings, each backed by log lines (`L<n>` is the 1-based line number in the analysed log).\n\n## Conclusions\n\n1. The RX DMA ring runs dry while flash is erased [L1240, L1242]\n2. Each exhaustion is followed by an RX overrun [L1242-L1243]\n\n## Evidence\n\n### 1. The RX DMA ring runs dry while flash is erased\n\n- `L1240`: flash: erase sector 12\n- `L1242`: dma: rx descriptor ring exhausted\n\n_Note: root cause per KB-005_\n\n## Cited lines\n\n| Line | Supports conclusion |\n|---|---|\n| L1240 | 1 |\n";
        let checked = check_evidence(report, &lines(&[1240, 1241, 1242, 1243]));
        assert_eq!(checked.text, report);
        assert_eq!((checked.report.conclusions, checked.report.grounded, checked.report.marks_added), (2, 2, 0));
    }

    #[test]
    fn odd_input_does_not_panic() {
        for s in [
            "",
            "\n\n",
            "#",
            "- ",
            "1.",
            "L",
            "L1-",
            "L1–",
            "[L1: not in any skill result]",
            "```",
            "。",
            "é.L1",
            "\r\n- x\r\n",
        ] {
            let checked = check_evidence(s, &lines(&[1]));
            assert!(checked.text.len() >= s.len());
        }
    }
}
