"""A throwaway server's failed start-up (``servers.starting``): stopped, and explained by its log."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorflow_dev import servers


class StartError(Exception):
    pass


def test_a_failed_start_stops_the_server_and_raises_with_the_logs_tail(tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    log_file.write_text("".join(f"line {i}\n" for i in range(100)))
    stopped: list[str] = []
    with (
        pytest.raises(StartError) as raised,
        servers.starting("the server", tmp_path, log_file, lambda: stopped.append("stop"), StartError),
    ):
        raise OSError("port taken")
    assert stopped == ["stop"]
    message = str(raised.value)
    assert message.startswith(f"the server did not start in {tmp_path}: port taken\n--- {log_file}")
    assert message.endswith("\n".join(f"line {i}" for i in range(60, 100)))  # the last 40 lines
    assert isinstance(raised.value.__cause__, OSError)


def test_a_ctrl_c_during_start_up_stops_the_server_and_passes_as_it_is(tmp_path: Path) -> None:
    stopped: list[str] = []
    with (
        pytest.raises(KeyboardInterrupt),
        servers.starting(
            "the server", tmp_path, tmp_path / "absent.log", lambda: stopped.append("stop"), StartError
        ),
    ):
        raise KeyboardInterrupt
    assert stopped == ["stop"]


def test_a_started_server_is_left_running(tmp_path: Path) -> None:
    stopped: list[str] = []
    with servers.starting(
        "the server", tmp_path, tmp_path / "absent.log", lambda: stopped.append("stop"), StartError
    ):
        pass
    assert stopped == []
