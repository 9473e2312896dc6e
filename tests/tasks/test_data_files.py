"""Data root, sha256 verification, error messages and downloads (from a local HTTP server)."""

from __future__ import annotations

import hashlib
import http.server
import threading

import pytest

from rnnlab.tasks import data
from rnnlab.tasks.data import DataError, DataFile, Dataset

PAYLOAD = bytes(range(256)) * 400  # 102400 bytes
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``server.files`` with Range support; ``server.mode`` alters behaviour:
    "normal", "ignore-range" (always 200 + full body), "truncate" (promise everything,
    send the first ``server.cut`` bytes and hang up), "corrupt" (flip one byte)."""

    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_GET(self):
        srv = self.server
        srv.requests.append((self.path, self.headers.get("Range")))
        body = srv.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        if srv.mode == "corrupt":
            body = body[:100] + bytes([body[100] ^ 1]) + body[101:]
        start = 0
        rng = self.headers.get("Range")
        if rng and srv.mode != "ignore-range":
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(body):
                self.send_response(416)
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        chunk = body[start:]
        self.send_header("Content-Length", str(len(chunk)))
        self.end_headers()
        if srv.mode == "truncate":
            self.wfile.write(chunk[: srv.cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(chunk)


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.files = {"/blob.bin": PAYLOAD}
    srv.mode = "normal"
    srv.cut = 0
    srv.requests = []
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def url(srv, path="/blob.bin"):
    return f"http://127.0.0.1:{srv.server_address[1]}{path}"


@pytest.fixture
def fake_dataset(monkeypatch, server):
    ds = Dataset(
        "fake",
        "fakefolder",
        (
            DataFile("blob.bin", SHA, len(PAYLOAD), (url(server, "/missing.bin"), url(server))),
            DataFile(
                "derived.txt",
                hashlib.sha256(b"derived:" + PAYLOAD[:10]).hexdigest(),
                derive=lambda folder: b"derived:" + (folder / "blob.bin").read_bytes()[:10],
            ),
        ),
    )
    monkeypatch.setitem(data.DATASETS, "fake", ds)
    return ds


# --- root resolution ---------------------------------------------------------------------
def test_data_root_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv(data.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert data.data_root() == tmp_path / "cache" / "rnnlab" / "data"
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path / "env"))
    assert data.data_root() == tmp_path / "env"
    assert data.data_root(tmp_path / "arg") == tmp_path / "arg"


def test_registry_lists_pinned_files_of_every_dataset():
    assert set(data.DATASETS) == {"mnist", "ptb", "polyphonic", "tatoeba", "tinyshakespeare"}
    for ds in data.DATASETS.values():
        for f in ds.files:
            assert f.urls or f.derive is not None, f"{ds.name}/{f.name} has no way to be fetched"
            if f.sha256 is not None:
                assert len(f.sha256) == 64 and int(f.sha256, 16) >= 0


# --- verification and errors -------------------------------------------------------------
def test_missing_file_error_names_file_hash_and_fix(fake_dataset, tmp_path):
    with pytest.raises(DataError) as e:
        data.require("fake", "blob.bin", tmp_path)
    msg = str(e.value)
    assert str(tmp_path / "fakefolder" / "blob.bin") in msg
    assert SHA in msg
    assert "rnnlab data download fake" in msg
    assert "/blob.bin" in msg  # the URL


def test_mismatch_error_and_status(fake_dataset, tmp_path):
    folder = tmp_path / "fakefolder"
    folder.mkdir()
    (folder / "blob.bin").write_bytes(PAYLOAD[:-1])
    st = data.verify("fake", tmp_path)[0]
    assert st.state == "mismatch" and st.sha256 == hashlib.sha256(PAYLOAD[:-1]).hexdigest()
    with pytest.raises(DataError, match="checksum mismatch") as e:
        data.require("fake", "blob.bin", tmp_path)
    assert SHA in str(e.value) and "rnnlab data download fake" in str(e.value)
    # existence-only checks accept it (for hand-made fixtures)
    assert data.require("fake", "blob.bin", tmp_path, check_hash=False) == folder / "blob.bin"
    (folder / "blob.bin").write_bytes(PAYLOAD)
    assert data.require("fake", "blob.bin", tmp_path) == folder / "blob.bin"


def test_unknown_dataset_error():
    with pytest.raises(DataError, match="unknown dataset 'nope'"):
        data.verify("nope")


def test_ptb_char_rule_on_hand_example():
    words = " the cat <unk> \n a N b \n"
    assert data.ptb_chars_from_words(words) == "t h e _ c a t _ < u n k > \n a _ N _ b \n "


# --- downloads -----------------------------------------------------------------------------
def test_download_fresh_then_idempotent(fake_dataset, server, tmp_path):
    logs = []
    status = data.download("fake", tmp_path, progress=False, log=logs.append)
    assert [s.state for s in status] == ["ok", "ok"]
    assert (tmp_path / "fakefolder" / "blob.bin").read_bytes() == PAYLOAD
    assert not list((tmp_path / "fakefolder").glob("*.part"))
    # first URL 404s, the mirror serves it
    assert [p for p, _ in server.requests] == ["/missing.bin", "/blob.bin"]
    n = len(server.requests)
    data.download("fake", tmp_path, progress=False, log=logs.append)
    assert len(server.requests) == n  # verified files are not fetched again
    assert any("already verified" in line for line in logs)


def test_resume_partial_download_with_range(server, tmp_path):
    dest = tmp_path / "blob.bin"
    (tmp_path / "blob.bin.part").write_bytes(PAYLOAD[:30000])
    digest = data.fetch_url(url(server), dest, expected_sha256=SHA, progress=False)
    assert digest == SHA and dest.read_bytes() == PAYLOAD
    assert server.requests[-1][1] == "bytes=30000-"


def test_resume_when_server_ignores_range(server, tmp_path):
    server.mode = "ignore-range"
    dest = tmp_path / "blob.bin"
    (tmp_path / "blob.bin.part").write_bytes(b"garbage" * 100)
    assert data.fetch_url(url(server), dest, expected_sha256=SHA, progress=False) == SHA
    assert dest.read_bytes() == PAYLOAD


def test_interrupted_download_keeps_part_then_resumes(server, tmp_path):
    server.mode, server.cut = "truncate", 40000
    dest = tmp_path / "blob.bin"
    with pytest.raises(DataError, match="resumes"):
        data.fetch_url(url(server), dest, expected_sha256=SHA, progress=False)
    part = tmp_path / "blob.bin.part"
    assert part.read_bytes() == PAYLOAD[:40000] and not dest.exists()
    server.mode = "normal"
    assert data.fetch_url(url(server), dest, expected_sha256=SHA, progress=False) == SHA
    assert server.requests[-1][1] == "bytes=40000-"
    assert dest.read_bytes() == PAYLOAD and not part.exists()


def test_corrupted_download_is_rejected_and_old_file_kept(server, tmp_path):
    server.mode = "corrupt"
    dest = tmp_path / "blob.bin"
    dest.write_bytes(b"old")
    with pytest.raises(DataError, match=f"expected {SHA}"):
        data.fetch_url(url(server), dest, expected_sha256=SHA, progress=False)
    assert dest.read_bytes() == b"old"
    assert not (tmp_path / "blob.bin.part").exists()


def test_download_of_dataset_fails_loudly_on_corruption(fake_dataset, server, tmp_path):
    server.mode = "corrupt"
    with pytest.raises(DataError, match="blob.bin"):
        data.download("fake", tmp_path, progress=False, log=lambda s: None)
    assert not (tmp_path / "fakefolder" / "blob.bin").exists()


def test_unstrict_file_keeps_other_release_with_warning(monkeypatch, server, tmp_path):
    ds = Dataset("loose", "loose", (DataFile("blob.bin", "0" * 64, None, (url(server),), strict=False),))
    monkeypatch.setitem(data.DATASETS, "loose", ds)
    logs = []
    status = data.download("loose", tmp_path, progress=False, log=logs.append)
    assert status[0].state == "other-release" and status[0].usable
    assert any("WARNING" in line for line in logs)
    assert data.require("loose", "blob.bin", tmp_path) == tmp_path / "loose" / "blob.bin"


def test_progress_bar_path_runs(server, tmp_path, capsys):
    assert data.fetch_url(url(server), tmp_path / "b.bin", expected_sha256=SHA, progress=True) == SHA


def test_status_report_flags_problems(fake_dataset, tmp_path):
    text, ok = data.status_report(["fake"], tmp_path)
    assert not ok and "rnnlab data download fake" in text and "missing" in text
    folder = tmp_path / "fakefolder"
    folder.mkdir()
    (folder / "blob.bin").write_bytes(b"wrong")
    text, ok = data.status_report(["fake"], tmp_path)
    assert not ok and "CHECKSUM MISMATCH" in text
    (folder / "blob.bin").write_bytes(PAYLOAD)
    (folder / "derived.txt").write_bytes(b"derived:" + PAYLOAD[:10])
    text, ok = data.status_report(["fake"], tmp_path)
    assert ok and text.count("verified") == 2
