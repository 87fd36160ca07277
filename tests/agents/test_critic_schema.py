"""The critic and the measurement share one schema: every Profile field the critic reads is one the
production path fills (speed.judge_speed over measurements recorded on an H100, the harness's
launch facts, Nsight Compute's CSV through ncu.py). A critic rule that reads a field nothing
produces (as `bound`, `compute_ms` and `ncu` once were) fails here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

from kernelloop.agents.critic_facts import profile_lines
from kernelloop.records import Code, Profile, Status, Verdict
from kernelloop.tools.profile.ncu import default_ncu_metrics, read_ncu_output
from kernelloop.tools.profile.ncu_budget import with_ncu
from kernelloop.tools.verify.harness import launch_facts
from kernelloop.tools.verify.speed import judge_speed

SPEED = Path(__file__).resolve().parents[1] / "fixtures" / "speed"


class Spy:
    """A record that logs every field read through it, nested records included."""

    def __init__(self, record, log: set):
        self._record, self._log = record, log

    def __getattr__(self, name):
        value = getattr(self._record, name)
        self._log.add((type(self._record).__name__, name))
        return self._wrap(value)

    def _wrap(self, value):
        if dataclasses.is_dataclass(value):
            return Spy(value, self._log)
        if isinstance(value, list):
            return [self._wrap(item) for item in value]
        return value


def ncu_csv() -> str:
    """One launch as `ncu --csv --page raw --print-units base` prints it, every default metric in a column."""
    metrics = default_ncu_metrics()
    head = ["ID", "Kernel Name", "Block Size", "Grid Size"]
    rows = [head + metrics, ["", "", "", ""] + [""] * len(metrics),
            ["0", "scale_kernel", "(128, 1, 1)", "(4, 1, 1)"] + [str(10 + i) for i in range(len(metrics))]]
    return "\n".join(",".join(f'"{field}"' for field in row) for row in rows)


def production_profiles() -> list[Profile]:
    profiles = []
    for name in ("honest", "side_stream", "decoy", "host_bound"):
        measurement = json.loads((SPEED / f"{name}.json").read_text())
        measurement.pop("recorded")
        kernel = SimpleNamespace(n_regs=40, n_spills=3, metadata=SimpleNamespace(num_warps=4, shared=0))
        measurement["launches"] = [{"kernel": "relu_kernel",
                                    **launch_facts(SimpleNamespace(arg_names=["x"]), (), {"grid": (4,)}, kernel)}]
        measurement["roofline"]["sm_count"] = 132  # what measure.roofline_of adds on a GPU
        profiles.append(judge_speed(measurement).profile)
    profiles.append(with_ncu(profiles[0], read_ncu_output(ncu_csv()), 20.0))
    return profiles


def filled(profiles: list[Profile]) -> set[tuple[str, str]]:
    """(record, field) pairs some production profile holds a value in."""
    seen: set[tuple[str, str]] = set()

    def walk(record) -> None:
        for field in dataclasses.fields(record):
            value = getattr(record, field.name)
            if value is not None and value != [] and value != {} and value != "":
                seen.add((type(record).__name__, field.name))
            for item in value if isinstance(value, list) else [value]:
                if dataclasses.is_dataclass(item):
                    walk(item)

    for profile in profiles:
        walk(profile)
    return seen


def test_every_field_the_critic_reads_is_one_production_fills():
    profiles = production_profiles()
    read: set[tuple[str, str]] = set()
    verdict = Verdict(status="correct", reason="correct", device="cuda")
    for profile in profiles:
        assert profile_lines(Spy(profile, read), verdict)
    produced = filled(profiles)
    assert read, "the critic read nothing"
    assert not read - produced, f"the critic reads fields no production profile fills: {sorted(read - produced)}"


def test_the_spy_catches_a_field_nothing_produces():
    profile = production_profiles()[0]
    read: set[tuple[str, str]] = set()
    Spy(profile, read).ncu  # noqa: B018 - a read of a field the honest recording leaves empty
    assert ("Profile", "ncu") in read - filled([profile])


def test_the_verdict_carries_the_profile_as_the_critic_reads_it_back():
    profile = production_profiles()[-1]
    assert Profile.of(profile.model_dump()) == profile
    assert Profile.of({"kernel_split": {}, "kernels": []}) is None  # the format before this record: not read


def test_verdict_profile_is_the_record_and_stores_as_before():
    """Verdict.profile holds the Profile itself; a stored verdict's JSON is its model_dump() as before,
    and one in the format before Profile reads back as None, through model_validate and pydantic alike."""
    from pydantic import BaseModel

    class Holder(BaseModel):  # as the agents' and evals' models embed a verdict
        verdict: Verdict

    profile = production_profiles()[-1]
    verdict = Verdict(status=Status.correct, reason="correct", code=Code.correct, device="cuda", profile=profile)
    stored = json.loads(verdict.model_dump_json())
    assert stored["profile"] == profile.model_dump()
    assert Verdict.model_validate(stored).profile == profile
    assert Holder.model_validate_json(Holder(verdict=verdict).model_dump_json()).verdict.profile == profile
    assert json.loads(Holder(verdict=verdict).model_dump_json())["verdict"]["profile"] == stored["profile"]
    older = {**stored, "profile": {"kernel_split": {}, "kernels": [{"name": "k", "device_ms": 1.0}]}}
    assert Verdict.model_validate(older).profile is None
    assert Holder.model_validate({"verdict": older}).verdict.profile is None
