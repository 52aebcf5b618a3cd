"""The package's file writing and path checks (`hf_unified_mt.utils.files`)."""

import os

import pytest

from hf_unified_mt.utils.files import atomic_write, contained_path, write_json, write_text


def test_write_replaces_a_link_instead_of_writing_through_it(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "out.txt").symlink_to(outside)
    write_text(folder / "out.txt", "new")
    assert outside.read_text() == "keep"
    assert not (folder / "out.txt").is_symlink() and (folder / "out.txt").read_text() == "new"


def test_a_failed_write_leaves_the_file_as_it_was_and_no_temporary_file(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_text(path, "’", encoding="latin-1")
    assert path.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["out.txt"]
    with pytest.raises(RuntimeError), atomic_write(path) as handle:
        handle.write("half")
        raise RuntimeError("stopped")
    assert path.read_text() == "old"


def test_written_files_get_the_usual_permissions(tmp_path):
    write_json(tmp_path / "a.json", {"a": 1})
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o666 & ~umask
    assert (tmp_path / "a.json").read_text() == '{"a": 1}\n'


@pytest.mark.parametrize("name", ["../x.py", "/etc/passwd", "a/../../x", "", "a\\..\\x"])
def test_contained_path_refuses_names_that_leave_the_folder(tmp_path, name):
    with pytest.raises(ValueError, match="auto_map"):
        contained_path(tmp_path, name, "auto_map's module")


def test_contained_path_refuses_a_link_leading_out_and_accepts_inner_names(tmp_path):
    (tmp_path / "inner").mkdir()
    (tmp_path / "link").symlink_to(tmp_path.parent)
    with pytest.raises(ValueError, match="symbolic link"):
        contained_path(tmp_path, "link/x.py")
    assert contained_path(tmp_path, "inner/model.safetensors") == tmp_path / "inner" / "model.safetensors"
