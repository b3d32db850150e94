//! Relevance search over skills: "describe the task" -> ranked skills.
//!
//! BM25 (tantivy) over name, description and when_to_use, with one analyzer for English and
//! Chinese: Latin words are lowercased, stop words dropped and stemmed (so "publishing"
//! finds "publish"); runs of CJK characters become overlapping bigrams (so 串口乱码 finds
//! 串口 and 乱码 without a dictionary). The query is analyzed the same way and becomes a
//! disjunction of term queries (no query syntax: user text is never parsed as operators),
//! with the name field boosted. The index lives in RAM and is rebuilt from the library:
//! a catalog of thousands of skills indexes in milliseconds.

use anyhow::{Context as _, Result};
use serde::Serialize;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value};
use tantivy::tokenizer::{Language, LowerCaser, Stemmer, StopWordFilter, TextAnalyzer, Token, TokenStream, Tokenizer};
use tantivy::{Index, IndexReader, TantivyDocument, Term, doc};

const ANALYZER: &str = "skill_text";
/// How much more a query word counts when it is in the skill's name.
const NAME_BOOST: f32 = 2.0;
const WHEN_BOOST: f32 = 0.8;

/// What the index knows about one skill.
#[derive(Debug, Clone)]
pub struct SearchDoc {
    pub name: String,
    pub description: String,
    pub when_to_use: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    pub name: String,
    pub score: f32,
}

/// How [`fuse`] weighs the two sides (the memory's constants, see `memory::hybrid`): z of
/// the query's cosine among the skills of the same script, plus a share of the best BM25.
const LEXICAL_WEIGHT: f32 = 0.7;
/// z a skill needs on meaning alone. Measured on the five shipped skills with Chinese
/// queries for each: the right skill ranked first every time with z 0.93-1.56, while
/// queries about nothing they do (weather, in both languages) peaked at z 0.24.
const SEMANTIC_FLOOR: f32 = 0.8;
/// The prior of the cosine spread (few skills: the z-score would be noise without it).
/// e5 puts a Chinese query close to any Chinese text: unrelated pairs measured 0.83-0.85,
/// against 0.75-0.78 for English-English and cross-language pairs.
const PRIOR_MEAN: f32 = 0.78;
const PRIOR_MEAN_CJK_PAIR: f32 = 0.845;
const PRIOR_STD: f32 = 0.035;
const PRIOR_WEIGHT: f32 = 8.0;

/// Mostly CJK text (a quarter of its letters): scripts are compared among themselves.
pub fn mostly_cjk(text: &str) -> bool {
    let (mut cjk, mut letters) = (0usize, 0usize);
    for c in text.chars().filter(|c| c.is_alphanumeric()) {
        letters += 1;
        cjk += usize::from(is_cjk(c));
    }
    cjk * 4 >= letters.max(1)
}

/// Hybrid skill ranking: `lexical` (BM25 hits) fused with `cosines` (the query's cosine to
/// every skill, with whether the skill's text is mostly CJK). A cosine is judged against the
/// other skills of the same script (a Chinese query scores every Chinese text higher), so a
/// skill described in the other language ranks when it is clearly about the query.
pub fn fuse(query: &str, lexical: &[SearchHit], cosines: &[(String, bool, f32)], top: usize) -> Vec<SearchHit> {
    let best = lexical.iter().map(|h| h.score).fold(0f32, f32::max);
    let cjk_query = mostly_cjk(query);
    let mut fused = Vec::new();
    for (name, cjk, cos) in cosines {
        let peers: Vec<f32> = cosines.iter().filter(|(_, c, _)| c == cjk).map(|(_, _, v)| *v).collect();
        let n = peers.len() as f32;
        let prior = if cjk_query && *cjk { PRIOR_MEAN_CJK_PAIR } else { PRIOR_MEAN };
        let mean = (peers.iter().sum::<f32>() + PRIOR_WEIGHT * prior) / (n + PRIOR_WEIGHT);
        let var = (peers.iter().map(|v| (v - mean).powi(2)).sum::<f32>() + PRIOR_WEIGHT * PRIOR_STD.powi(2))
            / (n + PRIOR_WEIGHT);
        let z = (cos - mean) / var.sqrt().max(1e-4);
        let share = lexical.iter().find(|h| &h.name == name).map(|h| h.score / best.max(1e-6)).unwrap_or(0.0);
        tracing::debug!(skill = %name, cosine = cos, z, lexical_share = share, "skill search fusion");
        // Every lexical match stays (as without a model); meaning alone must clear the floor.
        let keep = z >= SEMANTIC_FLOOR || share > 0.0;
        if keep {
            fused.push(SearchHit { name: name.clone(), score: z + LEXICAL_WEIGHT * share });
        }
    }
    fused.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.name.cmp(&b.name)));
    fused.truncate(top);
    fused
}

