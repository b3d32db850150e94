//! The canonical form the chain hashes ([`canonical_json`]: no whitespace, object keys
//! sorted by bytes at every level), and an entry in that form before it is chained
//! ([`CanonicalEntry`]): its top-level fields sorted by key, each value already written.
//!
//! Why: a call's line used to be built as a `serde_json::Map` (every key and value an
//! allocation, a B-tree of them) and then walked again to write the canonical text. A
//! typed entry ([`super::CallEntry`]) is now written straight into canonical bytes by a
//! serializer that sorts each object's keys as it closes it ([`CanonicalEntry::typed`]).
//! It writes only what it can write exactly as the `Map` route would (the same bytes, so
//! old and new lines hash alike); for anything else (a non-string map key, `f32`, 128-bit
//! integers, bytes, serde_json's private tokens) it gives up and the entry takes the `Map`
//! route, so the result is the same bytes either way.

use serde::Serialize;
use serde::ser::{self, Impossible};
use serde_json::{Map, Value};

/// `value` as canonical JSON: no whitespace, object keys sorted by bytes at every level,
/// scalars as serde_json writes them. What the chain hashes.
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    // Only serde_json's own output and ASCII punctuation were written.
    String::from_utf8(out).unwrap_or_default()
}

pub(super) fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            write_canonical_object(map, out, |_| false);
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(v, out);
            }
            out.push(b']');
        }
        // Writing a scalar into a Vec cannot fail.
        scalar => {
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

/// `map` as a canonical object; returns the offset of the first key for which `mark`
/// holds (or of the closing brace when none does).
pub(super) fn write_canonical_object(
    map: &Map<String, Value>,
    out: &mut Vec<u8>,
    mark: impl Fn(&str) -> bool,
) -> usize {
    let mut pairs: Vec<(&String, &Value)> = map.iter().collect();
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    out.push(b'{');
    let mut marked = None;
    for (i, (k, v)) in pairs.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if marked.is_none() && mark(k) {
            marked = Some(out.len());
        }
        let _ = serde_json::to_writer(&mut *out, k);
        out.push(b':');
        write_canonical(v, out);
    }
    let end = out.len();
    out.push(b'}');
    marked.unwrap_or(end)
}

/// Fields gathered in one buffer: each key's text and its value's canonical JSON are
/// ranges of `buf`, so a field costs no allocation of its own.
#[derive(Debug, Clone, Default)]
struct Fields {
    buf: Vec<u8>,
    spans: Vec<Span>,
}

/// Where one field's key (its text, unescaped) and value (canonical JSON) are in `buf`.
#[derive(Debug, Clone, Copy)]
struct Span {
    key: (usize, usize),
    value: (usize, usize),
}

impl Fields {
    fn with_capacity(fields: usize, bytes: usize) -> Fields {
        Fields { buf: Vec::with_capacity(bytes), spans: Vec::with_capacity(fields) }
    }

    fn key(&self, span: &Span) -> &[u8] {
        &self.buf[span.key.0..span.key.1]
    }

    fn value(&self, span: &Span) -> &[u8] {
        &self.buf[span.value.0..span.value.1]
    }

    fn push_key(&mut self, key: &str) -> (usize, usize) {
        let start = self.buf.len();
        self.buf.extend_from_slice(key.as_bytes());
        (start, self.buf.len())
    }

