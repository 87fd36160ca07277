"""benchmarks/leaderboard_lint.py on a tiny leaderboard: the lint's verdicts, never the solutions' code."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n\n" \
          "def get_inputs():\n    return [torch.ones(2)]\n\ndef get_init_inputs():\n    return []\n"
HONEST = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, input):\n        return input\n"
CHEAT = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return eval('x')\n"


def _script():
    path = ROOT / "benchmarks" / "leaderboard_lint.py"
    spec = importlib.util.spec_from_file_location("leaderboard_lint", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_raw_file_has_each_verdict_and_no_code(tmp_path):
    board = tmp_path / "board" / "docs" / "assets"
    (board / "problems").mkdir(parents=True)
    (board / "problems" / "l1_p1.py").write_text(PROBLEM)
    solutions = [{"problem_id": 0, "level": 1, "code": code, "model": "m", "display_name": "model-m", "file": name}
                 for name, code in (("honest", HONEST), ("cheat", CHEAT))]
    (board / "raw_data.json").write_text(json.dumps(solutions))
    (board / "data.json").write_text(json.dumps({"Level 1: 1_Identity": [{"file": "honest"}]}))
    out = tmp_path / "out"
    script = _script()
    raw = script.run(tmp_path / "board", "t", out, "abc1234")
    rows = {row["id"]: row for row in map(json.loads, raw.read_text().splitlines())}
    assert rows["honest"]["verdict"] == "pass" and rows["honest"]["problem_name"] == "1_Identity"
    assert rows["cheat"]["verdict"] == "rejected" and rows["cheat"]["rule"].startswith("forbidden call: eval")
    assert "eval('x')" not in raw.read_text() and sorted(p.name for p in out.iterdir()) == ["runs.json", "verdicts_t.jsonl"]
    (out / "review.json").write_text(json.dumps({"cheat": {"rule": "forbidden call: eval", "right": True, "why": "eval"}}))
    text = script.report(out)
    assert "1 rejected by the lint, of them 0 false, 1 right, 0 unreviewed" in text and "| forbidden call: eval |" in text
