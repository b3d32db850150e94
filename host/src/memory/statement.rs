//! What one memory states, in the form the update rules compare: its content units, its
//! numbers, its negations and whether it announces a change.
//!
//! Why not the search terms: search wants recall (stems, CJK bigrams, tags), while telling a
//! restatement from an update needs the *value* of a statement. So numbers are read as
//! numbers whether written as digits, English words ("two approvals") or Chinese numerals
//! (两秒, 3千, 一百零五), and a number followed by a unit ("10 ms", 五秒) is a value while one
//! standing alone ("rule 3:", "ticket 42", "#17") names something and so belongs to the
//! subject. Chinese negation is read by words (不, 没有, 别, 未, 非...) with the compounds that
//! merely contain such a character (非常 "very", 无论 "regardless", 不错 "good", 特别
//! "especially"...) left out. Chinese content is compared character by character (particles
//! dropped), which makes word order and junction bigrams irrelevant to a restatement.
//!
//! Why one file of ~900 lines: the readers of numbers, units, negation and change words
//! feed one comparison, and their word lists only make sense side by side (a word added to
//! one list must be checked against the others); splitting them would scatter one rule.

use std::collections::BTreeSet;

use tantivy::tokenizer::{TextAnalyzer, TokenStream as _};

use crate::search::{analyzer, is_cjk};

/// English negation words.
const NEGATIONS: &[&str] = &[
    "no", "not", "never", "none", "nothing", "cannot", "can't", "don't", "doesn't", "isn't", "won't", "without", "nor",
    "neither",
];
/// Chinese characters that negate when they stand as a word (or start one like 不要, 没有).
const CJK_NEGATIONS: &[char] = &['不', '没', '无', '别', '未', '非', '勿', '莫', '否'];
/// Words that contain a negation character but do not negate the statement they are in.
const CJK_NOT_NEGATIONS: &[&str] = &[
    "非常",
    "除非",
    "莫非",
    "是非",
    "非洲",
    "无论",
    "无关",
    "无聊",
    "无线",
    "无数",
    "无疑",
    "无限",
    "无人机",
    "毫无疑问",
    "不错",
    "不过",
    "不断",
    "不仅",
    "不但",
    "不管",
    "不论",
    "不久",
    "不少",
    "不得不",
    "不能不",
    "不如",
    "不同",
    "不然",
    "要不",
    "差不多",
    "不禁",
    "不妨",
    "不止",
    "了不起",
    "是不是",
    "对不起",
    "别人",
    "特别",
    "区别",
    "分别",
    "别的",
    "类别",
    "级别",
    "识别",
    "告别",
    "别名",
    "性别",
    "个别",
    "未来",
    "未知",
    "否则",
    "是否",
    "能否",
    "可否",
    "与否",
    "莫名",
    "没关系",
    "有没有",
    "无所谓",
    "非得",
    "无非",
];
/// Words that announce that a statement replaces an earlier one.
const MARKERS: &[&str] = &[
    "now",
    "currently",
    "instead",
    "anymore",
    "switched",
    "changed",
    "updated",
    "nowadays",
    "henceforth",
    "moved",
    "replaced",
];
const CJK_MARKERS: &[&str] = &[
    "现在",
    "目前",
    "如今",
    "改成",
    "改为",
    "改用",
    "换成",
    "换为",
    "换用",
    "不再",
    "已改",
    "变成",
    "变为",
    "从此",
    "搬到",
    "调整为",
    "调成",
];
/// Words that say nothing about which fact a memory is: its subject is always the user.
const GENERIC: &[&str] = &["user", "users"];
/// Function words the search stop list keeps (it is Lucene's short list): they name no
/// subject, so "moved from Shanghai" shares no extra word with "lives in Shanghai".
const FUNCTION_WORDS: &[&str] = &[
    "from", "over", "after", "before", "under", "since", "until", "than", "per", "via", "up", "out", "off", "also",
    "only", "just", "very", "so", "too", "each", "every", "any", "some", "more", "most", "other", "all", "both",
    "either", "across", "between", "during", "through", "within", "again", "still", "ever", "yet", "while", "because",
    "must", "may", "one's",
];
/// Nouns whose number names which one, not how much: "offsite number 1", "ticket 42",
/// "room 3" are about different things however the sentence goes on.
const ID_NOUNS: &[&str] = &[
    "number",
    "no",
    "ticket",
    "issue",
    "rule",
    "step",
    "room",
    "pr",
    "bug",
    "case",
    "item",
    "chapter",
    "section",
    "line",
    "page",
    "id",
    "floor",
    "gate",
    "phase",
    "stage",
    "sprint",
    "batch",
    "team",
    "group",
    "task",
    "shard",
    "run",
    "build",
    "job",
    "order",
    "invoice",
    "incident",
    "observation",
    "note",
    "entry",
    "record",
    "attempt",
    "trial",
    "sample",
    "iteration",
    "round",
    "session",
    "meeting",
    "day",
];
const CJK_GENERIC: &[&str] = &["用户", "我们", "他们"];
/// Words that say the same thing in a memory ("prefers tabs" / "likes tabs"): each group's
/// stems are read as the first one's, so a rewording with one of them restates the fact
/// instead of changing its value.
const SYNONYMS: &[&[&str]] = &[
    &["prefer", "like", "favor", "favour", "love", "fancy"],
    &["use", "utilize", "utilise"],
    &["live", "reside"],
    &["begin", "start", "commence"],
    &["big", "large", "huge"],
    &["small", "little", "tiny"],
    &["fast", "quick", "rapid"],
    &["buy", "purchase"],
    &["help", "assist"],
    &["show", "display"],
    &["car", "automobile"],
    &["movie", "film"],
];
/// Chinese nouns naming a single-valued attribute (the Chinese side of merge.rs's
/// ATTRIBUTES): sharing one is enough for two short statements to be about one thing.
const CJK_ATTRIBUTES: &[&str] = &[
    "编辑器",
    "城市",
    "名字",
    "邮箱",
    "时区",
    "电话",
    "手机号",
    "地址",
    "浏览器",
    "主题",
    "字体",
    "经理",
    "负责人",
    "导师",
    "生日",
    "职位",
    "公司",
    "住在",
];
/// Chinese synonyms, rewritten to the first word of each pair before the text is read.
const CJK_SYNONYMS: &[(&str, &str)] =
    &[("偏好", "喜欢"), ("喜爱", "喜欢"), ("偏爱", "喜欢"), ("使用", "用"), ("采用", "用"), ("居住", "住")];