    /// A field whose key is at `key` and whose value `write` appends to the buffer.
    fn push_with(
        &mut self,
        key: (usize, usize),
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), Unsupported>,
    ) -> Result<(), Unsupported> {
        let start = self.buf.len();
        write(&mut self.buf)?;
        self.spans.push(Span { key, value: (start, self.buf.len()) });
        Ok(())
    }

    fn push<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Unsupported> {
        let key = self.push_key(key);
        self.push_with(key, |buf| value.serialize(Canonical { out: buf }))
    }

    /// Sort by key (bytes, as `String` orders), keeping the last of equal keys: what
    /// inserting them one by one into a map does.
    fn sort(&mut self) {
        let mut spans = std::mem::take(&mut self.spans);
        spans.sort_by(|a, b| self.key(a).cmp(self.key(b)));
        // `dedup_by` drops the later of two equal neighbours: move its value to the one kept.
        spans.dedup_by(|later, kept| {
            let same = self.key(later) == self.key(kept);
            if same {
                kept.value = later.value;
            }
            same
        });
        self.spans = spans;
    }

    /// The fields as a canonical object into `out`; returns the offset of the first key
    /// for which `mark` holds (or of the closing brace when none does).
    fn write_object(&self, out: &mut Vec<u8>, mark: impl Fn(&[u8]) -> bool) -> usize {
        out.push(b'{');
        let mut marked = None;
        for (i, span) in self.spans.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let key = self.key(span);
            if marked.is_none() && mark(key) {
                marked = Some(out.len());
            }
            // Keys came in as `&str`: valid UTF-8.
            let _ = serde_json::to_writer(&mut *out, std::str::from_utf8(key).unwrap_or_default());
            out.push(b':');
            out.extend_from_slice(self.value(span));
        }
        let end = out.len();
        out.push(b'}');
        marked.unwrap_or(end)
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.spans.binary_search_by(|s| self.key(s).cmp(key.as_bytes()))
    }
}

/// An entry ready to be chained: fields sorted by key, each key once.
#[derive(Debug, Clone, Default)]
pub struct CanonicalEntry {
    fields: Fields,
}

impl From<Map<String, Value>> for CanonicalEntry {
    fn from(map: Map<String, Value>) -> CanonicalEntry {
        let mut fields = Fields::with_capacity(map.len(), 512);
        for (key, value) in &map {
            let key = fields.push_key(key);
            let _ = fields.push_with(key, |buf| {
                write_canonical(value, buf);
                Ok(())
            });
        }
        fields.sort();
        CanonicalEntry { fields }
    }
}

impl CanonicalEntry {
    /// `fields` (a struct or map) as an entry of `kind` for `session`, as
    /// [`super::entry::entry_of`] makes it: `kind` and `session` first, the fields after
    /// them (a field of the same name replaces them).
    pub(super) fn typed(kind: super::EntryKind, session: &str, fields: &impl Serialize) -> CanonicalEntry {
        // Something only the `Map` route writes: take it.
        CanonicalEntry::typed_route(kind, session, fields)
            .unwrap_or_else(|Unsupported| CanonicalEntry::from(super::entry::entry_of(kind, session, fields)))
    }

    pub(super) fn typed_route(
        kind: super::EntryKind,
        session: &str,
        fields: &impl Serialize,
    ) -> Result<CanonicalEntry, Unsupported> {
        let mut top = Fields::with_capacity(24, 1024);
        top.push("kind", &kind)?;
        top.push("session", session)?;
        fields.serialize(TopLevel { fields: &mut top })?;
        top.sort();
        Ok(CanonicalEntry { fields: top })
    }

    /// The canonical JSON of field `key`, if the entry has it.
    pub(super) fn get_json(&self, key: &str) -> Option<&[u8]> {
        let i = self.fields.position(key).ok()?;
        Some(self.fields.value(&self.fields.spans[i]))
    }

    pub(super) fn contains_key(&self, key: &str) -> bool {
        self.fields.position(key).is_ok()
    }

    /// Field `key` set to `value` (replacing it if present): the log's own fields (`seq`,
    /// `ts`, `prev`, `torn_tail_bytes`), numbers and strings, which always write.
    pub(super) fn insert(&mut self, key: &str, value: impl Into<Value>) {
        let value = value.into();
        let at = self.fields.position(key);
        let key_range = self.fields.push_key(key);
        let start = self.fields.buf.len();
        write_canonical(&value, &mut self.fields.buf);
        let new = Span { key: key_range, value: (start, self.fields.buf.len()) };
        match at {
            Ok(i) => self.fields.spans[i] = new,
            Err(i) => self.fields.spans.insert(i, new),
        }
    }

