"""Tensor-set files (tensor_files.py): every dtype and plain value round-trips, large tensors go in
many slices, and a truncated, padded, lying, oversized or garbage file is one TensorFileError
before anything larger than the caller's limit is allocated. And the size budget (budget.py)."""

from __future__ import annotations

import io
import json
import os
import struct
from pathlib import Path

import pytest
import torch

from kernelloop.tools.verify import budget, tensor_files
from kernelloop.tools.verify.tensor_files import (
    DTYPES,
    MAGIC,
    TensorFileError,
    TensorFileMismatch,
    load_sets,
    save_sets,
)

LIMIT = 1 << 30


def sample(dtype: torch.dtype, shape=(3, 5)) -> torch.Tensor:
    """Values of every kind a dtype has (signs, fractions, NaN, inf where it can hold them)."""
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, dtype=torch.complex64).to(dtype)
    if dtype.is_floating_point and dtype.itemsize >= 2:
        t = (torch.randn(shape) * 100).to(dtype)
        t.view(-1)[0] = float("nan")
        t.view(-1)[1] = float("-inf")
        return t
    # float8 and float4 can't all be made by a cast: random bytes, compared as bytes below
    return torch.randint(0, 256, (*shape[:-1], shape[-1] * dtype.itemsize), dtype=torch.uint8).view(dtype)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical, NaN payloads included."""
    return (a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)))


def roundtrip(tmp_path, sets, extra=None, **kwargs):
    path = tmp_path / "sets.bin"
    written = save_sets(path, sets, extra)
    assert written == path.stat().st_size
    with path.open("rb") as handle:
        return load_sets(handle, LIMIT, **kwargs)


def write(header: dict, data: bytes = b"", magic: bytes = MAGIC, header_len: int | None = None) -> io.BytesIO:
    """A file built by hand: a header that may lie."""
    text = json.dumps(header).encode()
    return io.BytesIO(struct.pack("<8sQ", magic, len(text) if header_len is None else header_len) + text + data)


def header_of(tensors: list[dict], sets: list, data_bytes: int | None = None) -> dict:
    return {"format": 1, "byteorder": "little", "tensors": tensors, "sets": sets, "extra": {"m": {}},
            "data_bytes": sum(t["nbytes"] for t in tensors) if data_bytes is None else data_bytes}


# --------------------------------------------------------------------------- round trips


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("name", sorted(DTYPES))
def test_every_dtype_round_trips_bit_for_bit(tmp_path, name):
    dtype = DTYPES[name]
    t = sample(dtype)
    (got,), extra = roundtrip(tmp_path, [[t]])
    assert same(got[0], t) and extra == {}
    assert got[0].is_contiguous() and got[0].device.type == "cpu"


def test_the_float_types_a_model_outputs_are_all_there():
    for name in ("float64", "float32", "float16", "bfloat16", "complex64", "complex128", "int8", "int16",
                 "int32", "int64", "uint8", "bool", "float8_e4m3fn", "float8_e5m2"):
        assert name in DTYPES


def test_plain_values_come_back_as_they_went_in(tmp_path):
    nan = float("nan")
    sets = [[torch.ones(2), 3, 2.5, None, True, "mean", torch.float16, (1, 2), [3, (4, None)], -7, float("inf")],
            [5, {"dim": 1, "shape": (2, 3)}, torch.zeros(1), nan]]
    extra = {"init_inputs": [64, (3, 5), 0.1, torch.arange(4)], "skipped": None}
    got, got_extra = roundtrip(tmp_path, sets, extra)
    first, second = got
    assert same(first[0], sets[0][0])
    assert first[1:] == sets[0][1:]
    assert type(first[1]) is int and type(first[2]) is float and type(first[4]) is bool
    assert isinstance(first[7], tuple) and isinstance(first[8], list) and isinstance(first[8][1], tuple)
    assert second[:2] == sets[1][:2] and isinstance(second[1]["shape"], tuple)
    assert same(second[2], sets[1][2]) and second[3] != second[3]  # NaN
    assert got_extra["init_inputs"][:3] == [64, (3, 5), 0.1] and same(got_extra["init_inputs"][3], torch.arange(4))
    assert got_extra["skipped"] is None


def test_empty_zero_dim_and_empty_sets(tmp_path):
    sets = [[torch.empty(0), torch.empty(3, 0, 2, dtype=torch.int64), torch.tensor(7.5), torch.tensor(True)], [], []]
    got, _ = roundtrip(tmp_path, sets)
    assert [len(s) for s in got] == [4, 0, 0]
    for a, b in zip(got[0], sets[0]):
        assert same(a, b)
    assert got[0][2].dim() == 0 and float(got[0][2]) == 7.5
    assert roundtrip(tmp_path, []) == ([], {})


def test_views_are_saved_as_their_values(tmp_path):
    base = torch.randn(6, 8, dtype=torch.complex64)
    views = [base.t(), base[:, ::3], base.conj(), torch.randn(4)._neg_view(), torch.randn(1, 5).expand(4, 5)]
    got, _ = roundtrip(tmp_path, [views])
    for a, b in zip(got[0], views):
        assert torch.equal(a, b.resolve_conj().resolve_neg()) and a.is_contiguous()


def test_a_large_tensor_goes_in_many_slices_and_comes_back_whole(tmp_path, monkeypatch):
    """Stands for a 6 GB output: with 1 KiB slices a 60 KB tensor is written and read in ~60 pieces."""
    monkeypatch.setattr(tensor_files, "CHUNK_BYTES", 1024)
    writes: list[int] = []
    original_raw = tensor_files._raw

    def counted_raw(piece, stage=None):
        writes.append(tensor_files.nbytes_of(piece))
        return original_raw(piece, stage)

    monkeypatch.setattr(tensor_files, "_raw", counted_raw)
    big = torch.randn(30, 500)  # 2000-byte rows, each larger than a slice
    strided = torch.randn(500, 60).t()  # non-contiguous: each slice copied alone
    flat = torch.randn(15_000)
    got, _ = roundtrip(tmp_path, [[big, strided], [flat]])
    assert same(got[0][0], big) and same(got[0][1], strided) and same(got[1][0], flat)
    assert len(writes) > 100 and max(writes) <= 1024  # rows larger than a slice are split within the row


def test_pieces_never_exceed_the_slice_unless_one_element_does():
    for shape in [(3, 7, 11), (1, 1000), (1000,), (2, 3, 0), ()]:
        t = torch.randn(shape)
        pieces = list(tensor_files._pieces(t, 64))
        assert all(tensor_files.nbytes_of(p) <= 64 for p in pieces)
        assert torch.equal(torch.cat([p.reshape(-1) for p in pieces]) if pieces else torch.empty(0), t.reshape(-1))


def test_reading_onto_a_device_goes_through_one_staging_buffer(tmp_path, monkeypatch):
    monkeypatch.setattr(tensor_files, "CHUNK_BYTES", 256)
    t = torch.randn(40, 10, dtype=torch.float64)
    (got,), _ = roundtrip(tmp_path, [[t, torch.tensor([True, False])]], device="meta")
    assert got[0].device.type == "meta" and got[0].shape == t.shape and got[0].dtype == t.dtype


def test_expected_shapes_are_checked_before_any_data_is_read(tmp_path):
    sets = [[torch.zeros(2, 3), torch.zeros(4, dtype=torch.int64)]]
    like = [[torch.empty(2, 3), ([4], "int64")]]
    got, _ = roundtrip(tmp_path, sets, expected=like)
    assert same(got[0][1], sets[0][1])
    with pytest.raises(TensorFileMismatch, match=r"set 1, output 0: shape \[2, 3\] float32 where \[3, 2\] float32"):
        roundtrip(tmp_path, sets, expected=[[torch.empty(3, 2), torch.empty(4, dtype=torch.int64)]])
    with pytest.raises(TensorFileMismatch, match="set 1: 2 outputs where 1 were expected"):
        roundtrip(tmp_path, sets, expected=[[torch.empty(2, 3)]])
    with pytest.raises(TensorFileMismatch, match="2 sets where 1 were expected"):
        roundtrip(tmp_path, sets * 2, expected=like)
    with pytest.raises(TensorFileMismatch, match="a int, not a tensor"):
        roundtrip(tmp_path, [[3, sets[0][1]]], expected=like)


def test_what_the_format_cannot_hold_is_refused_before_writing(tmp_path):
    path = tmp_path / "x.bin"
    for bad, message in [([[object()]], "can't save a object"), ([[torch.eye(3).to_sparse()]], "only dense"),
                         ([torch.ones(2)], "list of lists"), ([[{1: 2}]], "can't save a dict")]:
        with pytest.raises(TensorFileError, match=message):
            save_sets(path, bad)
        assert not path.exists()


# --------------------------------------------------------------------------- hostile files


def saved(tmp_path, sets=None) -> bytes:
    path = tmp_path / "good.bin"
    save_sets(path, sets if sets is not None else [[torch.arange(10, dtype=torch.float32), 4]])
    return path.read_bytes()


def load_bytes(data: bytes, limit: int = LIMIT, **kwargs):
    return load_sets(io.BytesIO(data), limit, **kwargs)


def one_line_error(data: bytes, match: str, limit: int = LIMIT) -> str:
    with pytest.raises(TensorFileError, match=match) as info:
        load_bytes(data, limit)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_truncated_and_padded_files(tmp_path):
    good = saved(tmp_path)
    assert load_bytes(good)[0][0][1] == 4
    for cut in (0, 5, 15, 16, 40, len(good) - 1):
        one_line_error(good[:cut], "too short|does not fit|truncated|not a readable")
    one_line_error(good + b"\0", "truncated or padded")


def test_oversize_against_the_limit(tmp_path):
    good = saved(tmp_path)
    one_line_error(good, f"the file is {len(good)} bytes, over the {len(good) - 1} allowed", limit=len(good) - 1)
    assert load_bytes(good, limit=len(good))


def test_garbage_and_wrong_magic(tmp_path):
    one_line_error(b"PK\x03\x04" + bytes(range(256)) * 4, "wrong magic")
    good = saved(tmp_path)
    one_line_error(good[:16] + b"\xff\xfe{not json" + good[26:], "not a readable")
    torch_file = tmp_path / "t.pt"
    torch.save({"outputs": [[torch.ones(3)]]}, torch_file)
    one_line_error(torch_file.read_bytes(), "wrong magic")


def test_a_header_that_lies_about_sizes():
    data = bytes(40)
    t = {"dtype": "float32", "shape": [10], "offset": 0, "nbytes": 40}
    assert same(load_sets(write(header_of([t], [[{"t": 0}]]), data), LIMIT)[0][0][0], torch.zeros(10))
    lies = [({**t, "nbytes": 8}, "nbytes 8 but shape"), ({**t, "shape": [11]}, "is 44 bytes"),
            ({**t, "offset": 4}, "offset 4 where 0"), ({**t, "shape": [-10]}, "non-negative"),
            ({**t, "shape": [10.0]}, "non-negative integer"), ({**t, "shape": "10"}, "not a list"),
            ({**t, "dtype": "qint8"}, "unknown dtype 'qint8'"), ({**t, "dtype": "object"}, "unknown dtype"),
            ({**t, "shape": [1] * 65, "nbytes": 4}, "65 dimensions")]
    for entry, message in lies:
        with pytest.raises(TensorFileError, match=message):
            load_sets(write(header_of([entry], [[{"t": 0}]], data_bytes=40), data), LIMIT)
    with pytest.raises(TensorFileError, match="data_bytes 44 but the tensors add up to 40"):
        load_sets(write(header_of([t], [[{"t": 0}]], data_bytes=44), data), LIMIT)
    with pytest.raises(TensorFileError, match="truncated or padded"):  # says 40, has 36
        load_sets(write(header_of([t], [[{"t": 0}]]), data[:36]), LIMIT)
    with pytest.raises(TensorFileError, match="header length .* does not fit"):
        load_sets(write(header_of([t], [[{"t": 0}]]), data, header_len=1 << 40), LIMIT)


def test_a_header_that_asks_for_a_huge_allocation_allocates_nothing(monkeypatch):
    def no_allocation(*args, **kwargs):
        raise AssertionError("allocated for a file that can't be right")

    monkeypatch.setattr(tensor_files, "_read_tensor", no_allocation)
    huge = {"dtype": "float64", "shape": [1 << 20, 1 << 20, 1 << 20], "offset": 0, "nbytes": 8 << 60}
    with pytest.raises(TensorFileError, match="truncated or padded"):
        load_sets(write(header_of([huge], [[{"t": 0}]]), b"\0" * 64), LIMIT)
    # A file that really is as large as its header says is refused by its size alone.
    fits = {"dtype": "uint8", "shape": [2048], "offset": 0, "nbytes": 2048}
    with pytest.raises(TensorFileError, match="over the 1000 allowed"):
        load_sets(write(header_of([fits], [[{"t": 0}]]), bytes(2048)), 1000)


def test_references_between_values_and_tensors_must_be_one_to_one():
    t = {"dtype": "uint8", "shape": [4], "offset": 0, "nbytes": 4}
    cases = [([[{"t": 0}, {"t": 0}]], "used twice"), ([[{"t": 1}]], "missing"), ([[]], "no set or extra refers"),
             ([[{"t": True}]], "missing"), ([[{"x": 1}]], "unknown value"), ([[{"i": 1.5}]], "int value"),
             ([[{"i": 1, "f": 2}]], "one-key"), ([[5]], "one-key"), ([{"t": 0}], "not a list"),
             ([[{"d": "quint8"}]], "unknown value")]
    for sets, message in cases:
        with pytest.raises(TensorFileError, match=message):
            load_sets(write(header_of([t], sets), bytes(4)), LIMIT)


def test_deep_nesting_and_bad_bools_are_file_errors():
    deep: dict = {"n": None}
    for _ in range(40):
        deep = {"l": [deep]}
    with pytest.raises(TensorFileError, match="nested deeper"):
        load_sets(write(header_of([], [[deep]])), LIMIT)
    very_deep = ("[" * 100_000 + "]" * 100_000).encode()
    with pytest.raises(TensorFileError, match="not a readable"):
        load_sets(io.BytesIO(struct.pack("<8sQ", MAGIC, len(very_deep)) + very_deep), LIMIT)
    flag = {"dtype": "bool", "shape": [3], "offset": 0, "nbytes": 3}
    with pytest.raises(TensorFileError, match="bytes other than 0 and 1"):
        load_sets(write(header_of([flag], [[{"t": 0}]]), b"\x01\x00\x07"), LIMIT)


def test_a_header_from_another_machine_or_version():
    base = header_of([], [[]])
    for change, message in [({"format": 2}, "format-1"), ({"byteorder": "big"}, "big-endian"),
                            ({"sets": None}, "not a list")]:
        with pytest.raises(TensorFileError, match=message):
            load_sets(write({**base, **change}), LIMIT)
    with pytest.raises(TensorFileError, match="not a format-1"):
        load_sets(write([1, 2]), LIMIT)  # type: ignore[arg-type]


def test_a_file_that_shrinks_while_read_is_an_error(tmp_path):
    good = saved(tmp_path)

    class Shrinking(io.BytesIO):
        def readinto(self, buffer):  # short reads, then nothing 8 bytes before the end
            room = len(good) - 8 - self.tell()
            return super().readinto(memoryview(buffer)[:min(room, 3)]) if room > 0 else 0

    with pytest.raises(TensorFileError, match="ended early"):
        load_sets(Shrinking(good), LIMIT)


def test_reads_from_a_real_bounded_file(tmp_path):
    from kernelloop.sandbox.safe_io import open_bounded

    path = tmp_path / "sets.bin"
    save_sets(path, [[torch.full((64, 64), 2.0)]], {"n": 1})
    with open_bounded(path, path.stat().st_size) as handle:
        sets, extra = load_sets(handle, path.stat().st_size)
    assert float(sets[0][0].sum()) == 2.0 * 64 * 64 and extra == {"n": 1}


# --------------------------------------------------------------------------- the size budget

GB = 10**9


def test_trial_sets_for_huge_sets():
    assert budget.trial_sets_for(6_442_450_944, 3, 100 * GB) == 1  # KernelBench v0 level 1 problem 11
    # main level 1 problem 45: 17.2 GB of inputs per set, in a budget of 36 GB (half a GPU: two processes hold them)
    assert budget.trial_sets_for(144 << 20, 3, 36 * GB, input_bytes_per_set=17_180_000_000) == 1
    assert budget.trial_sets_for(1 << 20, 3, 36 * GB, input_bytes_per_set=8_590_000_000) == 3  # a sum over 8.6 GB
    assert budget.trial_sets_for(1 << 30, 3, 100 * GB) == 3  # exactly 1 GiB is not over it
    assert budget.trial_sets_for(100 << 20, 3, 300 << 20) == 2  # 2 trial sets and the fresh one fit
    assert budget.trial_sets_for(50 << 20, 3, 300 << 20, input_bytes_per_set=50 << 20) == 2
    assert budget.trial_sets_for(100 << 20, 3, 50 << 20) == 1  # never fewer than one
    assert budget.trial_sets_for(0, 3, 0) == 3 and budget.trial_sets_for(4, 5, 10**6) == 5


def test_check_fits_names_the_size_the_limit_and_what_to_do():
    h100, host = 80 * GB, 128 * GB
    assert budget.check_fits(6_442_450_944, 2, h100, host, input_bytes_per_set=2_148_270_080) is None  # v0 11
    assert budget.check_fits(100 << 20, 4, None, 16 * GB) is None  # CPU: the host is the only limit

    # main level 1 problem 38 (L1Norm): 8.6 GB in and out per set; four sets overflow the host
    many = budget.check_fits(8_590_000_000, 4, h100, host, input_bytes_per_set=8_590_000_000)
    assert many is not None and "\n" not in many
    assert many.startswith("input sets too large for this machine's memory: 4 sets of 8.6 GB inputs and 8.6 GB output")
    assert "need 111.7 GB, over the 102.4 GB usable (80% of 128.0 GB)" in many
    assert many.endswith("use fewer trial sets (trials=1)")
    assert budget.check_fits(8_590_000_000, 2, h100, host, input_bytes_per_set=8_590_000_000) is None

    # main level 1 problem 45 (AvgPool2d): 17.2 GB of inputs per set; two processes keep them on the GPU
    pool = budget.check_fits(144 << 20, 3, h100, 1000 * GB, input_bytes_per_set=17_180_000_000)
    assert pool is not None and "for this GPU" in pool and "over the 72.0 GB usable (90% of 80.0 GB)" in pool
    assert pool.endswith("use fewer trial sets (trials=1)")
    assert budget.check_fits(144 << 20, 2, h100, 1000 * GB, input_bytes_per_set=17_180_000_000) is None

    huge = budget.check_fits(40 * GB, 2, h100, 1000 * GB)
    assert huge is not None and huge.endswith("run on a GPU with more memory") and "need 80.0 GB" in huge
    # with fresh timing, a kept copy of a timed call's output in each process too
    huge = budget.check_fits(40 * GB, 2, h100, 1000 * GB, fresh=True)
    assert huge is not None and "need 160.0 GB" in huge
    # a donor set for fresh values (a problem with one trial set) costs its inputs in both processes
    assert budget.device_bytes(1 << 30, 2, 8 * GB, donor_sets=1) - budget.device_bytes(1 << 30, 2, 8 * GB) == 16 * GB
    # a back-to-back window's sets (one per call, up to 2 GiB, in both processes, no more than a request
    # keeps outputs of: 2,000 calls, 2 GiB); none past 2 GiB a set
    assert budget.window_bytes(4 << 10, 1 << 20) == 2 * 2000 * (1 << 20)
    assert budget.window_bytes(1 << 30, 1 << 20) == 2 * 2 * (1 << 20)  # two outputs fit the kept copies: two sets
    assert budget.window_bytes(1 << 20, 3 << 30) == 0
    small_host = budget.check_fits(8_590_000_000, 2, h100, 16 * GB)
    assert small_host is not None and small_host.endswith("run on a machine with more memory")


def test_the_verifier_gives_a_huge_problem_one_trial_set_and_refuses_one_that_cannot_fit(tmp_path):
    from types import SimpleNamespace

    from kernelloop.problem import ProblemError
    from kernelloop.tools.verify.verifier import Verifier

    verifier = Verifier(device="cpu", workspace=tmp_path)  # starts no worker until it verifies
    small = SimpleNamespace(output_bytes=1 << 20, input_bytes=1 << 20, problem=SimpleNamespace(path="p.py"))
    huge = SimpleNamespace(output_bytes=3 << 30, input_bytes=1 << 30, problem=SimpleNamespace(path="p.py"))
    unknown = SimpleNamespace(output_bytes=None, input_bytes=None, problem=SimpleNamespace(path="p.py"))
    assert verifier.trial_count(small) == verifier.trial_count(unknown) == verifier.trials == 3
    host_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if 2 * (3 << 30) + 2 * (2 << 30) < 0.8 * host_total:  # one trial set and the fresh one fit this machine
        assert verifier.trial_count(huge) == 1
    impossible = SimpleNamespace(output_bytes=host_total, input_bytes=0, problem=SimpleNamespace(path="p.py"))
    with pytest.raises(ProblemError, match="too large for this machine's memory"):
        verifier.trial_count(impossible)


def test_a_reference_whose_files_are_over_the_candidates_file_limit_is_still_made(tmp_path, monkeypatch):
    """KernelBench main, level 1, problem 87: an 8 GiB output, over the default file-size limit;
    here the same with the limit made 1 MiB and a problem whose sets are 25 MB."""
    from kernelloop.problem import Problem
    from kernelloop.sandbox import isolation
    from kernelloop.tools.verify.verifier import Verifier, secret_seeds

    monkeypatch.setattr(isolation, "DEFAULT_FILE_SIZE_BYTES", 1 << 20)
    problem = Problem.from_file(Path("kernelloop/evals/problems/3_LayerNorm.py"))
    with Verifier(device="cpu", workspace=tmp_path) as verifier:
        server = verifier.server(problem)
        made = server.make(secret_seeds(1), variants=False)
        assert made.inputs_path.stat().st_size > 1 << 20
        assert sum(t.numel() * t.element_size() for t in made.outputs[0]) > 1 << 20
