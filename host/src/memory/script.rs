//! The script of a text (Latin or CJK), the unit the semantic part of search corrects
//! cosines by: a multilingual model scores pairs in one script higher than across scripts,
//! so records, queries and the calibration passages are told apart by it. A leaf, shared by
//! [`super::vectors`], [`super::calibration`] and [`super::hybrid`].

/// Script of a record, for the per-language correction of cosine scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Script {
    Latin,
    Cjk,
}

impl Script {
    pub(super) fn of(text: &str) -> Script {
        let (mut cjk, mut letters) = (0usize, 0usize);
        for c in text.chars().filter(|c| c.is_alphanumeric()) {
            letters += 1;
            if matches!(c as u32, 0x3040..=0x30ff | 0x3400..=0x4dbf | 0x4e00..=0x9fff | 0xac00..=0xd7af | 0xf900..=0xfaff)
            {
                cjk += 1;
            }
        }
        // A CJK character carries about a word: a quarter of them makes it a CJK text.
        if cjk * 4 >= letters.max(1) { Script::Cjk } else { Script::Latin }
    }
}
