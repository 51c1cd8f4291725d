"""The worker pool's failure detection: a refused connection is told apart from a silent worker."""

from __future__ import annotations

import socket

import httpx
import pytest

from headwater.service.pool import _refused


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_closed_port_is_a_refused_connection():
    with pytest.raises(httpx.ConnectError) as caught:
        httpx.get(f"http://127.0.0.1:{closed_port()}/v1/health", timeout=2)
    assert _refused(caught.value)


def test_a_timeout_or_a_bad_answer_is_not_a_refusal():
    assert not _refused(httpx.ReadTimeout("no answer in time"))
    assert not _refused(ValueError("not JSON"))
    assert not _refused(None)