/// Verbs that say how the user relates to something. Two statements that differ only in
/// these ("lives in Paris" / "likes Paris") say different things about the same object:
/// neither an update nor a restatement.
const PREDICATES: &[&str] = &[
    "prefer", "live", "visit", "hate", "dislike", "avoid", "use", "own", "want", "need", "work", "study", "teach",
    "know", "miss", "attend", "read", "write", "watch", "play", "eat", "drink", "speak",
];
/// Chinese words after which a number names which one (编号 12-07, 第3).
const CJK_ID_WORDS: &[&str] = &["编号", "号码", "工号", "单号", "第"];
/// Chinese characters dropped from the content units: particles, copulas, pronouns.
const CJK_PARTICLES: &[char] =
    &['的', '了', '吗', '呢', '吧', '啊', '呀', '嘛', '是', '在', '也', '都', '很', '我', '你', '他'];
/// Chinese numeral characters, and the compounds that contain one without being a number.
const CJK_DIGITS: &[(char, u64)] = &[
    ('零', 0),
    ('〇', 0),
    ('一', 1),
    ('二', 2),
    ('两', 2),
    ('三', 3),
    ('四', 4),
    ('五', 5),
    ('六', 6),
    ('七', 7),
    ('八', 8),
    ('九', 9),
];
const CJK_SCALES: &[(char, u64)] = &[('十', 10), ('百', 100), ('千', 1000), ('万', 10_000), ('亿', 100_000_000)];
const CJK_NOT_NUMBERS: &[&str] = &[
    "一起",
    "一些",
    "一直",
    "一定",
    "一样",
    "一般",
    "一切",
    "一致",
    "一下",
    "一点",
    "统一",
    "唯一",
    "万一",
    "十分",
    "千万",
    "一旦",
    "一边",
    "同一",
    "逐一",
    "一律",
    "一向",
    "一概",
    "单一",
    "一会",
    "一再",
    "一同",
    "一度",
    "万能",
    "千万别",
    "百分之",
    "一味",
    "一流",
    "一番",
    "不一",
    "一贯",
    "专一",
    "三思",
    "九州",
    "十足",
    "百度",
];
const EN_UNITS: &[(&str, u64)] = &[
    ("zero", 0),
    ("one", 1),
    ("two", 2),
    ("three", 3),
    ("four", 4),
    ("five", 5),
    ("six", 6),
    ("seven", 7),
    ("eight", 8),
    ("nine", 9),
    ("ten", 10),
    ("eleven", 11),
    ("twelve", 12),
    ("thirteen", 13),
    ("fourteen", 14),
    ("fifteen", 15),
    ("sixteen", 16),
    ("seventeen", 17),
    ("eighteen", 18),
    ("nineteen", 19),
];
const EN_TENS: &[(&str, u64)] = &[
    ("twenty", 20),
    ("thirty", 30),
    ("forty", 40),
    ("fifty", 50),
    ("sixty", 60),
    ("seventy", 70),
    ("eighty", 80),
    ("ninety", 90),
];
const EN_SCALES: &[(&str, u64)] =
    &[("hundred", 100), ("thousand", 1000), ("million", 1_000_000), ("billion", 1_000_000_000)];

