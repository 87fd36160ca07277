"""Settings: flags > KERNELLOOP_* env > .env > kernelloop.toml > defaults, and doctor says which."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from kernelloop.cli import app
from kernelloop.config import defaults
from kernelloop.config.endpoint import EndpointConfig, workspace_dir
from kernelloop.config.settings import ConfigError, load_settings, origins
from kernelloop.config.units import format_duration, parse_duration_s, parse_target

cli = CliRunner()


@pytest.fixture(autouse=True)
def in_a_clean_dir(monkeypatch, tmp_path):
    for name in [n for n in os.environ if n.startswith("KERNELLOOP_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def write_files(tmp_path):
    (tmp_path / "kernelloop.toml").write_text('budget = "1h 30m"\ncandidates = 8\nmodel = "from-toml"\n'
                                              'base_url = "http://toml/v1"\ntarget = "2x"\n')
    (tmp_path / ".env").write_text("KERNELLOOP_MODEL=from-dotenv\nKERNELLOOP_CANDIDATES=6\n")


def test_precedence_is_flags_then_env_then_dotenv_then_toml_then_defaults(tmp_path, monkeypatch):
    write_files(tmp_path)
    monkeypatch.setenv("KERNELLOOP_CANDIDATES", "5")
    settings = load_settings(device="cuda:1")
    assert (settings.device, settings.candidates, settings.model, settings.budget, settings.target) == (
        "cuda:1", 5, "from-dotenv", 5400.0, 2.0)
    assert settings.max_rounds == defaults.MAX_ROUNDS
    where = origins(device="cuda:1")
    assert where["device"] == "flag" and where["candidates"] == "env KERNELLOOP_CANDIDATES"
    assert where["model"].startswith(".env") and where["budget"].startswith("kernelloop.toml")
    assert where["max_rounds"] == "default"
    assert load_settings(candidates=3).candidates == 3  # a flag beats them all


def test_the_endpoint_and_the_workspace_come_from_the_files_too(tmp_path):
    write_files(tmp_path)
    (tmp_path / "kernelloop.toml").write_text((tmp_path / "kernelloop.toml").read_text() + 'home = "ws-from-toml"\n')
    config = EndpointConfig.resolve()
    assert (config.base_url, config.model) == ("http://toml/v1", "from-dotenv")
    assert EndpointConfig.resolve(model="flag-model").model == "flag-model"
    assert workspace_dir() == (tmp_path / "ws-from-toml").resolve()


def test_a_bad_setting_is_one_line_naming_where_it_came_from(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLOOP_BUDGET", "soon")
    with pytest.raises(ConfigError, match=r"^budget \(from env KERNELLOOP_BUDGET\): 'soon' is not a duration"):
        load_settings()
    monkeypatch.delenv("KERNELLOOP_BUDGET")
    (tmp_path / "kernelloop.toml").write_text("candidates = 99\n")
    with pytest.raises(ConfigError, match=r"^candidates \(from kernelloop.toml .*\): .*less than or equal to 32"):
        load_settings()
    result = cli.invoke(app, ["bench", "x"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "kernelloop.toml" in result.stderr


def test_doctor_shows_where_each_setting_came_from(tmp_path, monkeypatch):
    write_files(tmp_path)
    monkeypatch.setenv("KERNELLOOP_DEVICE", "cpu")
    result = cli.invoke(app, ["doctor", "--json", "--model", "flag-model"])
    checks = {c["name"]: c for c in json.loads(result.stdout.strip().splitlines()[-1])}
    detail = checks["settings"]["detail"]
    assert "model=flag-model (flag)" in detail and "device=cpu (env KERNELLOOP_DEVICE)" in detail
    assert "budget=1h30m (kernelloop.toml" in detail and "max_rounds=8 (default)" in detail
    assert "api_key=unset (default)" in detail
    table = cli.invoke(app, ["doctor"], env={"COLUMNS": "200"}).stdout
    assert "candidates" in table and ".env (" in table


def test_durations_and_targets_read_one_grammar():
    assert [parse_duration_s(t) for t in ("1h 30m", "1h30m", "15m", "90s", "90", "1.5h", 600)] == [
        5400.0, 5400.0, 900.0, 90.0, 90.0, 5400.0, 600.0]
    for bad in ("soon", "", "0", "1h 30x", "-5"):
        with pytest.raises(ValueError):
            parse_duration_s(bad)
    assert [format_duration(s) for s in (900.0, 5400.0, 90.5, 3600.0)] == ["15m", "1h30m", "90.5s", "1h"]
    assert (parse_target("1.2x"), parse_target("none"), parse_target(2)) == (1.2, None, 2.0)
    with pytest.raises(ValueError):
        parse_target("fast")
