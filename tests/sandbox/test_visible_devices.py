"""A job's GPU is the one its parent calls cuda:N, also under the parent's own CUDA_VISIBLE_DEVICES
(a scheduler's, Ray's, or a user's `CUDA_VISIBLE_DEVICES=2 kernelloop verify`): before, the job was
given physical GPU N, another user's or another lane's."""

import pytest

from kernelloop.sandbox.runner import child_visible_device, scrubbed_env


def test_without_a_parent_list_the_index_is_the_gpu(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert child_visible_device(None) == "0"
    assert child_visible_device(3) == "3"


def test_the_index_names_an_entry_of_the_parents_list(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5, 7")
    assert child_visible_device(None) == "5"
    assert child_visible_device(1) == "7"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8b1f2c3d-aaaa-bbbb-cccc-0123456789ab,MIG-1")
    assert child_visible_device(1) == "MIG-1"


def test_an_index_past_the_parents_list_is_refused(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    with pytest.raises(ValueError, match="shows 1 GPU"):
        child_visible_device(1)


def test_every_gpu_job_sees_exactly_its_one_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2,3")
    assert scrubbed_env("cuda", tmp_path, 2)["CUDA_VISIBLE_DEVICES"] == "3"
    assert scrubbed_env("cuda", tmp_path, None)["CUDA_VISIBLE_DEVICES"] == "1"
    assert scrubbed_env("cpu", tmp_path, None)["CUDA_VISIBLE_DEVICES"] == ""
