# skillhost task runner. Quick start: `just demo`, `just test` (on a machine without `just`,
# `cargo xtask demo` installs it and the wasm32-wasip2 target first).
# Long builds are not `--quiet`: a first build takes minutes and shows cargo's progress.
set shell := ["bash", "-euo", "pipefail", "-c"]

# Guest crates (skills-src/* with a Cargo.toml, and the test probe).
guest_crates := "read-log-file query-issue-kb write-analysis-snapshot generate-report probe attack-fs attack-net attack-exfil attack-exhaust"

default: demo

# Build every skill component and assemble installable skill dirs in target/skills/.
build-skills:
    rustup target list --installed 2>/dev/null | grep -q wasm32-wasip2 || rustup target add wasm32-wasip2
    CARGO_TARGET_DIR=target/wasm cargo build --profile guest --target wasm32-wasip2 $(for c in {{guest_crates}}; do printf -- '-p %s ' "$c"; done)
    rm -rf target/skills && mkdir -p target/skills
    for dir in skills-src/*/ tests/skills/*/; do \
        name=$(basename "$dir"); \
        [ -f "$dir/SKILL.md" ] || [ -f "$dir/Cargo.toml" ] || continue; \
        mkdir -p "target/skills/$name"; \
        [ -f "$dir/SKILL.md" ] && cp "$dir/SKILL.md" "target/skills/$name/"; \
        wasm="target/wasm/wasm32-wasip2/guest/${name//-/_}.wasm"; \
        if [ -f "$dir/Cargo.toml" ]; then cp "$wasm" "target/skills/$name/skill.wasm"; fi; \
    done
    # The hostile corpus's attacker components (tests/hostile/crates); tests/hostile_corpus.rs
    # assembles each attack's skill dir from its SKILL.md and one of these.
    mkdir -p target/skills/.hostile
    for c in tests/hostile/crates/*/; do c=$(basename "$c"); cp "target/wasm/wasm32-wasip2/guest/${c//-/_}.wasm" target/skills/.hostile/; done
    @echo "skills built: $(ls target/skills | tr '\n' ' ')"

# Build the host (release: tests, demo and bench share one build).
build:
    cargo build --release

# Install the example skills into a fresh demo home and run the log analysis on the example UART log.
demo: build-skills build
    bash examples/log-analysis/demo.sh

# The test binaries that touch the store (the home's skills, grants, secrets, memory, audit
# chain, paused runs): `just test` runs them a second time with every test home on a
# PostgreSQL database of its own (SKILLHOST_TEST_STORE=postgres, tests/common/mod.rs).
# tests/audit.rs pins the file log's own format and damage (the PostgreSQL chain's are
# tests/store_postgres.rs); the memory tests drive the engine every replica runs.
store_tests := "cli library secrets agent agent_skills agent_profiles service mcp mcp_guard mcp_ops"

# All tests: unit tests and the integration tests in tests/, through the real runtime, then
# the store-touching ones again on PostgreSQL (`store_tests`). First installs what they need
# (.ci/test-needs: guest toolchains, MCP clients, embedding model, PostgreSQL, haproxy;
# cached in target/) or fails naming what is missing; SKILLHOST_SKIP_GUESTS=1,
# SKILLHOST_SKIP_MCP_CLIENTS=1 or SKILLHOST_SKIP_EMBED_MODEL=1 leaves a group out, said again
# at the end.
test: build-skills
    bash .ci/test-needs
    status=0; cargo test --release || status=$?; \
    SKILLHOST_TEST_STORE=postgres cargo test --release --no-fail-fast $(for t in {{store_tests}}; do printf -- '--test %s ' "$t"; done) || status=$?; \
    bash .ci/test-needs --summary; exit $status

# Benchmarks: warm/cold call, compile, MCP over stdio/HTTP, against process-per-call baselines;
# audit appends/s from 3 hosts on PostgreSQL against the file log; MCP calls/s through haproxy
# to 1, 2, 3 hosts on one store. Prints ratios.
bench: build-skills
    cargo bench -p skillhost --bench runtime
    cargo bench -p skillhost --bench memory
    bash .ci/embed-model
    SKILLHOST_EMBED_MODEL="$PWD/target/models/multilingual-e5-small-q4.bin" cargo bench -p skillhost --bench memory_semantic
    cargo bench -p skillhost --bench agent
    cargo bench -p skillhost --bench mcp
    bash .ci/guest-toolchains
    cargo bench -p skillhost --bench guests
    cargo bench -p skillhost --bench oci
    bash .ci/postgres
    cargo bench -p skillhost --bench store
    bash .ci/haproxy
    cargo bench -p skillhost --bench balanced

# Formatting and clippy, warnings as errors.
lint:
    cargo fmt --all --check
    cargo clippy --release --all-targets -- -D warnings
    CARGO_TARGET_DIR=target/wasm cargo clippy --quiet --target wasm32-wasip2 -p skill-findings $(for c in {{guest_crates}}; do printf -- '-p %s ' "$c"; done) -- -D warnings
