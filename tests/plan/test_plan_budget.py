"""The budget's inputs: which disk holds the ComfyUI folder, typed catalog figures, and a planner that reads no file."""

from __future__ import annotations

import ast
import builtins
import copy
import json
import pathlib
from pathlib import Path

import pytest

from h3kit.data.fingerprint import Disk, Fingerprint
from h3kit.data import catalog as catalog_mod
from h3kit.data import config as config_mod
from h3kit.data.config import Config
from h3kit.plan import make_plan
from h3kit.plan.budget import disk_for

FP_DIR = Path(__file__).parents[1] / "fixtures" / "fingerprints"
FP_4090 = json.loads((FP_DIR / "nvidia-rtx4090-24gb-64gb.json").read_text())
CAT = catalog_mod.load()
PROFILES = catalog_mod.load_profiles(CAT)
PLAN_DIR = Path(__file__).resolve().parents[2] / "installer" / "h3kit" / "plan"


def _disk(path: str, free_gb: int, kind: str = "ssd") -> dict:
    return {"path": path, "total_bytes": 4 * 10**12, "free_bytes": free_gb * 10**9, "kind": kind}


def _typed(disks: list[dict]) -> tuple[Disk, ...]:
    return tuple(Disk.from_json(d) for d in disks)


def _with_disks(*disks: dict) -> dict:
    fp = copy.deepcopy(FP_4090)
    fp["disks"] = list(disks)
    return fp


def test_a_folder_under_mnt_data2_is_not_on_mnt_data():
    """/mnt/data2 is a folder on the root disk here; a string prefix test put it on /mnt/data (10 GB free)."""
    fp = _with_disks(_disk("/", 500), _disk("/mnt/data", 10))
    plan = make_plan(Fingerprint.from_json(fp), CAT, PROFILES, config=Config(comfyui_path="/mnt/data2/ComfyUI"))
    assert plan.budget.disk_bytes == 500 * 10**9 and plan.fits
    on_data = make_plan(Fingerprint.from_json(fp), CAT, PROFILES, config=Config(comfyui_path="/mnt/data/ComfyUI"))
    assert on_data.budget.disk_bytes == 10 * 10**9 and not on_data.fits


@pytest.mark.parametrize("folder,system,expected", [
    ("/mnt/data2/ComfyUI", "linux", "/mnt/data2"),  # the longest mount that holds it
    ("/mnt/data/ComfyUI", "linux", "/mnt/data/"),  # a mount written with a trailing slash
    ("/mnt/data", "linux", "/mnt/data/"),  # the mount point itself
    ("/mnt/database/ComfyUI", "linux", "/"),
    ("d:\\AI\\ComfyUI", "windows", "D:\\"),  # drive letters compare without case
    ("C:\\ComfyUI", "windows", "C:\\"),
])
def test_disk_for_compares_whole_path_components(folder, system, expected):
    disks = [_disk("/", 1), _disk("/mnt/data/", 2), _disk("/mnt/data2", 3), _disk("C:\\", 4), _disk("D:\\", 5)]
    assert disk_for(_typed(disks), folder, system).path == expected


def test_without_a_known_folder_the_disk_with_most_room_counts():
    disks = [_disk("/", 100), _disk("/srv", 900)]
    assert disk_for(_typed(disks), None, "linux").path == "/srv"
    assert disk_for(_typed(disks), "relative/ComfyUI", "linux").path == "/srv"  # under no mount: no better guess
    assert disk_for((), "/opt/ComfyUI", "linux") is None


def test_catalog_profiles_and_config_are_typed_when_loaded(tmp_path):
    assert isinstance(CAT.memory.activation_fixed, int) and CAT.memory.activation_fixed == 5 * 10**8
    assert CAT.comfyui.reserve_default == 400 * 10**6 and CAT.comfyui.weights_share == 0.88
    assert CAT.canvas_ladder[0] == (1344, 768) and all(isinstance(c, tuple) for c in CAT.canvas_ladder)
    s = PROFILES["nvidia-24gb"].settings
    assert s.os_ram_headroom == 4 * 10**9 and s.max_canvas == (1344, 768) and s.shard_size_bytes == "auto"
    assert PROFILES["nvidia-24gb"].written["os_ram_headroom"] == "4 GB"  # as the file spells it, for people
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text("overrides:\n  shard_size_bytes: \"1 GB\"\n  max_canvas: [864, 480]\n")
    cfg = config_mod.load(cfg_file)
    assert cfg.overrides.as_dict() == {"shard_size_bytes": 10**9, "max_canvas": (864, 480)}
    assert cfg.written("overrides")["shard_size_bytes"] == "1 GB"


def test_a_users_size_is_quoted_as_they_wrote_it(tmp_path):
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text("overrides:\n  shard_size_bytes: \"1 GB\"\n")
    plan = make_plan(Fingerprint.from_json(FP_4090), CAT, PROFILES, config=config_mod.load(cfg_file))
    assert any(r.startswith("shard_size_bytes 1 GB was rounded to") for r in plan.rationale)
    assert any(r.startswith("shard_size_bytes = '1 GB' from the override") for r in plan.rationale)


