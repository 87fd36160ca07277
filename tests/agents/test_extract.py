"""Getting the candidate out of messy model replies (no model, no GPU)."""

from kernelloop.agents.extract import extract_candidate
from tests.graph.scripted import FIXED_KERNEL, WRONG_KERNEL, coder_reply

KERNEL_PART, WRAPPER_PART = FIXED_KERNEL.split("\n\n\nclass ModelNew")
WRAPPER_PART = "import torch\nimport torch.nn as nn\nimport triton\n\n\nclass ModelNew" + WRAPPER_PART


def test_prose_around_and_a_draft_block_before_the_final_one():
    found = extract_candidate(coder_reply(FIXED_KERNEL))
    assert found.ok
    assert found.source.strip() == FIXED_KERNEL.strip()
    assert found.blocks == 2


def test_the_last_modelnew_block_that_parses_wins_over_earlier_versions():
    reply = f"First try:\n```python\n{WRONG_KERNEL}\n```\nBetter:\n```python\n{FIXED_KERNEL}\n```\nDone."
    found = extract_candidate(reply)
    assert "tl.maximum" in found.source
    assert any("2 blocks define ModelNew" in note for note in found.notes)


def test_a_broken_last_block_falls_back_to_an_earlier_one_that_parses():
    broken = FIXED_KERNEL.replace("def forward(self, x", "def forward(self, x,,")
    found = extract_candidate(f"```python\n{WRONG_KERNEL}\n```\n```python\n{broken}\n```")
    assert found.ok and "tl.minimum" in found.source


def test_mixed_languages_only_python_counts():
    reply = ("Install first:\n```bash\npip install triton\n```\n```json\n{\"BLOCK\": 1024}\n```\n"
             f"```py\n{FIXED_KERNEL}\n```")
    found = extract_candidate(reply)
    assert found.ok and found.source.startswith("import torch")


def test_kernel_and_wrapper_in_separate_blocks_are_joined():
    reply = f"The kernel:\n```python\n{KERNEL_PART}\n```\nThe module:\n```python\n{WRAPPER_PART}\n```"
    found = extract_candidate(reply)
    assert found.ok, found.error
    assert "def relu_kernel" in found.source and "class ModelNew" in found.source
    assert found.source.index("import triton") < found.source.index("@triton.jit")
    assert any("joined 1 other Python block" in note for note in found.notes)


def test_cuda_source_in_its_own_block_is_bound_to_the_variable_the_wrapper_uses():
    wrapper = ("import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
               "ext = load_inline('relu', cpp_sources=cpp_source, cuda_sources=cuda_source, functions=['relu'])\n\n"
               "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu(x)\n")
    reply = ("```cuda\n__global__ void relu_kernel(const float* x, float* y, int n) {}\n```\n"
             "```cpp\ntorch::Tensor relu(torch::Tensor x);\n```\n"
             f"```python\n{wrapper}```")
    found = extract_candidate(reply)
    assert found.ok, found.error
    assert 'cuda_source = r"""\n__global__' in found.source
    assert 'cpp_source = r"""\ntorch::Tensor relu' in found.source


def test_a_reply_cut_off_inside_the_code_says_so():
    cut = coder_reply(FIXED_KERNEL).split("relu_kernel[(")[0]
    found = extract_candidate(cut, finish_reason="length")
    assert not found.ok
    assert found.source is not None
    assert found.error.startswith("the reply was cut off inside the code")


def test_cut_off_before_any_code_names_the_token_limit():
    found = extract_candidate("Let me think about the tiling first. The best approach", finish_reason="length")
    assert found.source is None
    assert "cut off by the token limit" in found.error


def test_code_without_fences_is_taken_from_the_first_import_with_prose_trimmed():
    reply = f"Here it is.\n\n{FIXED_KERNEL}\n\nThis should be fast because it is one pass."
    found = extract_candidate(reply)
    assert found.ok, found.error
    assert found.source.rstrip().endswith("return out")


def test_think_tags_left_in_the_content_are_ignored():
    reply = f"<think>maybe\n```python\nclass ModelNew: pass\n```\n</think>\n```python\n{FIXED_KERNEL}\n```"
    found = extract_candidate(reply)
    assert found.ok and "tl.maximum" in found.source
    assert "removed <think> text from the answer" in found.notes


def test_the_reasoning_is_a_fallback_only_when_the_answer_has_no_code():
    found = extract_candidate("I wrote it above.", reasoning=f"final:\n```python\n{FIXED_KERNEL}\n```")
    assert found.ok
    assert any("from the reasoning" in note for note in found.notes)
    assert "tl.maximum" in extract_candidate(coder_reply(FIXED_KERNEL), reasoning=f"```python\n{WRONG_KERNEL}\n```").source


def test_a_block_without_modelnew_is_no_candidate():
    found = extract_candidate("```python\nimport torch\nx = 1\n```")
    assert found.source is None
    assert "no code block with `class ModelNew`" in found.error


def test_modelnew_only_inside_a_function_does_not_count():
    code = "import torch\n\ndef make():\n    class ModelNew:\n        pass\n    return ModelNew\n"
    found = extract_candidate(f"```python\n{code}```")
    assert not found.ok
    assert "no top-level `class ModelNew" in found.error
