//! The audit chain in PostgreSQL (`--store postgres://...`): its tables, migration 1 of the
//! store. Table `skillhost_audit` holds one row per line: `seq`, `prev_hash`, `hash`, the
//! session (for `audit show`), the writing host (`hostname:pid`, outside the hashed line) and
//! `line`, the exact text a file log would hold (without the newline).
//! `skillhost_audit_head` is one row with the `seq` and `hash` of the last line; appends
//! will lock it. `UNIQUE(seq)` and `UNIQUE(prev_hash)` make a fork impossible; a trigger
//! refuses UPDATE, DELETE and TRUNCATE of the lines.

/// Migration 1 (see `crate::store::migrations`): the chain's tables.
pub(crate) const PG_SCHEMA: &str = r#"
CREATE TABLE skillhost_audit_head (
    id smallint PRIMARY KEY CHECK (id = 1),
    seq bigint NOT NULL CHECK (seq >= 0),
    hash text NOT NULL
);
INSERT INTO skillhost_audit_head (id, seq, hash)
    VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');
CREATE TABLE skillhost_audit (
    seq bigint PRIMARY KEY CHECK (seq >= 1),
    prev_hash text NOT NULL UNIQUE,
    hash text NOT NULL UNIQUE,
    session text NOT NULL,
    host text NOT NULL,
    line text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX skillhost_audit_session ON skillhost_audit (session, seq);
CREATE FUNCTION skillhost_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'skillhost_audit is append-only: % refused', TG_OP;
END $$;
CREATE TRIGGER skillhost_audit_append_only BEFORE UPDATE OR DELETE ON skillhost_audit
    FOR EACH ROW EXECUTE FUNCTION skillhost_audit_append_only();
CREATE TRIGGER skillhost_audit_no_truncate BEFORE TRUNCATE ON skillhost_audit
    FOR EACH STATEMENT EXECUTE FUNCTION skillhost_audit_append_only();
"#;
