"""Corpus fixtures that build a load_inline extension (C++, g++): 20-60 s each on a loaded 2-core
machine, past the corpus verifier's 30 s limit for loading and a first call, so they run here with a
verifier of their own and a build's time to spare. Same headers and checks as tests/fixtures/cheats and
honest (test_adversarial.py)."""

from collections.abc import Iterator

import pytest
import torch

from tests.verify.test_adversarial import FIXTURES, check_fixture

EXTENSIONS = sorted((FIXTURES / "extensions").glob("*.py"))
# Open, with the verdict each must get once fixed (strict: a fix shows as XPASS and its entry must go).
OPEN: dict[str, str] = {}


@pytest.fixture(scope="module")
def verifier(tmp_path_factory) -> Iterator:
    from kernelloop.tools.verify.verifier import Verifier

    device = "cuda" if torch.cuda.is_available() else "cpu"
    with Verifier(device=device, workspace=tmp_path_factory.mktemp("extensions"), time_it=False,
                  compile_timeout_s=300.0, run_timeout_s=60.0) as shared:
        yield shared


@pytest.mark.slow
@pytest.mark.parametrize("path", [pytest.param(path, id=path.stem, marks=[pytest.mark.xfail(
    strict=True, reason=f"open: {OPEN[path.stem]}")] if path.stem in OPEN else []) for path in EXTENSIONS])
def test_an_extension_fixture_gets_its_verdict(verifier, path):
    check_fixture(verifier, path)