/// One memory's content as the update rules see it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Statement {
    /// Latin stems (stop words, generic words and change markers removed) and Chinese
    /// characters (particles, numerals and negations removed), including unit words.
    pub units: BTreeSet<String>,
    /// What the statement is about, as the update rule measures it: the Latin stems of
    /// `units`, and Chinese as pairs of adjacent content characters (a character standing
    /// alone as itself). Characters alone make a shared five-character project name five
    /// shared units, enough to call any two records of that project one subject; as pairs
    /// a name is one run of pairs among the others, and [`Statement::subject_runs`] counts
    /// it as one word.
    pub subject: BTreeSet<String>,
    /// The Chinese content segments (between particles, numerals, negations, markers), in
    /// order: what shared runs are counted on.
    pub segments: Vec<Vec<char>>,
    /// Numbers followed by a unit ("10 ms", 两秒): what the statement says the value is.
    pub values: BTreeSet<String>,
    /// Numbers standing alone ("rule 3", "#17"): part of what the statement is about.
    pub ids: BTreeSet<String>,
    /// Negation words, canonical (没有 -> 没).
    pub negations: BTreeSet<String>,
    /// It says it replaces something ("now", "instead", 现在, 改成...).
    pub marker: bool,
    /// The units that are relation verbs (see `PREDICATES`: "live", "prefer", "use"...).
    pub predicates: BTreeSet<String>,
    /// Chinese attribute nouns it contains (see `CJK_ATTRIBUTES`).
    pub attributes: BTreeSet<&'static str>,
}

/// Stems of the synonym groups (each to its group's first) and of the predicate verbs.
struct Lexicon {
    synonyms: std::collections::HashMap<String, String>,
    predicates: BTreeSet<String>,
}

impl Lexicon {
    fn new(stemmer: &mut TextAnalyzer) -> Lexicon {
        let stem = |stemmer: &mut TextAnalyzer, w: &str| stemmed(stemmer, w).pop().unwrap_or_else(|| w.to_string());
        let mut synonyms = std::collections::HashMap::new();
        for group in SYNONYMS {
            let head = stem(stemmer, group[0]);
            for w in *group {
                synonyms.insert(stem(stemmer, w), head.clone());
            }
        }
        let predicates = PREDICATES
            .iter()
            .map(|w| {
                let s = stem(stemmer, w);
                synonyms.get(&s).cloned().unwrap_or(s)
            })
            .collect();
        Lexicon { synonyms, predicates }
    }
}

/// A piece of the text: a Latin/digit word, a number, a CJK run, or a separator.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Word(String),
    Number(f64),
    Cjk(String),
    Gap(char),
}

fn canonical(x: f64) -> String {
    let rounded = (x * 1e6).round() / 1e6;
    format!("{rounded}")
}

fn en_unit(w: &str) -> Option<u64> {
    EN_UNITS.iter().chain(EN_TENS.iter()).find(|(n, _)| *n == w).map(|(_, v)| *v)
}

