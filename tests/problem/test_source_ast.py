"""kernelloop's parses never overlap: CPython 3.11's AST constructor is not thread-safe
(python/cpython#106905; a CI run hit it once in a LangGraph coder node). The race itself
doesn't reproduce on demand, so this checks the serialisation that prevents it."""

import ast
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kernelloop import source_ast


def test_parses_from_many_threads_run_one_at_a_time(monkeypatch):
    inside, most = 0, 0
    count = threading.Lock()
    real_parse = ast.parse

    def slow_parse(*args, **kwargs):
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
        time.sleep(0.002)  # long enough for the other threads to arrive
        with count:
            inside -= 1
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", slow_parse)
    with ThreadPoolExecutor(max_workers=8) as pool:
        trees = list(pool.map(lambda i: source_ast.parse(f"x = {i}"), range(64)))
    assert most == 1 and [tree.body[0].value.value for tree in trees] == list(range(64))
