"""shown_endpoint: the operator's endpoint as anyone else may see it (a server's caller, an error line), with
no credential a URL can carry (userinfo, query, fragment), and nothing at all where it can't be taken apart."""

from __future__ import annotations

import socket

import pytest

from kernelloop.config.endpoint import shown_endpoint
from kernelloop.serve.runs import SolveError, live_client

SECRET = "sk-shown-0123456789"


@pytest.mark.parametrize(("url", "shown"), [
    ("http://localhost:8000/v1", "http://localhost:8000/v1"),  # a plain endpoint is shown as it is
    ("https://api.deepseek.com", "https://api.deepseek.com"),
    (f"https://operator:{SECRET}@llm.internal/v1?api-key={SECRET}", "https://llm.internal/v1"),
    (f"https://{SECRET}@llm.internal:8443/v1#{SECRET}", "https://llm.internal:8443/v1"),
    (f"HTTPS://User:{SECRET}@Gateway.Example/v1;v=2?key={SECRET}&x=1", "https://gateway.example/v1;v=2"),
    (f"http://u:{SECRET}@[::1]:9000/v1", "http://[::1]:9000/v1"),  # an IPv6 literal keeps its brackets
    (f"  https://u:{SECRET}@h/v1\n", "https://h/v1"),
])
def test_an_endpoint_is_shown_without_what_can_carry_a_credential(url, shown):
    assert shown_endpoint(url) == shown


@pytest.mark.parametrize("url", [
    None, "", f"operator:{SECRET}@llm.internal/v1",  # no scheme: userinfo would parse as a scheme and a path
    f"ftp://u:{SECRET}@h/v1", "http://[::1/v1", "http://h:99999/v1", f"http://h:{SECRET}/v1", "http:///v1",
])
def test_what_cannot_be_taken_apart_is_not_shown_at_all(url):
    assert shown_endpoint(url) is None


def test_an_unreachable_endpoint_is_named_without_its_credentials():
    """The line reaches a server's caller as its job's error: the host and port to fix, no key."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(SolveError) as caught:
        live_client(f"http://operator:{SECRET}@127.0.0.1:{port}/v1?api-key={SECRET}", "m", "not-needed")
    assert str(caught.value).startswith(f"model endpoint http://127.0.0.1:{port}/v1 is unreachable")
    assert SECRET not in str(caught.value)