def test_the_planner_reads_no_file(monkeypatch, tmp_path):
    """make_plan is a function of its arguments: with every file read refused, it still plans."""
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text("overrides:\n  preload_bytes: \"2 GB\"\n")
    cfg = config_mod.load(cfg_file)
    expected = make_plan(Fingerprint.from_json(FP_4090), CAT, PROFILES, config=cfg)

    def refuse(*args, **kwargs):
        raise AssertionError("the planner touched the file system")

    for name in ("open", "read_text", "read_bytes", "stat", "is_file", "exists", "glob"):
        if hasattr(pathlib.Path, name):
            monkeypatch.setattr(pathlib.Path, name, refuse)
    monkeypatch.setattr(builtins, "open", refuse)
    assert make_plan(Fingerprint.from_json(FP_4090), CAT, PROFILES, config=cfg) == expected


def test_no_module_of_the_planner_parses_sizes():
    for path in PLAN_DIR.glob("*.py"):
        names = {n.id for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Name)}
        names |= {a.name for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                  if isinstance(n, ast.ImportFrom) for a in n.names}
        assert "parse_size" not in names, path.name


def _cpu_streamed(page_cache: str, dit_id: str = "h3-dit-pruned-bf16"):
    """The CPU-only profile's streamed estimate of `dit_id` on the 16 GB CPU box, page_cache as given."""
    from h3kit.plan.budget import Choice, make_budget, memory_estimate

    settings = PROFILES["cpu-only"].settings.but(page_cache=page_cache)
    fp = Fingerprint.from_json(json.loads((FP_DIR / "cpu-only-16gb.json").read_text()))
    budget = make_budget(CAT, fp, settings, cpu=True)
    choice = Choice(CAT.weight(dit_id), CAT.weight("h3-te-qwen3vl32b-q2_k_m"), CAT.weight("h3-vae-video-int8"),
                    CAT.audio_vae[0], (512, 288), 22)
    return memory_estimate(CAT, budget, settings, choice, 1)


def test_a_cpu_run_holds_a_read_ring_exactly_where_the_streamed_loader_reads_into_one():
    """nodes BlockStream.reader_for: in place through the page cache (no ring, the read-ahead waits in the cache),
    past it (UncachedRead: the ring of the block in use and the one read ahead), or a GGUF file through the ring
    (RingRead: two block sets, one computing while the helper dequantizes the other)."""
    use, bypass = _cpu_streamed("use"), _cpu_streamed("bypass")
    assert (use.page_cache, use.ring) == ("use", 0)
    assert bypass.page_cache == "bypass" and bypass.ring == 2 * bypass.block
    assert bypass.phases["sample"]["ram_bytes"] - bypass.resident_blocks * bypass.block_held == \
        use.phases["sample"]["ram_bytes"] - use.resident_blocks * use.block_held + 2 * bypass.block
    auto = _cpu_streamed("auto")  # 16 GB cannot cache ~37 GB of streamed blocks: bypass, decided here once
    assert auto.page_cache == "bypass" and auto.ring == bypass.ring and auto.cache.case == "does not fit"
    gguf = _cpu_streamed("use", "h3-dit-pruned-q8_0")
    assert gguf.ring == 2 * gguf.block
    assert gguf.phases["sample"]["ram_bytes"] == CAT.memory.comfyui_process_ram + gguf.activations + gguf.ring \
        + (2 + gguf.resident_blocks) * gguf.block_held


def test_one_memory_model():
    """calibration sizes memory with the planner's model (calibrate/estimates.py clip_memory passes it what it
    measured): there is one memory_estimate."""
    root = Path(__file__).resolve().parents[2] / "installer" / "h3kit"
    found = [p for p in root.rglob("*.py") if "def memory_estimate" in p.read_text()]
    assert found == [PLAN_DIR / "budget.py"]


def test_the_reserve_follows_the_profiles_last_reserve_vram_as_comfyui_reads_it():
    """--reserve-vram read as ComfyUI reads its command line (h3kit.data.comfy_argv): given twice the last
    counts, `--reserve-vram=2` and a shortened `--reserve 2` are the flag too; no number: ComfyUI's defaults."""
    from h3kit.plan.budget import GIB, make_budget

    fp = Fingerprint.from_json(FP_4090)
    base = PROFILES["nvidia-24gb"].settings

    def reserve(*args):
        return make_budget(CAT, fp, base.but(comfyui_args=tuple(args))).reserve

    default = reserve()
    assert reserve("--reserve-vram", "1", "--lowvram", "--reserve-vram=2") == 2 * GIB
    assert reserve("--reserve", "1.5") == int(1.5 * GIB)
    assert reserve("--reserve-vram", "lots") == default == reserve("--reserve-vram")