    /// The entry's `session`, when it is a string.
    pub(super) fn session(&self) -> Option<String> {
        serde_json::from_slice(self.get_json("session")?).ok()
    }

    /// The entry as a canonical object into `out`; returns the offset of the first key
    /// for which `mark` holds (or of the closing brace when none does).
    pub(super) fn write(&self, out: &mut Vec<u8>, mark: impl Fn(&[u8]) -> bool) -> usize {
        self.fields.write_object(out, mark)
    }

    /// The entry's canonical text (what `canonical_json` writes for it as a `Map`).
    pub fn canonical_text(&self) -> String {
        let mut out = Vec::new();
        self.write(&mut out, |_| false);
        String::from_utf8(out).unwrap_or_default()
    }
}

fn write_key(key: &str, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(&mut *out, key);
    out.push(b':');
}

/// Why the typed route gave up (never shown: the entry takes the `Map` route instead).
#[derive(Debug)]
pub(super) struct Unsupported;

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not written by the typed route")
    }
}

impl std::error::Error for Unsupported {}

impl ser::Error for Unsupported {
    fn custom<T: std::fmt::Display>(_: T) -> Unsupported {
        Unsupported
    }
}

fn json_scalar(
    out: &mut Vec<u8>,
    write: impl FnOnce(&mut serde_json::Serializer<&mut Vec<u8>>) -> serde_json::Result<()>,
) -> Result<(), Unsupported> {
    write(&mut serde_json::Serializer::new(out)).map_err(|_| Unsupported)
}

/// serde_json's own private types (an arbitrary-precision number, a raw value) pass through
/// a serializer as structs or newtypes under names like these; `to_value` turns them into
/// what they stand for, so they take the `Map` route.
fn is_private(name: &str) -> bool {
    name.starts_with("$serde_json")
}

/// Writes one value as canonical JSON into `out`.
struct Canonical<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> ser::Serializer for Canonical<'a> {
    type Ok = ();
    type Error = Unsupported;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = Seq<'a>;
    type SerializeMap = Object<'a>;
    type SerializeStruct = Object<'a>;
    type SerializeStructVariant = Object<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), Unsupported> {
        json_scalar(self.out, |s| s.serialize_bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<(), Unsupported> {
        self.serialize_i64(v.into())
    }
    fn serialize_i16(self, v: i16) -> Result<(), Unsupported> {
        self.serialize_i64(v.into())
    }
    fn serialize_i32(self, v: i32) -> Result<(), Unsupported> {
        self.serialize_i64(v.into())
    }
    fn serialize_i64(self, v: i64) -> Result<(), Unsupported> {
        json_scalar(self.out, |s| s.serialize_i64(v))
    }
    fn serialize_u8(self, v: u8) -> Result<(), Unsupported> {
        self.serialize_u64(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<(), Unsupported> {
        self.serialize_u64(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<(), Unsupported> {
        self.serialize_u64(v.into())
    }
    fn serialize_u64(self, v: u64) -> Result<(), Unsupported> {
        json_scalar(self.out, |s| s.serialize_u64(v))
    }
    // `to_value` widens an f32 to f64 first, which prints other digits: the `Map` route.
    fn serialize_f32(self, _: f32) -> Result<(), Unsupported> {
        Err(Unsupported)
    }
    fn serialize_f64(self, v: f64) -> Result<(), Unsupported> {
        // Both write a non-finite number as `null`.
        json_scalar(self.out, |s| s.serialize_f64(v))
    }
    fn serialize_char(self, v: char) -> Result<(), Unsupported> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), Unsupported> {
        json_scalar(self.out, |s| s.serialize_str(v))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Unsupported> {
        Err(Unsupported)
    }
    fn serialize_none(self) -> Result<(), Unsupported> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Unsupported> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Unsupported> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Unsupported> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Unsupported> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, name: &'static str, value: &T) -> Result<(), Unsupported> {
        if is_private(name) {
            return Err(Unsupported);
        }
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Unsupported> {
        self.out.push(b'{');
        write_key(variant, self.out);
        value.serialize(Canonical { out: &mut *self.out })?;
        self.out.push(b'}');
        Ok(())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Seq<'a>, Unsupported> {
        self.out.push(b'[');
        Ok(Seq { out: self.out, first: true, variant: false })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'a>, Unsupported> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Seq<'a>, Unsupported> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<Seq<'a>, Unsupported> {
        self.out.push(b'{');
        write_key(variant, self.out);
        self.out.push(b'[');
        Ok(Seq { out: self.out, first: true, variant: true })
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Object<'a>, Unsupported> {
        Ok(Object::new(self.out, len.unwrap_or(0), false))
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Object<'a>, Unsupported> {
        if is_private(name) {
            return Err(Unsupported);
        }
        Ok(Object::new(self.out, len, false))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Object<'a>, Unsupported> {
        self.out.push(b'{');
        write_key(variant, self.out);
        Ok(Object::new(self.out, len, true))
    }
}

/// An array (or a tuple variant's array) being written.
struct Seq<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
    /// Inside `{"variant":[...]}`: one more brace to close.
    variant: bool,
}

impl Seq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsupported> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        value.serialize(Canonical { out: &mut *self.out })
    }
    fn close(self) -> Result<(), Unsupported> {
        self.out.push(b']');
        if self.variant {
            self.out.push(b'}');
        }
        Ok(())
    }
}

// The four sequence traits serde asks for, with one body.
macro_rules! seq_trait {
    ($($trait:ident :: $method:ident),*) => {$(
        impl ser::$trait for Seq<'_> {
            type Ok = ();
            type Error = Unsupported;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsupported> {
                self.element(value)
            }
            fn end(self) -> Result<(), Unsupported> {
                self.close()
            }
        }
    )*};
}

seq_trait!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// An object being written: its fields are gathered, then written sorted when it closes.
struct Object<'a> {
    out: &'a mut Vec<u8>,
    fields: Fields,
    /// The key `serialize_key` took, waiting for its value.
    key: Option<(usize, usize)>,
    /// Inside `{"variant":{...}}`: one more brace to close.
    variant: bool,
}