/// An in-memory BM25 index of skills.
pub struct SkillIndex {
    reader: IndexReader,
    id: Field,
    fields: [(Field, f32); 3],
}

impl SkillIndex {
    pub fn build(docs: &[SearchDoc]) -> Result<SkillIndex> {
        let mut schema = Schema::builder();
        let text = TextOptions::default().set_indexing_options(
            TextFieldIndexing::default().set_tokenizer(ANALYZER).set_index_option(IndexRecordOption::WithFreqs),
        );
        let id = schema.add_text_field("id", STRING | STORED);
        let name = schema.add_text_field("name", text.clone());
        let description = schema.add_text_field("description", text.clone());
        let when = schema.add_text_field("when_to_use", text);
        let index = Index::create_in_ram(schema.build());
        index.tokenizers().register(ANALYZER, analyzer());
        let mut writer = index.writer_with_num_threads(1, 15_000_000).context("cannot create the search index")?;
        for d in docs {
            writer.add_document(doc!(
                id => d.name.clone(),
                name => d.name.replace('-', " "),
                description => d.description.clone(),
                when => d.when_to_use.clone(),
            ))?;
        }
        writer.commit().context("cannot build the search index")?;
        let reader = index.reader()?;
        Ok(SkillIndex { reader, id, fields: [(name, NAME_BOOST), (description, 1.0), (when, WHEN_BOOST)] })
    }

    /// The `top` skills most relevant to `query`, best first; skills sharing no term with
    /// the query are not returned.
    pub fn search(&self, query: &str, top: usize) -> Result<Vec<SearchHit>> {
        let terms = analyze(query);
        if terms.is_empty() || top == 0 {
            return Ok(Vec::new());
        }
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for term in &terms {
            for (field, boost) in self.fields {
                let q = TermQuery::new(Term::from_field_text(field, term), IndexRecordOption::WithFreqs);
                clauses.push((Occur::Should, Box::new(BoostQuery::new(Box::new(q), boost))));
            }
        }
        let searcher = self.reader.searcher();
        let top_docs = searcher.search(&BooleanQuery::new(clauses), &TopDocs::with_limit(top).order_by_score())?;
        let mut hits = Vec::with_capacity(top_docs.len());
        for (score, address) in top_docs {
            let doc: TantivyDocument = searcher.doc(address)?;
            let name = doc.get_first(self.id).and_then(|v| v.as_str()).unwrap_or_default().to_string();
            hits.push(SearchHit { name, score });
        }
        Ok(hits)
    }
}

/// The terms `text` is indexed under (skills and memories alike), first occurrence order.
pub fn analyze(text: &str) -> Vec<String> {
    analyze_spans(text).into_iter().map(|(term, _)| term).collect()
}

/// [`analyze`]'s terms, each with the words of `text` it first came from (the surface form,
/// before lowercasing and stemming).
pub fn analyze_spans(text: &str) -> Vec<(String, &str)> {
    let mut analyzer = analyzer();
    let mut stream = analyzer.token_stream(text);
    let mut out: Vec<(String, &str)> = Vec::new();
    while let Some(t) = stream.next() {
        if !out.iter().any(|(term, _)| term == &t.text) {
            out.push((t.text.clone(), text.get(t.offset_from..t.offset_to).unwrap_or_default()));
        }
    }
    out
}

/// Question words, auxiliaries and pronouns (with "one": "which one does he have"): what a
/// question is made of besides its subject. Not evidence that a text is relevant ("how does the user like X?" must not
/// match every memory with "how" or "does" in it), so neither indexed nor searched.
pub const QUESTION_WORDS: &[&str] = &[
    "how", "what", "which", "who", "whom", "whose", "when", "where", "why", "does", "do", "did", "can", "could",
    "would", "should", "shall", "might", "am", "been", "being", "has", "have", "had", "i", "me", "my", "mine", "we",
    "us", "our", "ours", "you", "your", "yours", "he", "him", "his", "she", "her", "hers", "its", "them", "theirs",
    "please", "tell", "about", "one", "ones",
];

