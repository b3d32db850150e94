#!/usr/bin/env bash
# `just demo`: the agent on the log-analysis example. `skillhost run --agent log-analyst` asks a
# model, step by step, which skill to call; with no provider configured it replays the
# decisions shipped next to this script (announced as scripted), so it works offline.
# Everything runs in the local sandbox with a throwaway home.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="${SKILLHOST_BIN:-$root/target/release/skillhost}"
# Only the data is mounted: the generator next to it explains the answer.
ws="$root/examples/log-analysis/workspace"
# A throwaway home; SKILLHOST_DEMO_HOME lets the test suite run the demo in its own.
export SKILLHOST_HOME="${SKILLHOST_DEMO_HOME:-$root/target/demo-home}"
rm -rf "$SKILLHOST_HOME"
sh() { "$bin" --workspace "$ws" "$@"; }
banner() { printf '\n\033[1m=== %s\033[0m\n' "$*"; }

banner "Installing the example skills into $SKILLHOST_HOME (granting what each declares)"
for s in read-log-file query-issue-kb write-analysis-snapshot generate-report publish-npm-package; do
    sh skill install "$root/target/skills/$s" --yes
done
sh skill list

banner "Installing the log-analyst agent profile"
sh agent add "$root/examples/log-analysis/agents/log-analyst"

question="why does the UART occasionally print garbage?"
configured=""
for v in OPENAI_API_KEY OPENAI_BASE_URL ANTHROPIC_API_KEY; do
    [ -n "${!v:-}" ] && configured="$v"
done
# A provider configured in the default home's skillhost.toml counts too (the demo home is fresh).
user_toml="${XDG_DATA_HOME:-$HOME/.local/share}/skillhost/skillhost.toml"
[ -z "$configured" ] && [ -f "$user_toml" ] && configured="$user_toml"
if [ -n "$configured" ]; then
    banner "The agent: $question (live model, configured by $configured)"
    [ -f "$user_toml" ] && cp "$user_toml" "$SKILLHOST_HOME/skillhost.toml"
    sh run --agent log-analyst "$question" || [ $? -eq 3 ]
else
    banner "The agent: $question (no provider configured: scripted replay of examples/log-analysis/decisions.json)"
    sh run --agent log-analyst --decisions "$root/examples/log-analysis/decisions.json" "$question"
fi

banner "The sandbox at work: the log skill cannot read outside its mount"
sh skill run read-log-file -p path=/etc/passwd || true

banner "Instruction skill: publish-npm-package is guidance, not code"
sh skill info publish-npm-package | sed -n 1,12p
echo
echo "Audit trail: $SKILLHOST_HOME/audit/audit.jsonl ($(wc -l < "$SKILLHOST_HOME/audit/audit.jsonl") lines; check it with \`skillhost audit verify\`)"
sh audit verify
