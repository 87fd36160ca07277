"""The critique-quality set: faulty kernels with one known cause each, and the facts their critique
must contain. Fault -> facts found -> missed, as a table (docs/results/critique_set/README.md).

  # on a GPU node (torch, triton, nvidia-ml-py only: no pydantic, so no critic here):
  python benchmarks/critique_set.py --record OUT [--part faults|examples|correctness]   # timed, ncu where permitted
  # here (the critic needs pydantic), from those raw files:
  python benchmarks/critique_set.py --report OUT          # writes docs/results/critique_set/
  # the CPU faults, end to end on this machine (TRITON_INTERPRET=1):
  python benchmarks/critique_set.py --cpu [--runs 5] [--other-runs 1]   # other seeds, other poisons each run

--record writes OUT/faults/<name>.json and OUT/examples/<name>.json: the verdict as the verifier
made it (its profile with Nsight Compute's facts where ncu may read the counters, or why not), and
the provenance (GPU, driver, torch, triton, ncu, the command, the date). Those files are what the
critic reads: the report runs the same rules on them that the loop runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAULTS_DIR = ROOT / "tests" / "fixtures" / "faulty_kernels"
PROBLEMS = FAULTS_DIR / "problems"
DOCS = ROOT / "docs" / "results" / "critique_set"


@dataclass(frozen=True)
class Fault:
    name: str  # the candidate: FAULTS_DIR / f"{name}.py"
    problem: Path
    where: str  # "cpu": a correctness fault, judged on the CPU (and the GPU); "gpu": needs a timed run
    facts: tuple[str, ...]  # lowercase substrings the critique must contain
    causes: tuple[str, ...] = ()  # the causes (agents/causes.py keys) it may offer: any other is a wrong cause

    @property
    def candidate(self) -> Path:
        return FAULTS_DIR / f"{self.name}.py"


FAULTS: tuple[Fault, ...] = (
    Fault("missing_tail_mask", PROBLEMS / "scale_1d.py", "cpu", ("only the tail is wrong", "cdiv", "mask"),
          ("tail_mask",)),
    Fault("wrong_stride", PROBLEMS / "scale_rows.py", "cpu", ("only row 0 is right", "row stride"), ("row_stride",)),
    Fault("off_by_one_block", PROBLEMS / "scale_1d.py", "cpu", ("of every block of 128", "off-by-one"),
          ("block_boundary",)),
    Fault("softmax_no_max", ROOT / "tests" / "fixtures" / "problems" / "softmax.py", "cpu",
          ("nan appears in", "every row", "overflow", "subtract the row max"), ("overflow",)),
    Fault("fp16_accumulation", PROBLEMS / "rowsum_fp16.py", "cpu",
          ("accumulate in float32", "median relative error"), ("precision",)),
    # Its carry is read from output memory another program writes: where that one has not run yet, the
    # read is of what the memory held before the call, so "reads the output first" is a true cause too.
    Fault("race_across_programs", PROBLEMS / "cumsum_rows.py", "cpu",
          ("differs between two runs", "race across programs"), ("race", "reads_output_first")),
    Fault("irregular_shapes_only", PROBLEMS / "scale_rows_variants.py", "cpu",
          ("only the irregular shapes", "mask every load and store"), ("irregular_mask",)),
    Fault("decoy_beside_library", PROBLEMS / "matmul_relu.py", "cpu",
          ("leaves the work to torch", "into your kernel")),
    Fault("uncoalesced_loads", PROBLEMS / "scale_big.py", "gpu",
          ("far from the memory roofline", "coalesced", "uncoalesced global loads")),
    Fault("grid_too_small", PROBLEMS / "scale_big.py", "gpu", ("grid too small", "4 programs")),
    Fault("register_spills", PROBLEMS / "center_rows.py", "gpu", ("register spills",)),
    Fault("bank_conflicts", PROBLEMS / "transpose.py", "gpu", ("shared-memory bank conflicts",)),
    Fault("host_bound_loop", PROBLEMS / "scale_many_rows.py", "gpu", ("host-bound", "launch fewer kernels")),
    Fault("slow_20pct_roofline", PROBLEMS / "scale_big.py", "gpu", ("far from the memory roofline",)),
    # Memory never written, and written but wrong in a way the reference explains (issue 30).
    Fault("unwritten_row_tail", PROBLEMS / "scale_rows.py", "cpu",
          ("never written: columns 64-95 (of 96) were never written, in every row", "narrower than the row"),
          ("row_wider_than_block",)),
    Fault("partial_reduction", PROBLEMS / "softmax_wide.py", "cpu",
          ("never written: columns 512-999 (of 1000) were never written, in every row",
           "off by a constant factor per row", "covers only part of the row"),
          ("row_wider_than_block", "partial_reduction")),
    Fault("transposed_store", PROBLEMS / "scale_rows.py", "cpu",
          ("every element was written", "the output holds the reference transposed", "strides are swapped"),
          ("transposed",)),
    Fault("per_row_scale", PROBLEMS / "l2norm_rows.py", "cpu",
          ("every element was written", "off by a constant factor per row", "covers only part of the row"),
          ("partial_reduction",)),
    Fault("off_by_one_row", PROBLEMS / "scale_rows.py", "cpu",
          ("never written: row 0 (of 64) was never written", "row i holds what row i-1 should", "off by one row"),
          ("row_shift", "unwritten_rows")),
    Fault("needs_zeroed_output", PROBLEMS / "scale_1d.py", "cpu",
          ("every element was written", "move with what the output memory held before the call",
           "reads the output before writing it"), ("reads_output_first",)),
)
# The faults of memory never written or written but related (issue 30): verified --runs times each on the CPU.
UNWRITTEN_OR_RELATED = ("unwritten_row_tail", "partial_reduction", "transposed_store", "per_row_scale",
                        "off_by_one_row", "needs_zeroed_output")
EXAMPLES = ROOT / "examples" / "candidates"
EXAMPLE_PROBLEMS = ROOT / "kernelloop" / "evals" / "problems"


def found_and_missed(fault: Fault, text: str) -> tuple[list[str], list[str]]:
    lowered = text.lower()
    return [f for f in fault.facts if f in lowered], [f for f in fault.facts if f not in lowered]


def _localisation(verdict_dump: dict):
    from kernelloop.records import Verdict

    return Verdict.model_validate(verdict_dump).localisation


def wrong_causes(fault: Fault, text: str, verdict_dump: dict) -> list[str]:
    """The causes `text` offers whose facts do not hold in the verdict, or that are not this fault's."""
    from kernelloop.agents.causes import named_in, wrongly_named

    unfounded = wrongly_named(text, _localisation(verdict_dump))
    foreign = [cause.key for cause in named_in(text) if cause.key not in fault.causes]
    return sorted(set(unfounded) | set(foreign))


