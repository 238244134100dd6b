"""The FileSystem contract's positional writes and preallocation, on the simulator's file system
and on real files alike (the `fs` fixture runs each test on both)."""

import pytest

from bkcore.bookie.fs import FileSystemError, write_atomically


def test_write_at_overwrites_in_place_and_grows_past_the_end(fs):
    fs.makedirs("d")
    fs.append("d/f", b"abcdef")
    fs.write_at("d/f", 2, b"XY")
    assert (fs.read("d/f"), fs.size("d/f")) == (b"abXYef", 6)
    fs.write_at("d/f", 5, b"123")
    assert (fs.read("d/f"), fs.size("d/f")) == (b"abXYe123", 8)
    fs.write_at("d/f", 10, b"!")
    assert fs.read("d/f") == b"abXYe123\0\0!"


def test_write_at_creates_the_file(fs):
    fs.makedirs("d")
    fs.write_at("d/new", 0, b"header")
    assert fs.exists("d/new") and fs.read("d/new") == b"header"


def test_preallocated_space_reads_as_zeros_and_writes_inside_it_keep_the_size(fs):
    fs.makedirs("d")
    fs.write_at("d/f", 0, b"head")
    fs.preallocate("d/f", 4096)
    assert fs.size("d/f") == 4096 and fs.read("d/f") == b"head" + bytes(4092)
    fs.write_at("d/f", 4, b"record")
    fs.sync("d/f")
    assert fs.size("d/f") == 4096
    assert fs.read("d/f", 0, 12) == b"headrecord\0\0"
    fs.preallocate("d/f", 100)                      # never shrinks
    assert fs.size("d/f") == 4096


def test_preallocate_creates_the_file(fs):
    fs.makedirs("d")
    fs.preallocate("d/empty", 64)
    assert fs.read("d/empty") == bytes(64)


def test_append_goes_after_preallocated_space(fs):
    fs.makedirs("d")
    fs.write_at("d/f", 0, b"ab")
    fs.preallocate("d/f", 8)
    fs.append("d/f", b"cd")
    assert fs.read("d/f") == b"ab" + bytes(6) + b"cd"


def test_renamed_and_deleted_files_forget_their_write_handles(fs):
    fs.makedirs("d")
    fs.write_at("d/f", 0, b"one")
    fs.preallocate("d/f", 16)
    fs.rename("d/f", "d/g")
    fs.write_at("d/f", 0, b"two")                   # a new file under the old name
    assert fs.read("d/f") == b"two" and fs.read("d/g") == b"one" + bytes(13)
    fs.delete("d/f")
    fs.write_at("d/f", 0, b"three")
    assert fs.read("d/f") == b"three"
    write_atomically(fs, "d/g", b"replaced")
    assert fs.read("d/g") == b"replaced"


def test_a_negative_offset_is_refused(fs):
    fs.makedirs("d")
    with pytest.raises(FileSystemError, match="negative offset"):
        fs.write_at("d/f", -1, b"x")
