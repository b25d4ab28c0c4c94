"""Paths are resolved component by component without following a symlink (issue 25,
item 1): a symlink at any depth of a directory tree, made or swapped in by a local user,
is refused, and a real directory is taken as it is (a property over random trees)."""

import os
import random
from pathlib import Path

import pytest

from gameday.errors import FaultRejected
from gameday.node.host.storage import checked_dir


@pytest.mark.parametrize("seed", range(20))
def test_a_symlink_at_any_component_is_refused(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    depth = rng.randint(1, 6)
    names = [f"d{i}" for i in range(depth)]
    real = tmp_path.joinpath(*names)
    real.mkdir(parents=True)
    assert checked_dir(str(real)) == real
    # swap one component for a symlink to where it was (as a racing user would)
    at = rng.randrange(depth)
    component = tmp_path.joinpath(*names[:at + 1])
    moved = component.with_name(component.name + "-moved")
    os.rename(component, moved)
    os.symlink(moved, component)
    with pytest.raises(FaultRejected, match="symlink"):
        checked_dir(str(real))
    os.unlink(component)
    with pytest.raises(FaultRejected, match="not a directory"):
        checked_dir(str(real))  # gone: nothing is followed to find it


def test_a_file_or_a_dangling_link_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    for name, message in (("file", "not a directory"), ("dangling", "symlink")):
        with pytest.raises(FaultRejected, match=message):
            checked_dir(str(tmp_path / name))