def stable_words(verdict_dump: dict, text: str) -> list[str]:
    """What must read the same whatever poison and seeds were drawn: the causes offered and the
    reruns' facts (the unwritten region, the relation); the whole critique without a localisation."""
    from kernelloop.agents.causes import offered
    from kernelloop.tools.verify.localise import rerun_facts

    loc = _localisation(verdict_dump)
    if loc is None:
        return [text]
    return [cause.says(loc) for cause in offered(loc)] + rerun_facts(loc)


# --------------------------------------------------------------------------- on the GPU: raw files


def _provenance() -> dict:
    import torch
    import triton

    from kernelloop.tools.profile.ncu import find_ncu, ncu_available

    ncu = find_ncu()
    version = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:] \
        if ncu else []
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                            text=True).stdout.split("\n")[0].strip() if torch.cuda.is_available() else ""
    return {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "driver": driver,
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "ncu": version[0] if version else None, "ncu_usable": ncu_available()[1],
            "command": " ".join([sys.executable, *sys.argv]), "host": platform.node(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def _verify(verifier, candidate: Path, problem: Path, with_ncu: bool) -> dict:
    from kernelloop.problem import Candidate, Problem
    from kernelloop.tools.profile import ncu_budget

    started = time.perf_counter()
    verdict = verifier.verify(Candidate.from_file(candidate), Problem.from_file(problem))
    verify_s = time.perf_counter() - started
    ncu_s = 0.0
    if with_ncu and verdict.ok and verdict.profile is not None:  # ncu on request, as `profile --ncu` runs it
        verdict.profile, ncu_s = ncu_budget.profile_candidate(candidate, problem, verdict.own_kernels, verdict.profile)
    return {"verdict": verdict.model_dump(), "verify_s": verify_s, "ncu_s": ncu_s}


def record(out: Path, with_ncu: bool, parts: tuple[str, ...] = ("faults", "examples")) -> None:
    from kernelloop.tools.verify.verifier import Verifier

    device = "cuda" if os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
    provenance = _provenance()
    for sub in ("faults", "examples"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    (out / "provenance.json").write_text(json.dumps(provenance, indent=1))
    with tempfile.TemporaryDirectory() as workspace, Verifier(device=device, workspace=Path(workspace)) as verifier:
        chosen = FAULTS if "faults" in parts else [f for f in FAULTS if f.where == "cpu"] if "correctness" in parts else ()
        for fault in chosen:
            if (out / "faults" / f"{fault.name}.json").is_file():  # a run cut by the call's limit goes on
                continue
            raw = _verify(verifier, fault.candidate, fault.problem, with_ncu)
            raw.update(name=fault.name, candidate=str(fault.candidate.relative_to(ROOT)),
                       problem=str(fault.problem.relative_to(ROOT)), provenance=provenance)
            (out / "faults" / f"{fault.name}.json").write_text(json.dumps(raw, indent=1))
            verdict = raw["verdict"]
            print(fault.name, verdict["status"], verdict["code"], verdict["reason"][:100], flush=True)
        for candidate in sorted(EXAMPLES.glob("*.py")) if "examples" in parts else ():
            if (out / "examples" / f"{candidate.stem}.json").is_file():
                continue
            raw = _verify(verifier, candidate, EXAMPLE_PROBLEMS / candidate.name, with_ncu)
            raw.update(name=candidate.stem, candidate=str(candidate.relative_to(ROOT)),
                       problem=str((EXAMPLE_PROBLEMS / candidate.name).relative_to(ROOT)), provenance=provenance)
            (out / "examples" / f"{candidate.stem}.json").write_text(json.dumps(raw, indent=1))
            print(candidate.stem, raw["verdict"]["status"], raw["verdict"]["reason"][:100], flush=True)


# --------------------------------------------------------------------------- here: the critic


def critique_text(verdict_dump: dict, name: str) -> str:
    """The critique of one verdict as the coder (and the model critic) sees it."""
    from kernelloop.agents.critic import critique_round
    from kernelloop.agents.records import Attempt
    from kernelloop.records import Verdict

    attempt = Attempt(id="r1c0", round=1, index=0, backend="triton", code=name,
                      verdict=Verdict.model_validate(verdict_dump))
    critique = critique_round([attempt], best=attempt)
    return "\n".join([*critique.findings, critique.for_coder("r1c0")])


def _before_reruns(verdict_dump: dict) -> bool:
    """A wrong output recorded before the verifier reran failed sets: its localisation lacks the
    facts (unwritten, moved, related) the critic's causes now need."""
    loc = verdict_dump.get("localisation")
    return isinstance(loc, dict) and not loc.get("reruns")


WRONG_CAUSES_NOTE = ("`wrong causes offered`: the causes the critique names (agents/causes.py, by their words) whose "
                     "facts do not hold in the verdict, or that are not the fault's own (FAULTS, `causes`).")


def _wrong_cell(wrong: list[str]) -> str:
    return f"{len(wrong)} ({', '.join(wrong)})" if wrong else "0"


def _ncu_cell(raw: dict) -> str:
    """Whether Nsight Compute's facts reached this critique, and what it cost."""
    profile = raw["verdict"].get("profile") or {}
    if profile.get("ncu"):
        return f"ran ({raw['ncu_s']:.0f} s)"
    return "not run" if raw["verdict"]["status"] == "correct" else "-"


def _provenance_lines(raws: list[dict]) -> list[str]:
    """One line per recording call (the files of each), since a set may take several device calls."""
    calls: dict[str, list[str]] = {}
    for raw in raws:
        calls.setdefault(json.dumps(raw["provenance"], sort_keys=True), []).append(raw["name"])
    lines = []
    for key, names in calls.items():
        p = json.loads(key)
        driver = str(p["driver"]).split()[0] if str(p["driver"]).split() else "?"  # nvidia-smi prints one a GPU
        lines.append(f"- {p['date']}, {p['device']} (driver {driver}, torch {p['torch']}, triton {p['triton']}, "
                     f"ncu {p['ncu']}: {p['ncu_usable']}), `{p['command']}`: {', '.join(names)}")
    return lines


def report(raw_dir: Path, docs: Path = DOCS) -> int:
    """Write the table and every critique from the raw files; the number of facts missed."""
    rows, raws, missed_total, wrong_total, waiting = [], [], 0, 0, []
    (docs / "faults").mkdir(parents=True, exist_ok=True)
    (docs / "examples").mkdir(parents=True, exist_ok=True)
    for fault in FAULTS:
        path = raw_dir / "faults" / f"{fault.name}.json"
        if not path.is_file():
            rows.append(f"| {fault.name} | {fault.where} | - | - | not recorded on a GPU yet | - | - |")
            waiting.append(fault.name)
            continue
        raw = json.loads(path.read_text())
        raws.append(raw)
        text = critique_text(raw["verdict"], fault.name)
        if _before_reruns(raw["verdict"]):
            rows.append(f"| {fault.name} | {fault.where} | {raw['verdict']['status']} ({raw['verdict']['code']}) | "
                        f"{_ncu_cell(raw)} | recorded before the verifier reran failed sets: to record again | - | - |")
            waiting.append(fault.name)
            (docs / "faults" / f"{fault.name}.md").write_text(f"# {fault.name}\n\n```\n{text}\n```\n")
            continue
        found, missed = found_and_missed(fault, text)
        wrong = wrong_causes(fault, text, raw["verdict"])
        missed_total += len(missed)
        wrong_total += len(wrong)
        verdict = raw["verdict"]
        rows.append(f"| {fault.name} | {fault.where} | {verdict['status']} ({verdict['code']}) | {_ncu_cell(raw)} | "
                    f"{'; '.join(found) or '-'} | {'; '.join(missed) or 'none'} | {_wrong_cell(wrong)} |")
        (docs / "faults" / f"{fault.name}.md").write_text(f"# {fault.name}\n\n```\n{text}\n```\n")
    example_rows = []
    for path in sorted((raw_dir / "examples").glob("*.json")):
        raw = json.loads(path.read_text())
        raws.append(raw)
        text = critique_text(raw["verdict"], raw["name"])
        example_rows.append(f"| [{raw['name']}](examples/{raw['name']}.md) | {raw['verdict']['status']} | "
                            f"{_ncu_cell(raw)} |")
        (docs / "examples" / f"{raw['name']}.md").write_text(
            f"# {raw['name']}: the critique as the model sees it\n\n{raw['verdict']['status']}: "
            f"{raw['verdict']['reason']}\n\n```\n{text}\n```\n")
    shown = raw_dir.resolve().relative_to(ROOT) if raw_dir.resolve().is_relative_to(ROOT) else raw_dir
    lines = ["# The critique-quality set", "",
             f"This report by `python benchmarks/critique_set.py --report {shown}` "
             "from the raw verdicts, recorded by these calls:", "", *_provenance_lines(raws),
             "", "Each fault has one known cause (its file's header in tests/fixtures/faulty_kernels/); the facts are "
             "lowercase substrings its critique must contain (benchmarks/critique_set.py, FAULTS). "
             "`ncu`: whether Nsight Compute's counters reached the critique (on request here, as `profile --ncu` runs "
             "it; in the loop it runs on the best candidate of a round within 10% of the run's wall clock). "
             f"{WRONG_CAUSES_NOTE}", "",
             "| fault | kind | verdict (code) | ncu | facts the critique found | missed | wrong causes offered |",
             "|---|---|---|---|---|---|---|",
             *rows, "", f"Facts missed: {missed_total}. Wrong causes offered: {wrong_total}."
             + (f" Not judged here until recorded on a GPU (`--record OUT --part correctness`): {', '.join(waiting)}; "
                "their CPU runs: cpu.md." if waiting else ""), "",
             "## The shipped example kernels", "", "Each one's critique, as the coder would see it:", "",
             "| example | verdict | ncu |", "|---|---|---|", *example_rows, ""]
    (docs / "README.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return missed_total + wrong_total


def run_cpu(docs: Path = DOCS, runs: int = 5, other_runs: int = 1) -> int:
    """The correctness faults on this machine's CPU (Triton interpreter), those of UNWRITTEN_OR_RELATED
    verified `runs` times and the others `other_runs` times (each with its own secret seeds and
    poisons), written to docs/results/critique_set/cpu.md with the first run's critique; the facts
    missed plus the wrong causes offered over every run, plus the faults whose words changed."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from kernelloop.problem import Candidate, Problem
    from kernelloop.tools.verify.verifier import Verifier

    missed_total = wrong_total = unstable = 0
    rows, critiques = [], []
    with tempfile.TemporaryDirectory() as workspace, Verifier(device="cpu", workspace=Path(workspace)) as verifier:
        for fault in (f for f in FAULTS if f.where == "cpu"):
            texts, words, missed, wrong, verdict = [], [], set(), set(), None
            count = runs if fault.name in UNWRITTEN_OR_RELATED else other_runs
            for _ in range(count):
                verdict = verifier.verify(Candidate.from_file(fault.candidate), Problem.from_file(fault.problem))
                text = critique_text(verdict.model_dump(), fault.name)
                texts.append(text)
                words.append(stable_words(verdict.model_dump(), text))
                missed |= set(found_and_missed(fault, text)[1])
                wrong |= set(wrong_causes(fault, text, verdict.model_dump()))
            assert verdict is not None
            same = all(w == words[0] for w in words)
            missed_total, wrong_total, unstable = missed_total + len(missed), wrong_total + len(wrong), unstable + (not same)
            found = [f for f in fault.facts if f not in missed]
            rows.append(f"| {fault.name} | {count} | {verdict.status.value} ({verdict.code.value}) | "
                        f"{'; '.join(found) or '-'} | {'; '.join(sorted(missed)) or 'none'} | "
                        f"{_wrong_cell(sorted(wrong))} | {('yes' if same else 'no') if count > 1 else '-'} |")
            critiques.append(f"## {fault.name}\n\n```\n{texts[0]}\n```\n")
            print(rows[-1], flush=True)
    docs.mkdir(parents=True, exist_ok=True)
    (docs / "cpu.md").write_text("\n".join([
        "# The critique-quality set: correctness faults on the CPU", "",
        f"`python benchmarks/critique_set.py --cpu --runs {runs} --other-runs {other_runs}` on {platform.node()} "
        f"({platform.processor() or 'CPU'}), Triton's interpreter, {time.strftime('%Y-%m-%d')}: the faults of memory "
        f"never written or related to the reference ({', '.join(UNWRITTEN_OR_RELATED)}) verified {runs} times each, "
        f"the others {other_runs}, each time with its own secret input seeds and its own poisons (the finite values "
        "the verifier fills the output memory with when it runs a failed set twice more). A fact counts as found when "
        f"every run's critique holds it, a cause as wrong when any run's offers it. {WRONG_CAUSES_NOTE} `same words`: "
        "whether every run named the same causes and the same reruns' facts (the unwritten region, the relation) in "
        "the same words.", "",
        "| fault | runs | verdict (code) | facts the critique found | missed | wrong causes offered | same words |",
        "|---|---|---|---|---|---|---|", *rows, "",
        f"Facts missed: {missed_total}. Wrong causes offered: {wrong_total}. Faults whose words changed between runs: "
        f"{unstable}.", "", "The first run's critique of each fault:", "", *critiques]))
    return missed_total + wrong_total + unstable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", type=Path, metavar="OUT")
    mode.add_argument("--report", type=Path, metavar="OUT")
    mode.add_argument("--cpu", action="store_true")
    parser.add_argument("--runs", type=int, default=5, help="with --cpu: verifications of each unwritten/related fault")
    parser.add_argument("--other-runs", type=int, default=1, help="with --cpu: verifications of each other fault")
    parser.add_argument("--no-ncu", action="store_true", help="with --record: skip Nsight Compute")
    parser.add_argument("--part", choices=("faults", "examples", "correctness"),
                        help="with --record: only one half (each fits a 10-minute call), or only the correctness faults")
    args = parser.parse_args()
    if args.record:
        record(args.record, with_ncu=not args.no_ncu, parts=(args.part,) if args.part else ("faults", "examples"))
        return 0
    return 1 if (report(args.report) if args.report else run_cpu(runs=args.runs, other_runs=args.other_runs)) else 0


if __name__ == "__main__":
    sys.exit(main())
