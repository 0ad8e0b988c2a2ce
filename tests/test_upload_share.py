"""Fair shares of the page-wide upload totals (issue 57.2): one address, however many sessions it mints, holds
at most its share (a quarter on the public page) of the files and bytes every visitor's uploads may take, so
another address still uploads; a session forgotten for the per-address session cap gives its files back at once
(it used to keep them counted for an hour: ~98 cookies x 20 PNGs filled the page's 2,000 for everyone)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gradio as gr
import numpy as np
import pytest

from explorer.serve.access import Access
from explorer.serve.budget import PUBLIC
from explorer.serve.refusals import Refusal
from explorer.serve.upload_ledger import UploadLedger
from test_page_budget import png_bytes, upload
from test_page_clients import client, free_port

A, B = "127.0.0.2", "127.0.0.3"


def test_the_public_share_is_a_quarter_of_each_total():
    assert PUBLIC.upload_files_per_address * 4 == PUBLIC.upload_files_total
    assert PUBLIC.upload_bytes_per_address * 4 == PUBLIC.upload_bytes_total


def _saved(tmp_path: Path, name: str, size: int = 100) -> Path:
    path = tmp_path / name / f"{name}.png"
    path.parent.mkdir()
    path.write_bytes(b"x" * size)
    return path


def _hold(ledger: UploadLedger, session: str, address: str, path: Path) -> None:
    ticket = ledger.reserve(session, path.stat().st_size, address)
    ledger.add_part(ticket)
    ledger.settle(ticket, [path])


def test_one_address_full_another_still_uploads(tmp_path):
    ledger = UploadLedger(replace(PUBLIC, upload_files_total=8, upload_files_per_address=2))
    for i in range(2):  # address A, a fresh session for each file: the session quota never binds
        _hold(ledger, f"a{i}", A, _saved(tmp_path, f"a{i}"))
    with pytest.raises(Refusal, match="your address holds its share"):
        ledger.reserve("a-new", 100, A)
    _hold(ledger, "b0", B, _saved(tmp_path, "b0"))  # B is not held back by A
    assert len(ledger.files) == 3


def test_the_byte_share_binds_whatever_the_session(tmp_path):
    ledger = UploadLedger(replace(PUBLIC, upload_bytes_total=40 * 2**20, upload_bytes_per_address=10 * 2**20))
    _hold(ledger, "a0", A, _saved(tmp_path, "a0", 6 * 2**20))
    with pytest.raises(Refusal, match="your address"):
        ledger.reserve("a1", 6 * 2**20, A)
    ledger.cancel(ledger.reserve("b0", 6 * 2**20, B))


def test_a_forgotten_session_gives_its_files_back_at_once(tmp_path):
    ledger = UploadLedger(PUBLIC)
    mine, shared = _saved(tmp_path, "mine"), _saved(tmp_path, "shared")
    _hold(ledger, "old", A, mine)
    _hold(ledger, "old", A, shared)
    _hold(ledger, "other", B, shared)
    ledger.forget(["old"])
    assert not mine.exists() and mine.resolve() not in ledger.files  # deleted now, not in an hour
    assert shared.exists() and set(ledger.files[shared.resolve()].holders) == {"other"}  # still B's


def test_over_http_address_a_fills_its_share_and_b_still_uploads(tmp_path, monkeypatch):
    """The whole path: sessions minted from A (a page load each) upload until A's share is full; A's sessions
    past its session cap are forgotten and their files deleted; B, from another address, still uploads."""
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    budget = replace(PUBLIC, uploads_per_session=1, upload_files_total=8, upload_files_per_address=2,
                     sessions_per_address=3)
    ledger = UploadLedger(budget)
    with gr.Blocks() as blocks:
        gr.File(file_types=["image"])
    url = _serve_with(blocks, budget, ledger)
    try:
        picture = [png_bytes(np.full((8, 8, 3), i, dtype=np.uint8)) for i in range(8)]
        abuser = [client(url, A) for _ in range(3)]
        for session in abuser:
            session.get("/")
        replies = [upload(session, f"a{i}.png", picture[i]) for i, session in enumerate(abuser)]
        assert [r.status_code for r in replies[:2]] == [200, 200]
        assert replies[2].status_code == 429 and "your address holds its share" in replies[2].text
        first = Path(replies[0].json()[0])
        fourth = client(url, A)
        fourth.get("/")  # a fourth session from A: its oldest is forgotten, and its file deleted
        assert not first.exists()
        visitor = client(url, B)
        visitor.get("/")
        assert upload(visitor, "b.png", picture[7]).status_code == 200
    finally:
        blocks.close()


def _serve_with(blocks, budget, ledger) -> str:
    from explorer.serve.startup import start_page
    from explorer.ui.app import page_options, serve

    access = Access(roots=(Path.cwd(),), public=True, budget=budget)
    serve(blocks, access)
    port = free_port()
    start_page(blocks, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
               **page_options(access, uploads=ledger))
    return f"http://127.0.0.1:{port}"
