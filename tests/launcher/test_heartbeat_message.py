"""The one worker-to-launcher message type (issue 28 item 2): what the client sends is what
the server reads, on the same one-letter JSON wire as before.

- The client's `_send` puts exactly `HeartbeatMessage.encode()` on a real Unix datagram
  socket (a `hello` first: `r`, `c`, `k` only; then `r`, `c`, `k`, `t`, `o` and the kind's
  keys), and `decode` of those bytes gives back the message it was built from.
- A datagram that is not JSON, not an object, of an unknown kind or with a bad rank reads
  as None (the server counts it as rejected, as before); a message without `o` (an older
  client) says so (`open_said` False), one with `"o": null` says "no section".
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from relaunch.launcher import client  # imported before the socket is set: no hello yet
from relaunch.launcher.heartbeat_message import HeartbeatMessage


def test_what_the_client_sends_is_what_the_server_type_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "ft.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(path)
    srv.settimeout(10)
    monkeypatch.setenv("RELAUNCH_FT_SOCKET", path)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("RELAUNCH_CYCLE", "2")
    # a client that has not said hello yet (its socket is made on the next send)
    monkeypatch.setattr(client, "_said_hello", False)
    monkeypatch.setattr(client, "_sock", None)
    try:
        client.heartbeat()
        hello, hb = srv.recv(65536), srv.recv(65536)
        assert json.loads(hello) == {"r": 3, "c": 2, "k": "hello"}
        assert HeartbeatMessage.decode(hello) == HeartbeatMessage(3, 2, "hello")
        assert list(json.loads(hb)) == ["r", "c", "k", "t", "o"]
        with client.section("step"):
            client.report_progress(iteration=7, checkpoint="/ck/7")
        start, progress, end = (srv.recv(65536) for _ in range(3))
        wire = json.loads(progress)
        assert list(wire) == ["r", "c", "k", "t", "o", "i", "ckpt"]
        msg = HeartbeatMessage.decode(progress)
        assert msg is not None and msg.kind == "progress" and msg.open_section == "step"
        assert (msg.iteration, msg.checkpoint, msg.open_said) == (7, "/ck/7", True)
        assert msg.encode() == progress  # the same bytes back
        first = HeartbeatMessage.decode(start)
        assert first is not None and first.section == "step" and first.open_said
        last = HeartbeatMessage.decode(end)
        assert last is not None and last.kind == "sec_end" and last.open_section is None
    finally:
        if client._sock is not None:
            client._sock.close()
        srv.close()


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[1, 2]",
        b'{"r": 1, "c": 0, "k": "nope"}',
        b'{"r": -1, "c": 0, "k": "hb"}',
        b'{"r": true, "c": 0, "k": "hb"}',
        b"[" * 100_000,
    ],
)
def test_a_malformed_datagram_reads_as_none(data: bytes) -> None:
    assert HeartbeatMessage.decode(data) is None


def test_an_older_client_without_o_is_told_apart_from_no_section() -> None:
    old = HeartbeatMessage.decode(b'{"r": 0, "c": 1, "k": "hb", "t": 1.5}')
    assert old is not None and not old.open_said and old.sent_at == 1.5
    none = HeartbeatMessage.decode(b'{"r": 0, "c": 1, "k": "hb", "o": null}')
    assert none is not None and none.open_said and none.open_section is None
    assert none.to_wire() == {"r": 0, "c": 1, "k": "hb", "o": None}
