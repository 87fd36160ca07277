#!/usr/bin/env bash
# The package layout of issue 29 (shared DESIGN.md "Layout"), as moves the lead applies after merging every
# branch: config/ for the Settings and their types, serve/ for what serves others, records for the records
# several rooms share, and tests mirroring the package. Run at the repository root on a clean tree:
#
#     bash relayout.sh            # git mv + import rewrites, staged; review with `git diff --cached --stat`
#     ruff check . && mypy && pytest -q tests/config tests/serve ...   # then commit
#
# It refuses to run twice (kernelloop/config/ exists) or on a dirty tree. Nothing in it hard-codes a
# module's content: classes are cut by the AST, imports rewritten by the AST, names and paths by regex.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
if [ -d kernelloop/config ]; then echo "relayout: already applied (kernelloop/config/ exists)"; exit 0; fi
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then echo "relayout: commit or stash first"; exit 2; fi
PY=${PYTHON:-python3}
RUFF=${RUFF:-ruff}

# ---------------------------------------------------------------- 1. module moves
mkdir -p kernelloop/config kernelloop/serve
git mv kernelloop/config.py kernelloop/config/endpoint.py
for m in settings defaults units workspace; do git mv "kernelloop/$m.py" "kernelloop/config/$m.py"; done
git mv kernelloop/runs.py kernelloop/serve/runs.py
git mv kernelloop/jobs.py kernelloop/serve/jobs.py
git mv kernelloop/job_threads.py kernelloop/serve/job_threads.py
git mv kernelloop/requests.py kernelloop/serve/requests.py
git mv kernelloop/mcp_server.py kernelloop/serve/mcp.py
git mv kernelloop/langchain_tools.py kernelloop/serve/langchain.py
git mv kernelloop/results.py kernelloop/records.py
cat > kernelloop/config/__init__.py <<'EOF'
"""Settings and their types: defaults.py (the values, plain constants), units.py (durations, targets,
Device), workspace.py, settings.py (one Settings: flags > KERNELLOOP_* > .env > kernelloop.toml >
defaults, made by `load_settings` at every entry point), fields.py (the knobs' types with their caps)
and endpoint.py (the model endpoint).

Imports nothing: the verifier side reads config.defaults, units and workspace with torch alone.
"""
EOF
cat > kernelloop/serve/__init__.py <<'EOF'
"""What serves others: runs (solve, resume, replay, fork), background jobs, the MCP server, the
LangChain tools, and the request models they all validate with."""
EOF

# ---------------------------------------------------------------- 2. tests mirror the package
declare -A ROOM=(
  [test_settings]=config [test_settings_drift]=config [test_defaults]=config
  [test_mcp]=serve [test_mcp_progress]=serve [test_langchain_tool]=serve [test_requests]=serve
  [test_warm_start_entry_points]=serve
  [test_cli_usage]=cli [test_doctor]=cli [test_profile_cli]=cli [test_packaging]=cli [test_new_user]=cli
  [test_llm]=agents [test_critic_schema]=agents [test_critique_set]=agents
  [test_adversarial]=verify [test_candidate_text]=verify [test_compare]=verify [test_cold_path]=verify
  [test_degenerate_reference]=verify [test_fault_tolerance]=verify [test_floods]=verify
  [test_hostile_dirs]=verify [test_interpreter_order]=verify [test_localise]=verify [test_pool]=verify
  [test_precompile]=verify [test_ray_cluster]=verify [test_ray_pool]=verify [test_speed]=verify
  [test_standby]=verify [test_static_bindings]=verify [test_static_check]=verify [test_tensor_files]=verify
  [test_verifier_deps]=verify [test_leaderboard_lint]=verify [standby_probe]=verify [preload_probe]=verify
  [test_gpu]=profile [test_ncu]=profile [test_profiler]=profile [test_roofline]=profile [test_timing]=profile
  [test_channel]=sandbox [test_containment]=sandbox [test_isolation]=sandbox [test_sandbox]=sandbox
  [channel_probe]=sandbox [sandbox_probe]=sandbox
  [test_attention_benchmarks]=evals [test_attention_flex_compile]=evals [test_attention_problems]=evals
  [test_attention_starters]=evals [test_bench]=evals [test_bench_tokens]=evals [test_metrics]=evals
  [test_problem_suite]=evals [test_shipped_reports]=evals [test_bench_list]=evals [test_leaderboard_rejudge]=evals
  [test_problem_is_code]=problem [test_source_ast]=problem [test_import_cycles]=problem
  [test_build_stage]=verify [test_verify_imports]=verify [test_written]=verify [test_held_files]=sandbox
  [test_redteam2_sandbox_user]=sandbox [test_stopwatch]=profile [test_causes]=agents
  [test_fresh_timing_opt_in]=verify [test_fresh_values]=verify
)
# tests/graph keeps the graph's tests; these two test the agents
declare -A GRAPH_ROOM=([test_agents]=agents [test_extract]=agents)
MOVES=""
for name in "${!ROOM[@]}"; do
  [ -f "tests/unit/$name.py" ] || continue
  room=${ROOM[$name]}; mkdir -p "tests/$room"; [ -f "tests/$room/__init__.py" ] || : > "tests/$room/__init__.py"
  git mv "tests/unit/$name.py" "tests/$room/$name.py"; MOVES+="unit/$name:$room/$name "