fn en_scale(w: &str) -> Option<u64> {
    EN_SCALES.iter().find(|(n, _)| *n == w).map(|(_, v)| *v)
}

fn is_en_number_word(w: &str) -> bool {
    en_unit(w).is_some() || en_scale(w).is_some()
}

fn cjk_digit(c: char) -> Option<u64> {
    CJK_DIGITS.iter().find(|(d, _)| *d == c).map(|(_, v)| *v)
}

fn cjk_scale(c: char) -> Option<u64> {
    CJK_SCALES.iter().find(|(d, _)| *d == c).map(|(_, v)| *v)
}

fn is_cjk_numeral(c: char) -> bool {
    cjk_digit(c).is_some() || cjk_scale(c).is_some()
}

/// Value of a Chinese numeral written with digits and scales (二十五, 一百零五, 三万五千,
/// 两, 十). `lead` is an Arabic number written right before it (3千 = 3 x 1000).
fn cjk_number(chars: &[char], lead: Option<f64>) -> f64 {
    let mut total = 0.0;
    let mut section = 0.0;
    let mut digit: Option<f64> = lead;
    let mut after_digit = false;
    for &c in chars {
        if let Some(d) = cjk_digit(c) {
            let d = d as f64;
            // 二〇二六: digits in a row are positional.
            digit = Some(match digit {
                Some(p) if after_digit => p * 10.0 + d,
                _ => d,
            });
            after_digit = true;
        } else if let Some(s) = cjk_scale(c) {
            let s = s as f64;
            let here = section + digit.unwrap_or(0.0);
            if s >= 100_000_000.0 {
                total = (total + here).max(1.0) * s;
                section = 0.0;
            } else if s >= 10_000.0 {
                total += here.max(1.0) * s;
                section = 0.0;
            } else {
                section += digit.unwrap_or(1.0) * s;
            }
            digit = None;
            after_digit = false;
        }
    }
    total + section + digit.unwrap_or(0.0)
}

/// Split `text` (lowercased) into pieces; digits (with a decimal point or thousands
/// commas) become numbers.
fn pieces(text: &str) -> Vec<Piece> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() {
            let mut j = i;
            let mut s = String::new();
            while j < chars.len() {
                let d = chars[j];
                let joins = (d == '.' || d == ',') && j + 1 < chars.len() && chars[j + 1].is_ascii_digit();
                if d.is_ascii_digit() {
                    s.push(d);
                } else if joins && d == '.' && !s.contains('.') {
                    s.push('.');
                } else if !(joins && d == ',') {
                    break;
                }
                j += 1;
            }
            out.push(Piece::Number(s.parse().unwrap_or(0.0)));
            i = j;
        } else if is_cjk(c) {
            let mut j = i;
            while j < chars.len() && is_cjk(chars[j]) {
                j += 1;
            }
            out.push(Piece::Cjk(chars[i..j].iter().collect()));
            i = j;
        } else if c.is_alphanumeric() || c == '\'' {
            let mut j = i;
            while j < chars.len()
                && (chars[j].is_alphanumeric() || chars[j] == '\'')
                && !is_cjk(chars[j])
                && !chars[j].is_ascii_digit()
            {
                j += 1;
            }
            let w: String = chars[i..j].iter().collect();
            let w = w.trim_matches('\'');
            let w = w.strip_suffix("'s").unwrap_or(w).to_string();
            if !w.is_empty() {
                out.push(Piece::Word(w));
            }
            i = j;
        } else {
            out.push(Piece::Gap(c));
            i += 1;
        }
    }
    out
}

/// Mark which characters of a CJK run belong to one of `words`.
fn covered(run: &[char], words: &[&str]) -> Vec<bool> {
    let mut mark = vec![false; run.len()];
    for w in words {
        let w: Vec<char> = w.chars().collect();
        if w.len() > run.len() {
            continue;
        }
        for start in 0..=run.len() - w.len() {
            if run[start..start + w.len()] == w[..] {
                mark[start..start + w.len()].iter_mut().for_each(|m| *m = true);
            }
        }
    }
    mark
}