/// Chinese question words and particles: dropped from CJK runs (which split around them)
/// before bigrams are formed, so 用户喜欢什么缩进 gives 用户 喜欢 缩进 and no 欢什 么缩.
const CJK_QUESTION_WORDS: &[&str] = &[
    "为什么",
    "怎么样",
    "是不是",
    "什么",
    "怎么",
    "怎样",
    "如何",
    "哪里",
    "哪儿",
    "哪个",
    "哪些",
    "为何",
    "是否",
    "请问",
    "多少",
    "几个",
    "我们",
    "你们",
    "他们",
    "她们",
];
const CJK_PARTICLES: &[char] =
    &['的', '了', '吗', '呢', '吧', '啊', '呀', '嘛', '哪', '是', '我', '你', '您', '他', '她', '它'];

pub(crate) fn analyzer() -> TextAnalyzer {
    let questions = StopWordFilter::remove(QUESTION_WORDS.iter().map(|w| w.to_string()));
    let builder = TextAnalyzer::builder(MixedScriptTokenizer).filter(LowerCaser).filter(questions);
    match StopWordFilter::new(Language::English) {
        Some(stop) => builder.filter(stop).filter(Stemmer::new(Language::English)).build(),
        None => builder.filter(Stemmer::new(Language::English)).build(),
    }
}

/// Which characters of a CJK run are question words or particles (not indexed).
fn cjk_noise(run: &[char]) -> Vec<bool> {
    let mut noise: Vec<bool> = run.iter().map(|c| CJK_PARTICLES.contains(c)).collect();
    for w in CJK_QUESTION_WORDS {
        let w: Vec<char> = w.chars().collect();
        if w.len() > run.len() {
            continue;
        }
        for start in 0..=run.len() - w.len() {
            if run[start..start + w.len()] == w[..] {
                noise[start..start + w.len()].iter_mut().for_each(|n| *n = true);
            }
        }
    }
    noise
}

/// Is `c` a letter of a script written without spaces between words: CJK ideographs (all
/// unified blocks and extensions, compatibility ideographs, 々 〆 〇 and the Suzhou
/// numerals), kana (hiragana, katakana, their extensions and half-width forms, the
/// prolonged-sound mark ー, combining voiced marks) or Hangul (syllables and jamo), plus
/// Bopomofo? Such runs are indexed as bigrams.
///
/// CJK punctuation and symbols (、。「」・, full-width brackets, radicals) are not: they
/// separate words, like spaces in Latin text. Full-width Latin letters and digits are not
/// either (they are indexed as Latin words). The one definition for the crate: the agent's
/// router should use it too.
pub fn is_cjk(c: char) -> bool {
    let in_block = matches!(c as u32,
        0x1100..=0x11FF // Hangul Jamo
        | 0x3000..=0x303F // CJK symbols and punctuation (letters only, below)
        | 0x3040..=0x309F // Hiragana
        | 0x30A0..=0x30FF // Katakana
        | 0x3100..=0x312F // Bopomofo
        | 0x3130..=0x318F // Hangul compatibility jamo
        | 0x31A0..=0x31BF // Bopomofo extended
        | 0x31F0..=0x31FF // Katakana phonetic extensions
        | 0x3400..=0x4DBF // CJK extension A
        | 0x4E00..=0x9FFF // CJK unified ideographs
        | 0xA960..=0xA97F // Hangul jamo extended A
        | 0xAC00..=0xD7AF // Hangul syllables
        | 0xD7B0..=0xD7FF // Hangul jamo extended B
        | 0xF900..=0xFAFF // CJK compatibility ideographs
        | 0xFF66..=0xFFDC // half-width katakana and Hangul
        | 0x1AFF0..=0x1B16F // kana extensions and supplement
        | 0x20000..=0x2FA1F // CJK extensions B-F, I, compatibility supplement
        | 0x30000..=0x323AF // CJK extensions G, H
    );
    // Inside those blocks, letters and letter-like numbers count; punctuation and
    // symbols do not. The combining voiced sound marks belong to the kana before them.
    in_block && (c.is_alphanumeric() || matches!(c, '\u{3099}' | '\u{309A}'))
}

/// Latin/digit words, and CJK runs as overlapping character bigrams (a lone CJK character
/// is its own token).
#[derive(Clone)]
struct MixedScriptTokenizer;

struct VecTokenStream {
    tokens: Vec<Token>,
    next: usize,
}

impl TokenStream for VecTokenStream {
    fn advance(&mut self) -> bool {
        self.next += 1;
        self.next <= self.tokens.len()
    }

    fn token(&self) -> &Token {
        &self.tokens[self.next - 1]
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.next - 1]
    }
}