done
for name in "${!GRAPH_ROOM[@]}"; do
  [ -f "tests/graph/$name.py" ] || continue
  room=${GRAPH_ROOM[$name]}; mkdir -p "tests/$room"; [ -f "tests/$room/__init__.py" ] || : > "tests/$room/__init__.py"
  git mv "tests/graph/$name.py" "tests/$room/$name.py"; MOVES+="graph/$name:$room/$name "
done
left=$(ls tests/unit | grep -v -e '^__init__.py$' -e '^__pycache__$' || true)
if [ -n "$left" ]; then echo "relayout: tests/unit still holds (add them to ROOM): $left"; exit 3; fi
git rm -q tests/unit/__init__.py
git add tests

# ---------------------------------------------------------------- 3. code cuts and rewrites
MOVES="$MOVES" "$PY" - <<'EOF'
import ast
import os
import re
import subprocess
from pathlib import Path

MODULES = {  # old module -> new module (longest names are rewritten first)
    "kernelloop.config": "kernelloop.config.endpoint",
    "kernelloop.settings": "kernelloop.config.settings",
    "kernelloop.defaults": "kernelloop.config.defaults",
    "kernelloop.units": "kernelloop.config.units",
    "kernelloop.workspace": "kernelloop.config.workspace",
    "kernelloop.runs": "kernelloop.serve.runs",
    "kernelloop.jobs": "kernelloop.serve.jobs",
    "kernelloop.job_threads": "kernelloop.serve.job_threads",
    "kernelloop.requests": "kernelloop.serve.requests",
    "kernelloop.mcp_server": "kernelloop.serve.mcp",
    "kernelloop.langchain_tools": "kernelloop.serve.langchain",
    "kernelloop.results": "kernelloop.records",
}
for move in os.environ["MOVES"].split():
    old, new = move.split(":")
    MODULES["tests." + old.replace("/", ".")] = "tests." + new.replace("/", ".")
# names that leave their module: (old module, name) -> new module
NAMES = {("kernelloop.agents.coder", "Attempt"): "kernelloop.agents.records",
         ("kernelloop.agents.critic", "Critique"): "kernelloop.agents.records"}
FIELD_TYPES = ("BudgetS", "Candidates", "TargetSpeedup", "MaxRounds", "StartChoice", "StartSource", "Backend",
               "FROM_SETTINGS", "TargetChoice")
for name in FIELD_TYPES:
    NAMES[("kernelloop.serve.requests", name)] = "kernelloop.config.fields"


def cut(path: Path, names: tuple[str, ...]) -> str:
    """Remove the top-level definitions `names` (classes, assignments) from a module; return their text."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    spans = []
    for node in tree.body:
        target = node.name if isinstance(node, (ast.ClassDef, ast.FunctionDef)) else \
            node.targets[0].id if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) else None
        if target in names:
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            while start > 1 and lines[start - 2].lstrip().startswith("#"):
                start -= 1  # the comment above it goes with it
            spans.append((start, node.end_lineno))
    found = "".join("".join(lines[a - 1:b]) + ("\n\n" if lines[b - 1].startswith(("class", "def")) else "")
                    for a, b in spans)
    for a, b in reversed(spans):
        del lines[a - 1:b]
    path.write_text("".join(lines))
    return found


def header_imports(path: Path) -> str:
    """A module's top-level imports, as text (ruff drops the ones the new module does not use)."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    return "".join("".join(lines[n.lineno - 1:n.end_lineno]) for n in ast.parse(text).body
                   if isinstance(n, (ast.Import, ast.ImportFrom)))


root = Path("kernelloop")
requests = root / "serve" / "requests.py"
imports = header_imports(requests)
fields = cut(requests, FIELD_TYPES)
(root / "config" / "fields.py").write_text(
    '"""The knobs\' types with their caps, shared by the Settings, the request models and the MCP tools\' '
    'parameters\n(the values themselves are config/defaults.py\'s)."""\n\n' + imports + "\n" + fields)
coder, critic = root / "agents" / "coder.py", root / "agents" / "critic.py"
imports = header_imports(coder) + header_imports(critic)
records = cut(coder, ("Attempt",)) + cut(critic, ("Critique",))
(root / "agents" / "records.py").write_text(
    '"""The agents\' records several rooms share: an Attempt (code, verdict, costs) and a round\'s Critique.\n\n'
    'The verifier\'s records (Verdict, Measurement, Profile, ...) are kernelloop/records.py, importable with\n'
    'torch alone; these are pydantic models of the agent side."""\n\n' + imports + "\n" + records)