impl Statement {
    pub(crate) fn of(text: &str) -> Statement {
        thread_local! {
            // Built once per thread: search post-processing reads a statement per hit.
            static STEMMER: std::cell::RefCell<(TextAnalyzer, Option<std::rc::Rc<Lexicon>>)> =
                std::cell::RefCell::new((analyzer(), None));
        }
        STEMMER.with(|s| {
            let mut s = s.borrow_mut();
            let (stemmer, lexicon) = &mut *s;
            let lexicon = lexicon.get_or_insert_with(|| std::rc::Rc::new(Lexicon::new(stemmer))).clone();
            Statement::parse(text, stemmer, &lexicon)
        })
    }

    fn parse(text: &str, stemmer: &mut TextAnalyzer, lexicon: &Lexicon) -> Statement {
        let mut lower = text.to_lowercase();
        if lower.chars().any(is_cjk) {
            for (from, to) in CJK_SYNONYMS {
                if lower.contains(from) {
                    lower = lower.replace(from, to);
                }
            }
        }
        let mut st = Statement::default();
        let ps = pieces(&lower);
        // Pending number: its value and whether a unit may still follow.
        let mut pending: Option<f64> = None;
        let mut en_current: Option<(f64, f64)> = None; // (total, current) of English number words
        let mut i = 0;
        // The pending number follows an identifier noun (see ID_NOUNS), a `#`, a Chinese
        // 编号/第, or is joined to such a number ("12-07"): it is an id. A number in digits
        // otherwise says how much, with or without a unit after it ("the limit is 500").
        let mut pending_is_id = false;
        let mut prev_word: Option<String> = None;
        let mut cjk_id_context = false;
        // The English number words being read follow an identifier noun ("rule two").
        let mut en_is_id = false;
        let mut last_number_was_id = false;
        let flush = |st: &mut Statement, value: f64, unit_follows: bool| {
            if unit_follows {
                st.values.insert(canonical(value));
            } else {
                st.ids.insert(canonical(value));
            }
        };
        while i < ps.len() {
            match &ps[i] {
                Piece::Number(n) => {
                    if let Some(v) = pending.take() {
                        flush(&mut st, v, !pending_is_id);
                    }
                    // 3千, 1.5万: digits scaled by a Chinese numeral right after them.
                    if let Some(Piece::Cjk(run)) = ps.get(i + 1) {
                        let run: Vec<char> = run.chars().collect();
                        let n_len = run.iter().take_while(|c| is_cjk_numeral(**c)).count();
                        if n_len > 0 && cjk_scale(run[0]).is_some() {
                            let value = cjk_number(&run[..n_len], Some(*n));
                            let rest: String = run[n_len..].iter().collect();
                            st.cjk(&rest, Some(value));
                            i += 2;
                            continue;
                        }
                    }
                    let after_hash = i > 0 && ps[i - 1] == Piece::Gap('#');
                    let joined = i > 1
                        && matches!(ps[i - 1], Piece::Gap('-' | '/'))
                        && matches!(ps[i - 2], Piece::Number(_))
                        && last_number_was_id;
                    pending = Some(*n);
                    pending_is_id = prev_word.take().is_some_and(|w| ID_NOUNS.contains(&w.as_str()))
                        || after_hash
                        || joined
                        || std::mem::take(&mut cjk_id_context);
                    last_number_was_id = pending_is_id;
                }
                Piece::Word(w) => {
                    let w = w.as_str();
                    if let Some(v) = en_unit(w).or_else(|| en_scale(w)) {
                        if let Some(p) = pending.take() {
                            flush(&mut st, p, !pending_is_id);
                        }
                        if en_current.is_none() {
                            en_is_id = prev_word.as_deref().is_some_and(|w| ID_NOUNS.contains(&w));
                        }
                        let (mut total, mut current) = en_current.unwrap_or((0.0, 0.0));
                        if let Some(s) = en_scale(w) {
                            let s = s as f64;
                            if s >= 1000.0 {
                                total += current.max(1.0) * s;
                                current = 0.0;
                            } else {
                                current = current.max(1.0) * s;
                            }
                        } else {
                            current += v as f64;
                        }
                        en_current = Some((total, current));
                        i += 1;
                        continue;
                    }
                    if w == "and"
                        && en_current.is_some()
                        && matches!(ps.get(i + 2), Some(Piece::Word(n)) if is_en_number_word(n))
                    {
                        i += 1;
                        continue;
                    }
                    let unit_follows =
                        !(NEGATIONS.contains(&w) || MARKERS.contains(&w) || stemmed(stemmer, w).is_empty());
                    if let Some((total, current)) = en_current.take() {
                        flush(&mut st, total + current, unit_follows || !en_is_id);
                    }
                    if let Some(p) = pending.take() {
                        flush(&mut st, p, !pending_is_id);
                    }
                    st.word(stemmer, lexicon, w, ps.get(i + 1), ps.get(i + 2));
                    prev_word = Some(w.to_string());
                    cjk_id_context = false;
                }
                Piece::Cjk(run) => {
                    if let Some((total, current)) = en_current.take() {
                        flush(&mut st, total + current, true);
                    }
                    let first_is_particle = run.chars().next().is_some_and(|c| CJK_PARTICLES.contains(&c));
                    prev_word = None;
                    let carried = pending.take();
                    if let Some(p) = carried
                        && (first_is_particle || pending_is_id)
                    {
                        flush(&mut st, p, !pending_is_id);
                        st.cjk(run, None);
                    } else {
                        st.cjk(run, carried);
                    }
                    cjk_id_context = CJK_ID_WORDS.iter().any(|w| run.ends_with(w));
                }
                Piece::Gap(c) => {
                    // A space may separate a number from its unit; other separators end it.
                    if !c.is_whitespace() && *c != '-' {
                        prev_word = None;
                        if *c != '#' {
                            cjk_id_context = false;
                        }
                        if let Some((total, current)) = en_current.take() {
                            flush(&mut st, total + current, !en_is_id);
                        }
                        if let Some(p) = pending.take() {
                            flush(&mut st, p, !pending_is_id);
                            if *c == '%' {
                                st.units.insert("%".into());
                            }
                        }
                    }
                }
            }
            i += 1;
        }
        if let Some((total, current)) = en_current.take() {
            flush(&mut st, total + current, !en_is_id);
        }
        if let Some(p) = pending.take() {
            flush(&mut st, p, !pending_is_id);
        }
        st
    }