impl<'a> Object<'a> {
    fn new(out: &'a mut Vec<u8>, len: usize, variant: bool) -> Object<'a> {
        // `len` is the serializer's hint: bounded, not trusted.
        let len = len.min(64);
        Object { out, fields: Fields::with_capacity(len, 64 * len), key: None, variant }
    }

    fn close(mut self) -> Result<(), Unsupported> {
        if self.key.is_some() {
            return Err(Unsupported);
        }
        self.fields.sort();
        self.fields.write_object(self.out, |_| false);
        if self.variant {
            self.out.push(b'}');
        }
        Ok(())
    }
}

/// `serialize_key` then `serialize_value`, into `fields`.
fn map_key<T: Serialize + ?Sized>(fields: &mut Fields, key: &T) -> Result<(usize, usize), Unsupported> {
    let start = fields.buf.len();
    key.serialize(KeyOnly { buf: &mut fields.buf })?;
    Ok((start, fields.buf.len()))
}

fn map_value<T: Serialize + ?Sized>(
    fields: &mut Fields,
    key: Option<(usize, usize)>,
    value: &T,
) -> Result<(), Unsupported> {
    let key = key.ok_or(Unsupported)?;
    fields.push_with(key, |buf| value.serialize(Canonical { out: buf }))
}

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = Unsupported;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Unsupported> {
        self.key = Some(map_key(&mut self.fields, key)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsupported> {
        map_value(&mut self.fields, self.key.take(), value)
    }
    fn end(self) -> Result<(), Unsupported> {
        self.close()
    }
}

impl ser::SerializeStruct for Object<'_> {
    type Ok = ();
    type Error = Unsupported;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Unsupported> {
        self.fields.push(key, value)
    }
    fn end(self) -> Result<(), Unsupported> {
        self.close()
    }
}

impl ser::SerializeStructVariant for Object<'_> {
    type Ok = ();
    type Error = Unsupported;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Unsupported> {
        self.fields.push(key, value)
    }
    fn end(self) -> Result<(), Unsupported> {
        self.close()
    }
}