def rewrite_imports(text: str, path: Path) -> str:
    """Every `from M import a, b` whose M moved, or whose names moved, rewritten by the AST; then the rest of the
    module names (strings, `import M`, docs) by regex."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        tree = None
    if tree is not None:
        lines = text.splitlines(keepends=True)
        edits = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            module = MODULES.get(node.module, node.module)
            groups: dict[str, list[str]] = {}
            for alias in node.names:
                name = alias.name + (f" as {alias.asname}" if alias.asname else "")
                target = NAMES.get((module, alias.name)) or NAMES.get((node.module, alias.name))
                if node.module == "kernelloop" and f"kernelloop.{alias.name}" in MODULES:  # from kernelloop import defaults
                    new = MODULES[f"kernelloop.{alias.name}"]
                    target, name = new.rsplit(".", 1)[0], new.rsplit(".", 1)[1] + (
                        f" as {alias.asname}" if alias.asname else (f" as {alias.name}"
                                                                    if new.rsplit(".", 1)[1] != alias.name else ""))
                groups.setdefault(target or module, []).append(name)
            if list(groups) == [node.module]:
                continue
            if path.name == "records.py" and path.parent.name == "agents" and "kernelloop.agents.records" in groups:
                del groups["kernelloop.agents.records"]  # its own names
            indent = " " * node.col_offset
            new = "".join(f"{indent}from {m} import {', '.join(n)}\n" for m, n in groups.items())
            edits.append((node.lineno, node.end_lineno, new))
        for a, b, new in sorted(edits, reverse=True):
            comment = re.search(r"\s+#.*$", lines[b - 1].rstrip("\n"))  # a one-line import's comment stays
            lines[a - 1:b] = [new.rstrip("\n") + (comment.group(0) if comment and a == b else "") + "\n"]
        text = "".join(lines)
    for old in sorted(MODULES, key=len, reverse=True):
        new = MODULES[old]
        text = re.sub(rf"(?<![\w.]){re.escape(old)}(?![\w])", new, text) if old != "kernelloop.config" else \
            re.sub(r"(?<![\w.])kernelloop\.config(?![\w.])(?! import (?:defaults|units|workspace|settings|fields|endpoint)\b)",
                   new, text)  # the old module, not the new package's `from kernelloop.config import defaults`
        old_path, new_path = old.replace(".", "/"), new.replace(".", "/")
        text = re.sub(rf"(?<![\w/]){re.escape(old_path)}\.py", new_path + ".py", text)
        if old.startswith("tests."):
            text = re.sub(rf"(?<![\w/]){re.escape(old_path)}(?![\w])", new_path, text)
            # a path built from parts: Path(__file__).parents[1] / "unit" / "test_x.py"
            (_, old_dir, name), (_, new_dir, _) = old.split("."), new.split(".")
            text = re.sub(rf'"{old_dir}"(\s*/\s*)"{name}\.py"', rf'"{new_dir}"\g<1>"{name}.py"', text)
    return text


files = [Path(p) for p in subprocess.run(["git", "ls-files"], capture_output=True, text=True,
                                         check=True).stdout.split()]
files += [Path("kernelloop/config/fields.py"), Path("kernelloop/agents/records.py")]
for path in files:
    if path.suffix not in (".py", ".md", ".json", ".toml", ".sh", ".j2", ".cfg") or not path.is_file():
        continue
    if path.parts[:2] == ("docs", "results") or path.name == "relayout.sh":
        continue  # raw measured files and logs keep the names they were written with
    text = path.read_text()
    new = rewrite_imports(text, path)
    if new != text:
        path.write_text(new)
# the code cut out of a module may still be used there: import it back where it is
for path, names, module in ((requests, FIELD_TYPES, "kernelloop.config.fields"),
                            (coder, ("Attempt",), "kernelloop.agents.records"),
                            (critic, ("Critique",), "kernelloop.agents.records")):
    text = path.read_text()
    used = [n for n in names if re.search(rf"\b{n}\b", text)]
    if used:
        first = next(n for n in ast.parse(text).body if isinstance(n, (ast.Import, ast.ImportFrom))
                     and not (isinstance(n, ast.ImportFrom) and n.module == "__future__"))
        lines = text.splitlines(keepends=True)
        lines.insert(first.lineno - 1, f"from {module} import {', '.join(used)}  # noqa: F401  (re-exported)\n")
        path.write_text("".join(lines))
EOF

# ---------------------------------------------------------------- 4. tidy and stage
"$RUFF" check --fix --select F401 -q kernelloop/config/fields.py kernelloop/agents/records.py kernelloop/serve/requests.py \
    kernelloop/agents/coder.py kernelloop/agents/critic.py >/dev/null || true  # what the cuts left unused
"$RUFF" check --fix --select I001 -q kernelloop tests benchmarks examples >/dev/null || true
git grep -n -e "tests/unit" -e "tests\.unit" -- ':!docs/results' ':!relayout.sh' || true  # left for a person to word
git add -A kernelloop tests benchmarks examples docs README.md langgraph.json pyproject.toml
echo "relayout: done; now: ruff check . && mypy && pytest (see the header), then commit"