    fn word(
        &mut self,
        stemmer: &mut TextAnalyzer,
        lexicon: &Lexicon,
        w: &str,
        next: Option<&Piece>,
        after: Option<&Piece>,
    ) {
        let next_word = match (next, after) {
            (Some(Piece::Gap(_)), Some(Piece::Word(n))) => Some(n.as_str()),
            _ => None,
        };
        if w == "no" && next_word == Some("longer") {
            self.marker = true;
        }
        if w == "longer" && self.marker && self.negations.contains("no") {
            return;
        }
        if NEGATIONS.contains(&w) || w.ends_with("n't") {
            self.negations.insert(w.to_string());
            return;
        }
        if MARKERS.contains(&w) {
            self.marker = true;
            return;
        }
        if GENERIC.contains(&w) || FUNCTION_WORDS.contains(&w) {
            return;
        }
        for t in stemmed(stemmer, w) {
            let t = lexicon.synonyms.get(&t).cloned().unwrap_or(t);
            if lexicon.predicates.contains(&t) {
                self.predicates.insert(t.clone());
            }
            self.subject.insert(t.clone());
            self.units.insert(t);
        }
    }

    /// Close the Chinese content segment being read (see `subject`).
    fn end_segment(&mut self, segment: &mut Vec<char>) {
        match segment.len() {
            0 => return,
            1 => {
                self.subject.insert(segment[0].to_string());
            }
            _ => {
                for pair in segment.windows(2) {
                    self.subject.insert(pair.iter().collect());
                }
            }
        }
        self.segments.push(std::mem::take(segment));
    }