/// The top-level object: its fields go to the entry instead of being written.
struct TopLevel<'a> {
    fields: &'a mut Fields,
}

/// The top-level object's fields as they come.
struct TopFields<'a> {
    fields: &'a mut Fields,
    key: Option<(usize, usize)>,
}

impl ser::SerializeMap for TopFields<'_> {
    type Ok = ();
    type Error = Unsupported;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Unsupported> {
        self.key = Some(map_key(self.fields, key)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unsupported> {
        map_value(self.fields, self.key.take(), value)
    }
    fn end(self) -> Result<(), Unsupported> {
        if self.key.is_some() { Err(Unsupported) } else { Ok(()) }
    }
}

impl ser::SerializeStruct for TopFields<'_> {
    type Ok = ();
    type Error = Unsupported;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<(), Unsupported> {
        self.fields.push(key, value)
    }
    fn end(self) -> Result<(), Unsupported> {
        Ok(())
    }
}

/// Anything but a map or a struct at the top is for the `Map` route (which drops it).
macro_rules! unsupported {
    ($($name:ident($($arg:ty),*) -> $ret:ty;)*) => {
        $(fn $name(self, $(_: $arg),*) -> Result<$ret, Unsupported> { Err(Unsupported) })*
    };
}

/// The three generic methods, refused alike.
macro_rules! unsupported_generic {
    () => {
        fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<(), Unsupported> {
            Err(Unsupported)
        }
        fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, _: &T) -> Result<(), Unsupported> {
            Err(Unsupported)
        }
        fn serialize_newtype_variant<T: Serialize + ?Sized>(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: &T,
        ) -> Result<(), Unsupported> {
            Err(Unsupported)
        }
    };
}

impl<'a> ser::Serializer for TopLevel<'a> {
    type Ok = ();
    type Error = Unsupported;
    type SerializeSeq = Impossible<(), Unsupported>;
    type SerializeTuple = Impossible<(), Unsupported>;
    type SerializeTupleStruct = Impossible<(), Unsupported>;
    type SerializeTupleVariant = Impossible<(), Unsupported>;
    type SerializeMap = TopFields<'a>;
    type SerializeStruct = TopFields<'a>;
    type SerializeStructVariant = Impossible<(), Unsupported>;

    unsupported! {
        serialize_bool(bool) -> ();
        serialize_i8(i8) -> ();
        serialize_i16(i16) -> ();
        serialize_i32(i32) -> ();
        serialize_i64(i64) -> ();
        serialize_u8(u8) -> ();
        serialize_u16(u16) -> ();
        serialize_u32(u32) -> ();
        serialize_u64(u64) -> ();
        serialize_f32(f32) -> ();
        serialize_f64(f64) -> ();
        serialize_char(char) -> ();
        serialize_str(&str) -> ();
        serialize_bytes(&[u8]) -> ();
        serialize_none() -> ();
        serialize_unit() -> ();
        serialize_unit_struct(&'static str) -> ();
        serialize_unit_variant(&'static str, u32, &'static str) -> ();
        serialize_seq(Option<usize>) -> Self::SerializeSeq;
        serialize_tuple(usize) -> Self::SerializeTuple;
        serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct;
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant;
        serialize_struct_variant(&'static str, u32, &'static str, usize) -> Self::SerializeStructVariant;
    }

    unsupported_generic!();
    fn serialize_map(self, _: Option<usize>) -> Result<TopFields<'a>, Unsupported> {
        Ok(TopFields { fields: self.fields, key: None })
    }
    fn serialize_struct(self, name: &'static str, _: usize) -> Result<TopFields<'a>, Unsupported> {
        if is_private(name) {
            return Err(Unsupported);
        }
        Ok(TopFields { fields: self.fields, key: None })
    }
}

/// A map key: only a string is taken (`to_value` turns numbers and others into strings
/// its own way; those take the `Map` route).
struct KeyOnly<'a> {
    buf: &'a mut Vec<u8>,
}

