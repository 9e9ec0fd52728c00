"""The free disk a new ComfyUI asks for: the torch build's download figure, or, when pip may read only local
folders, what those folders hold unpacked (h3kit.comfyui.setup.disk_need)."""

from __future__ import annotations

import shutil

import pytest

from h3kit.comfyui.setup import disk_need
from h3kit.comfyui.setup.pip import setup_table
from h3kit.core.errors import NotReady
from h3kit.core.tools import PipOptions

TABLE = {"min_free_bytes": {"cuda": 12_000_000_000, "cpu": 4_000_000_000},
         "local_unpack_factor": 2.5, "source_and_venv_bytes": 300_000_000}


def sized(path, n: int):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(n)  # sparse: the size is what counts
    return path


def test_only_package_archives_in_the_folder_itself_are_counted(tmp_path):
    sized(tmp_path / "w" / "torch-2.14.1-cp312-cp312-linux_x86_64.whl", 1000)
    sized(tmp_path / "w" / "comfy_dep-1.0.tar.gz", 200)
    sized(tmp_path / "w" / "README.txt", 5000)
    sized(tmp_path / "w" / "old" / "torch-2.0-cp312-cp312-linux_x86_64.whl", 7000)  # pip reads the folder flat
    single = sized(tmp_path / "one" / "av-16.0-cp312-cp312-linux_x86_64.whl", 30)
    assert disk_need.local_archive_bytes([str(tmp_path / "w"), str(single), str(tmp_path / "gone")]) == 1230


def test_local_folders_set_the_need_when_pip_may_read_nothing_else(tmp_path):
    sized(tmp_path / "w" / "torch-2.14.1-cp312-cp312-linux_x86_64.whl", 2_000_000_000)
    opts = PipOptions(find_links=[(tmp_path / "w").as_uri()], no_index=True)
    need = disk_need.need_for(TABLE, "cuda", opts)
    assert need.bytes == 2_000_000_000 * 5 // 2 + 300_000_000
    assert "2.0 GB of packages in " + str(tmp_path / "w") in need.why


def test_the_download_figure_holds_when_a_server_may_be_asked_or_the_folders_hold_more(tmp_path):
    sized(tmp_path / "w" / "torch.whl", 10)
    folder = str(tmp_path / "w")
    assert disk_need.need_for(TABLE, "cuda", PipOptions(find_links=[folder])).bytes == 12_000_000_000  # index too
    mixed = PipOptions(find_links=[folder, "https://download.pytorch.org/whl/cu130"], no_index=True)
    assert disk_need.need_for(TABLE, "cuda", mixed).bytes == 12_000_000_000
    sized(tmp_path / "w" / "big.whl", 5_000_000_000)  # a wheelhouse of many builds: the build's figure is lower
    need = disk_need.need_for(TABLE, "cuda", PipOptions(find_links=[folder], no_index=True))
    assert need == disk_need.DiskNeed(12_000_000_000, "with this torch build")
    assert disk_need.need_for(TABLE, "no-such-backend", PipOptions()).bytes == 4_000_000_000


def test_the_shipped_table_has_both_figures():
    table = setup_table()
    assert 1 < table["local_unpack_factor"] < 5 and 0 < table["source_and_venv_bytes"] < 10**9


def test_short_disk_is_one_sentence_naming_the_need(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**12, 10**12 - 10**9, 10**9))
    with pytest.raises(NotReady) as err:
        disk_need.check_room(tmp_path / "new", disk_need.DiskNeed(2_000_000_000, "from the 0.5 GB of packages in /w"))
    assert err.value.message == (f"{tmp_path} has 1.0 GB free; a new ComfyUI from the 0.5 GB of packages in /w "
                                 "needs about 2.0 GB.")
    disk_need.check_room(tmp_path / "new", disk_need.DiskNeed(10**9, "x"))  # exactly enough passes


def test_a_folder_that_cannot_be_listed_counts_nothing_and_raises_nothing(tmp_path, monkeypatch):
    sized(tmp_path / "ok" / "torch.whl", 100)
    sized(tmp_path / "locked" / "av.whl", 7)
    real_iterdir = type(tmp_path).iterdir

    def iterdir(self):
        if self.name == "locked":  # root ignores permission bits, so the refusal is made here
            raise PermissionError(13, "Permission denied", str(self))
        return real_iterdir(self)

    monkeypatch.setattr(type(tmp_path), "iterdir", iterdir)
    assert disk_need.local_archive_bytes([str(tmp_path / "locked"), str(tmp_path / "ok")]) == 100