    /// A run of CJK characters; `lead` is a number written right before it (5秒, 两秒).
    fn cjk(&mut self, run: &str, lead: Option<f64>) {
        let chars: Vec<char> = run.chars().collect();
        if chars.is_empty() {
            if let Some(v) = lead {
                self.values.insert(canonical(v));
            }
            return;
        }
        for a in CJK_ATTRIBUTES {
            if run.contains(a) {
                self.attributes.insert(a);
            }
        }
        let not_negation = covered(&chars, CJK_NOT_NEGATIONS);
        let not_number = covered(&chars, CJK_NOT_NUMBERS);
        let marker = covered(&chars, CJK_MARKERS);
        let generic = covered(&chars, CJK_GENERIC);
        let mut lead = lead;
        let mut segment: Vec<char> = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            // Particles, markers, generic words, numerals and negations end a content segment.
            let numeral = is_cjk_numeral(c) && !not_number[i];
            let negation = CJK_NEGATIONS.contains(&c) && !not_negation[i];
            let dropped = CJK_PARTICLES.contains(&c) || marker[i] || generic[i] || numeral || negation;
            if dropped {
                self.end_segment(&mut segment);
            } else {
                segment.push(c);
            }
            if marker[i] {
                self.marker = true;
                // 不再 ("no longer") also negates.
                if c == '不' {
                    self.negations.insert("不".into());
                }
                i += 1;
                continue;
            }
            if generic[i] {
                i += 1;
                continue;
            }
            if is_cjk_numeral(c) && !not_number[i] {
                let mut j = i;
                while j < chars.len() && is_cjk_numeral(chars[j]) && !not_number[j] {
                    j += 1;
                }
                let value = cjk_number(&chars[i..j], lead.take());
                let unit_follows = j < chars.len() && !CJK_PARTICLES.contains(&chars[j]);
                if unit_follows {
                    self.values.insert(canonical(value));
                } else {
                    self.ids.insert(canonical(value));
                }
                i = j;
                continue;
            }
            // A number in digits before the run (5秒, 3千条, 500的) says how much.
            if let Some(v) = lead.take() {
                self.values.insert(canonical(v));
            }
            if CJK_NEGATIONS.contains(&c) && !not_negation[i] {
                self.negations.insert(c.to_string());
                // 没有 is 没; 不要 is 不.
                if c == '没' && chars.get(i + 1) == Some(&'有') {
                    i += 1;
                }
                i += 1;
                continue;
            }
            if !CJK_PARTICLES.contains(&c) {
                self.units.insert(c.to_string());
            }
            i += 1;
        }
        self.end_segment(&mut segment);
        if let Some(v) = lead {
            self.values.insert(canonical(v));
        }
    }

    /// How many words of its subject this statement shares with `other`: a shared Latin
    /// stem is one, and so is each run of adjacent shared Chinese pairs (a shared name or
    /// word, however many characters long).
    pub(crate) fn shared_words(&self, other: &Statement) -> usize {
        let latin = self.subject.iter().filter(|u| !u.chars().any(is_cjk) && other.subject.contains(*u)).count();
        let mut runs = 0;
        for seg in &self.segments {
            if seg.len() == 1 {
                runs += usize::from(other.subject.contains(&seg[0].to_string()));
                continue;
            }
            let mut in_run = false;
            for pair in seg.windows(2) {
                let shared = other.subject.contains(&pair.iter().collect::<String>());
                runs += usize::from(shared && !in_run);
                in_run = shared;
            }
        }
        latin + runs
    }

    /// Every number, value or not.
    pub(crate) fn numbers(&self) -> BTreeSet<&str> {
        self.values.iter().chain(self.ids.iter()).map(String::as_str).collect()
    }

    /// The terms a restatement is measured on: content units and numbers.
    pub(crate) fn terms(&self) -> BTreeSet<String> {
        let mut t = self.units.clone();
        t.extend(self.numbers().into_iter().map(|n| format!("#{n}")));
        t
    }

    pub(crate) fn negated(&self) -> bool {
        !self.negations.is_empty()
    }
}