impl Tokenizer for MixedScriptTokenizer {
    type TokenStream<'a> = VecTokenStream;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> VecTokenStream {
        let mut tokens = Vec::new();
        let mut push = |from: usize, to: usize| {
            let position = tokens.len();
            tokens.push(Token {
                offset_from: from,
                offset_to: to,
                position,
                text: text[from..to].to_string(),
                position_length: 1,
            });
        };
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        let end_of = |i: usize| chars.get(i + 1).map(|(o, _)| *o).unwrap_or(text.len());
        let mut i = 0;
        while i < chars.len() {
            let (start, c) = chars[i];
            if is_cjk(c) {
                let mut j = i;
                while j < chars.len() && is_cjk(chars[j].1) {
                    j += 1;
                }
                let run: Vec<char> = chars[i..j].iter().map(|(_, c)| *c).collect();
                let noise = cjk_noise(&run);
                // Each stretch between question words and particles is bigrammed on its own.
                let mut a = 0;
                while a < run.len() {
                    if noise[a] {
                        a += 1;
                        continue;
                    }
                    let mut b = a;
                    while b < run.len() && !noise[b] {
                        b += 1;
                    }
                    let (from, to) = (i + a, i + b);
                    if to - from == 1 {
                        push(chars[from].0, end_of(from));
                    } else {
                        for (k, (offset, _)) in chars.iter().enumerate().take(to - 1).skip(from) {
                            push(*offset, end_of(k + 1));
                        }
                    }
                    a = b;
                }
                i = j;
            } else if c.is_alphanumeric() {
                let mut j = i;
                while j < chars.len() && chars[j].1.is_alphanumeric() && !is_cjk(chars[j].1) {
                    j += 1;
                }
                push(start, end_of(j - 1));
                i = j;
            } else {
                i += 1;
            }
        }
        VecTokenStream { tokens, next: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Vec<String> {
        let mut a = analyzer();
        let mut s = a.token_stream(text);
        let mut out = Vec::new();
        while let Some(t) = s.next() {
            out.push(t.text.clone());
        }
        out
    }

    #[test]
    fn english_is_stemmed_and_chinese_is_bigrammed() {
        assert_eq!(tokens("Publishing the packages"), vec!["publish", "packag"]);
        assert_eq!(tokens("串口乱码"), vec!["串口", "口乱", "乱码"]);
        assert_eq!(tokens("把CSV转成JSON"), vec!["把", "csv", "转成", "json"]);
    }

    #[test]
    fn question_words_and_particles_are_not_terms() {
        assert!(tokens("how does it do that? what, which, when, why?").is_empty());
        assert_eq!(tokens("用户喜欢什么缩进吗"), vec!["用户", "户喜", "喜欢", "缩进"]);
        assert!(tokens("什么呢？怎么了吗").is_empty());
        assert_eq!(tokens("串口乱码是波特率导致的"), vec!["串口", "口乱", "乱码", "波特", "特率", "率导", "导致"]);
    }

    #[test]
    fn cjk_covers_ideographs_kana_hangul_but_not_punctuation() {
        for c in ['串', '㐀', '𠀀', '𰀀', '豈', '々', '〇', 'ひ', 'カ', 'ー', 'ｶ', '한', 'ᄀ', 'ㄅ'] {
            assert!(is_cjk(c), "{c} (U+{:04X}) is CJK", c as u32);
        }
        for c in ['、', '。', '「', '」', '・', '（', '，', 'Ａ', '１', 'a', 'é', ' ', '⼀'] {
            assert!(!is_cjk(c), "{c} (U+{:04X}) is not a CJK letter", c as u32);
        }
        assert_eq!(tokens("串口。乱码"), vec!["串口", "乱码"], "punctuation splits runs");
        assert_eq!(tokens("ブルー・スクリーン"), vec!["ブル", "ルー", "スク", "クリ", "リー", "ーン"]);
        assert_eq!(tokens("𠀀𠀁"), vec!["𠀀𠀁"], "extension B ideographs are bigrammed too");
    }

    #[test]
    fn ranks_by_relevance() {
        let docs = [
            ("publish-npm-package", "Publish a JavaScript package to the npm registry.", "Releasing to npm."),
            ("read-log-file", "Read a log file and return matching lines. 读取日志文件", "Looking at logs."),
            ("bump-semver", "Bump the semantic version of a project.", "Before a release."),
        ]
        .map(|(n, d, w)| SearchDoc { name: n.into(), description: d.into(), when_to_use: w.into() });
        let index = SkillIndex::build(&docs).unwrap();
        assert_eq!(index.search("publishing my package on npm", 3).unwrap()[0].name, "publish-npm-package");
        assert_eq!(index.search("查看日志", 3).unwrap()[0].name, "read-log-file");
        assert!(index.search("zebra", 3).unwrap().is_empty());
        assert!(index.search("\"unbalanced (query: AND", 3).is_ok(), "user text is never parsed as syntax");
    }
}