impl ser::Serializer for KeyOnly<'_> {
    type Ok = ();
    type Error = Unsupported;
    type SerializeSeq = Impossible<(), Unsupported>;
    type SerializeTuple = Impossible<(), Unsupported>;
    type SerializeTupleStruct = Impossible<(), Unsupported>;
    type SerializeTupleVariant = Impossible<(), Unsupported>;
    type SerializeMap = Impossible<(), Unsupported>;
    type SerializeStruct = Impossible<(), Unsupported>;
    type SerializeStructVariant = Impossible<(), Unsupported>;

    fn serialize_str(self, v: &str) -> Result<(), Unsupported> {
        self.buf.extend_from_slice(v.as_bytes());
        Ok(())
    }

    unsupported! {
        serialize_bool(bool) -> ();
        serialize_i8(i8) -> ();
        serialize_i16(i16) -> ();
        serialize_i32(i32) -> ();
        serialize_i64(i64) -> ();
        serialize_u8(u8) -> ();
        serialize_u16(u16) -> ();
        serialize_u32(u32) -> ();
        serialize_u64(u64) -> ();
        serialize_f32(f32) -> ();
        serialize_f64(f64) -> ();
        serialize_char(char) -> ();
        serialize_bytes(&[u8]) -> ();
        serialize_none() -> ();
        serialize_unit() -> ();
        serialize_unit_struct(&'static str) -> ();
        serialize_unit_variant(&'static str, u32, &'static str) -> ();
        serialize_seq(Option<usize>) -> Self::SerializeSeq;
        serialize_tuple(usize) -> Self::SerializeTuple;
        serialize_tuple_struct(&'static str, usize) -> Self::SerializeTupleStruct;
        serialize_tuple_variant(&'static str, u32, &'static str, usize) -> Self::SerializeTupleVariant;
        serialize_map(Option<usize>) -> Self::SerializeMap;
        serialize_struct(&'static str, usize) -> Self::SerializeStruct;
        serialize_struct_variant(&'static str, u32, &'static str, usize) -> Self::SerializeStructVariant;
    }

    unsupported_generic!();
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use serde_json::json;

    use super::*;
    use crate::audit::entry::entry_of;
    use crate::audit::{EntryKind, canonical_json};

    fn map_route(fields: &impl Serialize) -> String {
        canonical_json(&Value::Object(entry_of(EntryKind::Call, "s-1", fields)))
    }

    /// The typed route takes `fields` and writes the bytes the `Map` route writes.
    fn both_routes(fields: &impl Serialize) -> String {
        let typed = CanonicalEntry::typed_route(EntryKind::Call, "s-1", fields).expect("the typed route takes it");
        assert_eq!(typed.canonical_text(), map_route(fields));
        typed.canonical_text()
    }

    /// The typed route gives `fields` up, and the entry is the `Map` route's.
    fn map_route_only(fields: &impl Serialize) -> String {
        assert!(CanonicalEntry::typed_route(EntryKind::Call, "s-1", fields).is_err());
        let entry = CanonicalEntry::typed(EntryKind::Call, "s-1", fields).canonical_text();
        assert_eq!(entry, map_route(fields));
        entry
    }

    #[derive(Serialize)]
    struct Inner {
        z: u8,
        a: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u8>,
    }

    #[derive(Serialize)]
    enum Shape {
        Unit,
        New(u8),
        Tuple(u8, String),
        Struct { y: u8, b: bool },
    }

    #[derive(Serialize)]
    #[serde(untagged)]
    enum Detail {
        Boxed(Box<Inner>),
        Refused { denials: Vec<Shape> },
    }

    #[derive(Serialize)]
    struct Wide {
        session: String,
        /// Replaces the `kind` the entry starts with, as in a map.
        kind: &'static str,
        step: u32,
        params: Value,
        shapes: Vec<Shape>,
        floats: [f64; 4],
        ch: char,
        unit: (),
        pair: (i64, u64),
        inner: Inner,
        map: BTreeMap<String, i64>,
        #[serde(flatten)]
        detail: Detail,
    }

    fn wide(detail: Detail) -> Wide {
        Wide {
            session: "s-1".into(),
            kind: "step",
            step: 7,
            params: json!({ "é": 1, "z": [true, null, {"b": "\u{1}\"\\", "a": 1e300}], "A": -0.0, "😀": "x", "": {} }),
            shapes: vec![Shape::Unit, Shape::New(3), Shape::Tuple(1, "t".into()), Shape::Struct { y: 2, b: false }],
            floats: [0.1, f64::NAN, f64::INFINITY, 1.0],
            ch: '"',
            unit: (),
            pair: (i64::MIN, u64::MAX),
            inner: Inner { z: 1, a: None, skipped: None },
            map: BTreeMap::from([("b".into(), 2), ("a".into(), 1), ("\u{7f}".into(), 3)]),
            detail,
        }
    }

    #[test]
    fn typed_entries_are_written_as_the_map_route_writes_them() {
        let text = both_routes(&wide(Detail::Boxed(Box::new(Inner { z: 9, a: Some("é".into()), skipped: Some(1) }))));
        assert!(text.contains(r#""kind":"step""#), "a later field replaces an earlier one: {text}");
        both_routes(&wide(Detail::Refused { denials: vec![Shape::Unit] }));
        both_routes(&json!({ "b": 1, "a": { "d": [], "c": "x" } }));
        both_routes(&BTreeMap::<String, Value>::new());
    }

    #[test]
    fn what_the_typed_route_cannot_write_exactly_takes_the_map_route() {
        #[derive(Serialize)]
        struct Odd {
            narrow: f32,
        }
        #[derive(Serialize)]
        struct NumberKeys {
            by_id: HashMap<u32, &'static str>,
        }
        // `to_value` widens an f32 (0.1 becomes 0.10000000149011612); so does the entry.
        assert!(map_route_only(&Odd { narrow: 0.1 }).contains("0.10000000149011612"));
        assert!(map_route_only(&NumberKeys { by_id: HashMap::from([(3, "c")]) }).contains(r#"{"3":"c"}"#));
        // Not an object at all: the entry is its kind and session.
        assert_eq!(map_route_only(&[1, 2]), r#"{"kind":"call","session":"s-1"}"#);
    }

    #[test]
    fn serde_jsons_private_types_take_the_map_route() {
        // What serde_json's `arbitrary_precision` number and `raw_value` look like to a
        // serializer, whether or not those features are on in this build.
        struct LikeNumber;
        impl Serialize for LikeNumber {
            fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use ser::SerializeStruct as _;
                let mut st = s.serialize_struct("$serde_json::private::Number", 1)?;
                st.serialize_field("$serde_json::private::Number", "1")?;
                st.end()
            }
        }
        struct LikeRaw;
        impl Serialize for LikeRaw {
            fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_newtype_struct("$serde_json::private::RawValue", "1")
            }
        }
        #[derive(Serialize)]
        struct Holds<T> {
            n: T,
        }
        assert!(CanonicalEntry::typed_route(EntryKind::Call, "s-1", &Holds { n: LikeNumber }).is_err());
        assert!(CanonicalEntry::typed_route(EntryKind::Call, "s-1", &Holds { n: LikeRaw }).is_err());
        assert!(CanonicalEntry::typed_route(EntryKind::Call, "s-1", &LikeNumber).is_err());
    }

    #[test]
    fn fields_are_found_replaced_and_inserted_in_order() {
        let mut e = CanonicalEntry::typed(EntryKind::Call, "s-2", &json!({ "skill": "probe" }));
        assert_eq!(e.session().as_deref(), Some("s-2"));
        e.insert("seq", 5u64);
        e.insert("skill", "other");
        e.insert("a", Value::Null);
        assert_eq!(e.get_json("seq"), Some(&b"5"[..]));
        assert!(e.contains_key("a") && !e.contains_key("hash"));
        assert_eq!(e.canonical_text(), r#"{"a":null,"kind":"call","seq":5,"session":"s-2","skill":"other"}"#);
    }
}
