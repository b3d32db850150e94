"""Run every case of a cases file on two installed skills (a Rust skill and its port) and
compare the whole `skillhost --json skill run` report: validated params, result (output,
status, metadata, proposed memories, or the error), memories, denials and logs.

    python3 compare.py RUST_NAME PORT_NAME CASES.json WORKSPACE_DIR

Uses `$SKILLHOST_BIN` (default `skillhost`) and the home in `$SKILLHOST_HOME`; exits 1 on
any difference. tests/ports.rs makes the same comparison in the test suite.
"""

import json
import os
import subprocess
import sys
import tempfile

SH = os.environ.get("SKILLHOST_BIN", "skillhost")
rust, port, cases_file, workspace = sys.argv[1:5]
fields = ["params", "result", "memories", "denials", "logs"]
cases = json.load(open(cases_file))
bad = 0
def run(name, params, session):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(params, f, ensure_ascii=False)
    out = subprocess.run([SH, "--json", "--workspace", workspace, "skill", "run", name, "--session", session, "--params", "@" + f.name], capture_output=True, text=True)
    os.unlink(f.name)
    try:
        return json.loads(out.stdout)
    except Exception:
        return {"result": {"cli-error": out.stderr.strip()}}
for i, c in enumerate(cases):
    a = run(rust, c["params"], f"cmp-r-{i}")
    b = run(port, c["params"], f"cmp-p-{i}")
    diffs = [f for f in fields if a.get(f) != b.get(f)]
    status = "ok  " if not diffs else "DIFF"
    res = a.get("result", {})
    kind = "ok:" + res["ok"]["status"] if "ok" in res else "error:" + str(res.get("error", res).get("kind", res))
    print(f"{status} {c['name']} [{kind}]")
    if diffs:
        bad += 1
        for f in diffs:
            print(f"   field {f}:\n     rust: {json.dumps(a.get(f), ensure_ascii=False)[:1500]}\n     port: {json.dumps(b.get(f), ensure_ascii=False)[:1500]}")
print(f"{len(cases) - bad}/{len(cases)} cases equal")
sys.exit(1 if bad else 0)
