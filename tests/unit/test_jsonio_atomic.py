"""output/jsonio.py: outputs replaced only when there is something complete to put there."""
import os

import pytest

from futextrace.errors import FileProblem
from futextrace.output import jsonio


def test_nothing_written_leaves_the_old_file(tmp_path):
    f = tmp_path / "keep.json"
    f.write_text("old")
    out = jsonio.open_output(str(f))
    out.discard()            # a failed run
    assert f.read_text() == "old" and os.listdir(tmp_path) == ["keep.json"]


def test_a_document_is_renamed_into_place_whole(tmp_path):
    f = tmp_path / "keep.json"
    f.write_text("old")
    os.chmod(f, 0o604)
    jsonio.open_output(str(f)).write_json({"new": 1})
    assert f.read_text() == '{\n "new": 1\n}\n' and f.stat().st_mode & 0o777 == 0o604
    assert os.listdir(tmp_path) == ["keep.json"]


def test_a_stream_replaces_the_file_at_its_first_line_then_grows(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text("old\n")
    out = jsonio.open_output(str(f))
    out.write_jsonl({"t": 1})
    assert f.read_text() == '{"t": 1}\n'
    out.write_jsonl({"t": 2})
    assert f.read_text() == '{"t": 1}\n{"t": 2}\n'
    out.close()
    assert os.listdir(tmp_path) == ["rows.jsonl"]


def test_a_symlink_keeps_pointing_at_the_new_file(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    jsonio.open_output(str(link)).write_json([])
    assert link.is_symlink() and real.read_text() == "[]\n"


def test_a_device_is_written_directly():
    jsonio.open_output("/dev/null").write_json({"x": 1})   # no rename over /dev/null
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


def test_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    f = tmp_path / "keep.json"
    f.write_text("old")
    out = jsonio.open_output(str(f))
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(FileProblem, match="No space left"):
        out.write_json({"x": 1})
    assert f.read_text() == "old" and os.listdir(tmp_path) == ["keep.json"]


@pytest.mark.parametrize("where, words", [("dir", "is a directory"), ("missing", "No such file")])
def test_bad_places_fail_before_anything_runs(tmp_path, where, words):
    path = tmp_path if where == "dir" else tmp_path / "no" / "x.json"
    with pytest.raises(FileProblem, match=words):
        jsonio.open_output(str(path))
