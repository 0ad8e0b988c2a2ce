"""explorer.core.jsonl: JSON Lines read with errors naming file and line, written atomically."""

from __future__ import annotations

import json
import os
import stat

import pytest

from explorer.core.errors import ExplorerError
from explorer.core.files import atomic_write
from explorer.core.jsonl import JsonlError, read_jsonl, write_jsonl


def test_round_trip_keeps_line_numbers_and_skips_blank_lines(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n  \n[2, "\u00e9"]\n"three"\n', encoding="utf-8")
    assert list(read_jsonl(path)) == [(1, {"a": 1}), (4, [2, "\u00e9"]), (5, "three")]
    out = write_jsonl(tmp_path / "copy.jsonl", (value for _, value in read_jsonl(path)))
    assert out.read_text(encoding="utf-8") == '{"a": 1}\n[2, "\u00e9"]\n"three"\n'  # not ASCII-escaped


def test_only_newlines_end_a_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"text": "a\u2028b\x85c"}, ensure_ascii=False) + "\r\n{}\r", encoding="utf-8")
    assert list(read_jsonl(path)) == [(1, {"text": "a\u2028b\x85c"}), (2, {})]


def test_a_bad_line_is_named(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{oops\n{"b": 2}\n')
    with pytest.raises(JsonlError, match=r"rows\.jsonl, line 3: not JSON") as caught:
        list(read_jsonl(path))
    assert caught.value.line == 3 and caught.value.path == path
    assert isinstance(caught.value, ExplorerError) and isinstance(caught.value, ValueError)
    with pytest.raises(JsonlError, match="line 3"):  # not the last line: still an error
        list(read_jsonl(path, skip_torn_tail=True))


def test_a_torn_last_line_can_be_skipped(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"st')
    assert [v for _, v in read_jsonl(path, skip_torn_tail=True)] == [{"step": 1}, {"step": 2}]
    with pytest.raises(JsonlError, match="line 3"):
        list(read_jsonl(path))


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "rows.jsonl"
    write_jsonl(path, [{"old": True}])

    def rows():
        yield {"new": 1}
        raise RuntimeError("generator failed")

    with pytest.raises(RuntimeError):
        write_jsonl(path, rows())
    assert path.read_text() == '{"old": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]


def test_atomic_write_keeps_the_mode_and_makes_new_files_as_the_umask_says(tmp_path):
    umask = os.umask(0o022)  # a known umask for the check, restored after
    try:
        fresh = tmp_path / "fresh.bin"
        with atomic_write(fresh, binary=True) as out:
            out.write(b"\x00\x01")
        os.umask(0o077)
        private = tmp_path / "private.txt"
        with atomic_write(private) as out:
            out.write("secret")
    finally:
        os.umask(umask)
    assert fresh.read_bytes() == b"\x00\x01" and stat.S_IMODE(fresh.stat().st_mode) == 0o644
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    os.chmod(fresh, 0o600)
    with atomic_write(fresh) as out:
        out.write("text")
    assert fresh.read_text() == "text" and stat.S_IMODE(fresh.stat().st_mode) == 0o600
