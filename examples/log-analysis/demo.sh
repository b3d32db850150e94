#!/usr/bin/env bash
# `just demo`: the log-analysis skills of the source design on the example UART log, run in
# sequence by this script (the agent loop that lets a model choose the steps comes later).
# Works offline: everything runs in the local sandbox with a throwaway home.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="${SKILLHOST_BIN:-$root/target/release/skillhost}"
# Only the data is mounted: the generator next to it explains the answer.
ws="$root/examples/log-analysis/workspace"
# A throwaway home; SKILLHOST_DEMO_HOME lets the test suite run the demo in its own.
export SKILLHOST_HOME="${SKILLHOST_DEMO_HOME:-$root/target/demo-home}"
rm -rf "$SKILLHOST_HOME"
session="demo-$(date +%Y%m%d-%H%M%S)"
sh() { "$bin" --workspace "$ws" "$@"; }
banner() { printf '\n\033[1m=== %s\033[0m\n' "$*"; }

banner "Installing the example skills into $SKILLHOST_HOME (granting what each declares)"
for s in read-log-file query-issue-kb write-analysis-snapshot generate-report publish-npm-package; do
    sh skill install "$root/target/skills/$s" --yes
done
sh skill list

banner "Step 1: read-log-file, ERROR lines of uart.log"
sh skill run read-log-file --session "$session" -p path=/workspace/uart.log -p level=ERROR -p max_lines=10

banner "Step 2: read-log-file, what happens around the first overrun"
first_overrun=$(grep -n -m1 'RX overrun' "$ws/uart.log" | cut -d: -f1)
since=$(sed -n "$((first_overrun - 3))p" "$ws/uart.log" | cut -c1-23)
sh skill run read-log-file --session "$session" -p path=/workspace/uart.log -p "since=$since" -p max_lines=8

banner "Step 3: query-issue-kb, past incidents with this symptom"
sh skill run query-issue-kb --session "$session" -p "query=uart RX overrun dma rx descriptor ring exhausted during flash erase" -p top=2

banner "Step 4: write-analysis-snapshot, keep the findings with their evidence lines"
# The chain around the first overrun: the flash erase just before it, the ISR latency it
# caused, the exhausted DMA ring, the overrun, and the garbage that followed.
before() { awk -v end="$first_overrun" -v pat="$1" 'NR < end && index($0, pat) { n = NR } END { print n }' "$ws/uart.log"; }
erase=$(before 'flash: erase sector'); latency=$(before 'rx irq latency'); exhausted=$(before 'descriptor ring exhausted')
garbage=$(awk -v start="$first_overrun" 'NR > start && index($0, "console: garbage") { print NR; exit }' "$ws/uart.log")
overrun=$first_overrun
quote() { sed -n "$1p" "$ws/uart.log" | cut -d' ' -f3- | sed 's/\\/\\\\/g; s/"/\\"/g'; }
findings=$(cat <<JSON
[
 {"claim": "The RX DMA descriptor ring (16 entries) runs dry while internal flash is being erased", "evidence": ["L$erase: $(quote $erase)", "L$latency: $(quote $latency)", "L$exhausted: $(quote $exhausted)"]},
 {"claim": "Each exhaustion is followed by a UART RX overrun that drops bytes", "evidence": ["L$exhausted", "L$overrun: $(quote $overrun)"]},
 {"claim": "The dropped bytes surface as garbage on the console", "evidence": ["L$overrun", "L$garbage: $(quote $garbage)"]}
]
JSON
)
sh skill run write-analysis-snapshot --session "$session" --params "{\"findings\": $findings, \"note\": \"root cause per KB-005\"}"

banner "Step 5: generate-report, every conclusion cites its log lines"
sh skill run generate-report --session "$session" -p "title=Why does the UART occasionally print garbage?"

banner "The sandbox at work: the log skill cannot read outside its mount"
sh skill run read-log-file --session "$session" -p path=/etc/passwd || true

banner "Instruction skill: publish-npm-package is guidance, not code"
sh skill info publish-npm-package | sed -n 1,12p
echo
echo "Audit trail: $SKILLHOST_HOME/audit/calls.jsonl ($(wc -l < "$SKILLHOST_HOME/audit/calls.jsonl") calls)"