fn stemmed(stemmer: &mut TextAnalyzer, w: &str) -> Vec<String> {
    let mut s = stemmer.token_stream(w);
    let mut out = Vec::new();
    while let Some(t) = s.next() {
        out.push(t.text.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::Statement;

    fn values(t: &str) -> Vec<String> {
        Statement::of(t).values.into_iter().collect()
    }

    #[test]
    fn numbers_in_words_and_chinese_numerals_are_numbers() {
        assert_eq!(values("needs two approvals"), values("needs 2 approvals"));
        assert_eq!(values("needs one approval"), vec!["1"]);
        assert_eq!(values("waits twenty five seconds"), vec!["25"]);
        assert_eq!(values("three hundred and five rows"), vec!["305"]);
        assert_eq!(values("two thousand five hundred rows"), vec!["2500"]);
        assert_eq!(values("超时两秒"), vec!["2"]);
        assert_eq!(values("超时五秒"), values("超时5秒"));
        assert_eq!(values("十个"), vec!["10"]);
        assert_eq!(values("二十五个"), vec!["25"]);
        assert_eq!(values("一百零五行"), vec!["105"]);
        assert_eq!(values("3千条"), vec!["3000"]);
        assert_eq!(values("三千条"), vec!["3000"]);
        assert_eq!(values("1.5万条"), vec!["15000"]);
        assert_eq!(values("两万条"), vec!["20000"]);
        assert_eq!(values("timeout 10 ms"), vec!["10"]);
        assert_eq!(values("10,000 rows"), vec!["10000"]);
        assert!(values("一起去").is_empty(), "一起 is 'together', not one");
        assert!(values("十分重要").is_empty(), "十分 is 'very'");
        let id = Statement::of("rule 3: keep it short");
        assert!(id.values.is_empty() && id.ids.contains("3"), "{id:?}");
    }

    #[test]
    fn chinese_negation_is_read_by_words() {
        for t in ["他不喜欢tabs", "没有用pnpm", "别用npm", "未配置代理", "并非默认", "不要提交", "无需重启"]
        {
            assert!(Statement::of(t).negated(), "{t} is a negation");
        }
        for t in
            ["他非常喜欢tabs", "无论如何用pnpm", "这个方案不错", "特别喜欢vim", "是否启用", "区别很小", "未来用rust"]
        {
            assert!(!Statement::of(t).negated(), "{t} is not a negation: {:?}", Statement::of(t).negations);
        }
        assert_eq!(Statement::of("没有用pnpm").negations, Statement::of("没用pnpm").negations);
    }

    #[test]
    fn markers_and_units() {
        let s = Statement::of("The user now prefers spaces for indentation");
        assert!(s.marker);
        assert!(!s.units.contains("user") && s.units.contains("space"), "{s:?}");
        assert!(Statement::of("用户现在用空格").marker);
        assert!(Statement::of("no longer uses npm").negated() && Statement::of("no longer uses npm").marker);
        assert!(!Statement::of("takes longer than 2 s").marker);
    }

    #[test]
    fn a_number_in_digits_without_a_unit_says_how_much_unless_it_names_one() {
        let s = Statement::of("The API rate limit is 500");
        assert!(s.values.contains("500") && s.ids.is_empty(), "{s:?}");
        assert!(Statement::of("网关的限流是500").values.contains("500"));
        assert!(Statement::of("The standup moved to 09:30").values.contains("9"));
        let hash = Statement::of("#17 fixes the login bug");
        assert!(hash.ids.contains("17") && hash.values.is_empty(), "{hash:?}");
        let desk = Statement::of("林的工位编号 12-07");
        assert!(desk.ids.contains("12") && desk.ids.contains("7") && desk.values.is_empty(), "{desk:?}");
        assert!(Statement::of("第3步先备份").ids.contains("3"));
    }

    #[test]
    fn synonyms_read_as_one_word_and_chinese_subjects_as_pairs() {
        assert_eq!(Statement::of("Lin prefers tabs").units, Statement::of("Lin likes tabs").units);
        assert_eq!(Statement::of("林偏好深色主题").units, Statement::of("林喜欢深色主题").units);
        assert!(Statement::of("Lin lives in Paris").predicates.contains("live"));
        let a = Statement::of("青鸟小程序每次发版都要经过微信审核");
        let b = Statement::of("青鸟小程序每两周发一个版本");
        assert!(a.subject.contains("青鸟") && a.subject.contains("审核") && !a.subject.contains("青"), "{a:?}");
        // 青鸟小程序每 is one shared run: one word, not six characters.
        assert_eq!(a.shared_words(&b), 1, "{a:?} {b:?}");
    }

    #[test]
    fn a_number_after_an_identifier_noun_names_which_one() {
        let s = Statement::of("The team offsite number 1 takes place in Nairobi.");
        assert!(s.ids.contains("1") && s.values.is_empty(), "{s:?}");
        assert!(Statement::of("Ticket 42 is assigned to Bob").ids.contains("42"));
        let v = Statement::of("the build takes 10 minutes");
        assert!(v.values.contains("10") && v.ids.is_empty(), "{v:?}");
    }
}
