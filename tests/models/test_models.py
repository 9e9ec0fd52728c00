"""`h3kit models` end to end: plan totals, fetch from a local server into ComfyUI's folders, remove exactly ours.

The real catalog chooses the files; a stand-in catalog maps the same weight ids
to small files so a fetch finishes in milliseconds. URLs stay the catalog's
Hugging Face URLs and reach the test server through the mirror setting in
config.yaml, the way a user behind a slow link would use a mirror.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from h3kit import models
from h3kit.cli.context import Context
from h3kit.comfyui.journal import Journal
from h3kit.comfyui.manifest import load_or_new
from h3kit.core import files as core_files
from h3kit.core.errors import NotReady  # noqa: E402 (sorted below)
from h3kit.data import catalog as catalog_mod
from h3kit.data.catalog_sections import LoaderPack
from h3kit.data.plan_doc import Plan, PlanSettings
from h3kit.fingerprint.schema import load_file
from h3kit.models import download, store
from h3kit.models import files as model_files
from h3kit.plan import make_plan
from model_server import ModelServer, closed_port

pytestmark = pytest.mark.native  # installs: the session's native library, not a compile per test

FPS = Path(__file__).parents[1] / "fixtures" / "fingerprints"
FP_4090 = FPS / "nvidia-rtx4090-24gb-64gb.json"
FP_M2MAX = FPS / "apple-m2max-64gb.json"
FP_AMD = FPS / "amd-rx7900xtx-24gb-64gb.json"  # its plan holds a GGUF text encoder (h3kit's loader over ComfyUI-GGUF)


@pytest.fixture
def server():
    s = ModelServer().start()
    yield s
    s.stop()


@pytest.fixture
def comfy(tmp_path) -> Path:
    root = tmp_path / "ComfyUI"
    for sub in ("models/diffusion_models", "models/unet", "models/text_encoders", "models/clip", "custom_nodes"):
        (root / sub).mkdir(parents=True)
    (root / "main.py").write_text("# ComfyUI stand-in\n")
    return root


@pytest.fixture
def small(monkeypatch, server, h3kit_home):
    """Every weight becomes a small file with known bytes; the server serves them; config names the mirror."""
    real = catalog_mod.load()
    payloads: dict[str, bytes] = {}
    weights = []
    for i, w in enumerate(real.dit + real.text_encoder + real.vae + real.audio_vae + real.lora):
        data = hashlib.sha256(w.id.encode()).digest() * (4000 + 100 * i)
        payloads[w.id] = data
        f = dataclasses.replace(w.file, bytes=len(data))
        weights.append(dataclasses.replace(w, bytes=len(data), file=f))
        for url in f.urls:
            server.add(urlsplit(url).path, data=data)
    by_kind = {k: [w for w in weights if w.part == k] for k in ("dit", "text_encoder", "vae", "audio_vae", "lora")}
    fake = dataclasses.replace(real, **by_kind)
    monkeypatch.setattr(model_files, "_catalog", lambda catalog=None: catalog or fake)
    monkeypatch.setattr(store, "Downloader", functools.partial(download.Downloader, sleep=lambda s: None,
                                                                progress=False, token=""))
    (h3kit_home / "config.yaml").write_text(f"profile: auto\nmodels:\n  mirror: {server.base}\n")
    return payloads


def _plan(fp=FP_4090) -> dict:
    cat = catalog_mod.load()
    return make_plan(load_file(fp), cat, catalog_mod.load_profiles(cat))


def _json(run_cli, *argv):
    code, out, err = run_cli(*argv, "--json")
    return code, json.loads(out) if out.strip() else None, err


@pytest.mark.parametrize("fp", [FP_4090, FP_M2MAX], ids=["rtx4090", "m2max"])
def test_models_plan_adds_up_to_the_plans_disk_bytes(run_cli, fp):
    code, plan, _ = _json(run_cli, "plan", "--fingerprint", str(fp))
    assert code == 0
    code, doc, _ = _json(run_cli, "models", "plan", "--fingerprint", str(fp))
    assert code == 0 and doc["schema"] == "h3kit.models/1"
    assert doc["total_bytes"] == sum(f["bytes"] for f in doc["files"]) == plan["estimates"]["disk_bytes"]
    s = plan["settings"]
    assert [f["id"] for f in doc["files"]][:3] == [s["dit_weights"], s["text_encoder_weights"], s["vae_weights"]]
    for f in doc["files"]:
        assert set(f) >= {"name", "bytes", "folder", "urls", "sha256", "loader"}
        assert f["folder"] in ("diffusion_models", "text_encoders", "vae")
        assert f["urls"] and all(u.startswith("https://") for u in f["urls"])


def test_models_plan_names_a_missing_loader_pack(run_cli):
    code, doc, _ = _json(run_cli, "models", "plan", "--fingerprint", str(FP_AMD))
    gguf = [f for f in doc["files"] if f["name"].endswith(".gguf")]
    assert gguf and gguf[0]["loader"]["pack"]["git"] == "https://github.com/city96/ComfyUI-GGUF"
    assert any("ComfyUI-GGUF" in w and "--with-loaders" in w for w in doc["warnings"])


def test_fetch_survives_a_cut_connection_and_lands_in_the_right_folders(run_cli, server, small, comfy):
    plan = _plan()
    dit_url = models.files_for_plan(plan)[0].urls[0]
    server.routes[urlsplit(dit_url).path].cut_after = 100_000
    code, doc, err = _json(run_cli, "models", "fetch", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))
    assert code == 0, err
    got = {Path(f["path"]).relative_to(comfy).as_posix(): f for f in doc["files"]}
    for f in models.files_for_plan(plan):
        rel = f"models/{f.folder}/{f.name}"
        assert rel in got
        assert (comfy / rel).read_bytes() == small[f.weight_id]
        assert got[rel]["sha256"] == hashlib.sha256(small[f.weight_id]).hexdigest()
    assert any(r.range for r in server.requests if r.path == urlsplit(dit_url).path)  # resumed
    assert not list(comfy.rglob("*.part"))
    code, st, _ = _json(run_cli, "models", "status", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))
    assert code == 0 and {f["state"] for f in st["files"]} == {"present"} and st["missing_bytes"] == 0
    assert all(f["sha256_recorded"] == hashlib.sha256(small[f["id"]]).hexdigest() for f in st["files"])
    code, ver, _ = _json(run_cli, "models", "verify", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))
    assert code == 0 and all(r["ok"] for r in ver["files"])
    # a second fetch downloads nothing
    n = len(server.requests)
    code, again, _ = _json(run_cli, "models", "fetch", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))
    assert code == 0 and again["downloaded_bytes"] == 0 and len(server.requests) == n


def test_remove_takes_only_what_h3kit_downloaded(run_cli, small, comfy):
    files = models.files_for_plan(_plan())
    vae = next(f for f in files if f.part == "vae")
    user_copy = comfy / "models" / "vae" / vae.name  # the user's own copy, same name and size
    user_copy.parent.mkdir(parents=True, exist_ok=True)
    user_copy.write_bytes(small[vae.weight_id])
    bystander = comfy / "models" / "vae" / "someone_elses.safetensors"
    bystander.write_bytes(b"x")
    code, doc, _ = _json(run_cli, "models", "fetch", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))
    assert code == 0
    assert {f["method"] for f in doc["files"] if f["name"] == vae.name} == {"present"}  # not downloaded again
    code, gone, _ = _json(run_cli, "models", "remove", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))
    assert code == 0
    assert len(gone["removed"]) == len(files) - 1
    for f in files:
        if f is not vae:
            assert not f.dest(comfy).exists()
    assert user_copy.read_bytes() == small[vae.weight_id] and bystander.exists()
    assert {"path": str(user_copy), "why": "not downloaded by h3kit"} in gone["kept"]
    man = load_or_new(Context().locations.state_dir, comfy)
    assert man.by_role("model") == []


def test_remove_keeps_a_file_the_user_replaced(run_cli, small, comfy):
    assert _json(run_cli, "models", "fetch", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))[0] == 0
    dit = models.files_for_plan(_plan())[0]
    dit.dest(comfy).write_bytes(b"the user's own file with the same name")
    code, gone, _ = _json(run_cli, "models", "remove", "--comfyui", str(comfy))
    assert code == 0 and dit.dest(comfy).exists()
    assert {"path": str(dit.dest(comfy)), "why": "changed since h3kit wrote it"} in gone["kept"]


def test_fetch_wrong_size_exits_4_and_keeps_part(run_cli, server, small, comfy):
    dit = models.files_for_plan(_plan())[0]
    server.routes[urlsplit(dit.urls[0]).path].data = small[dit.weight_id][:-7]
    code, doc, err = _json(run_cli, "models", "fetch", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))
    assert code == 4 and "wrong size" in doc["error"]
    assert not dit.dest(comfy).exists()
    assert dit.want(comfy).part.stat().st_size == len(small[dit.weight_id]) - 7


def test_fetch_refuses_before_any_byte_when_disk_is_short(run_cli, server, small, comfy, monkeypatch):
    monkeypatch.setattr(core_files, "free_bytes", lambda p: 5 * 10**8)
    code, doc, err = _json(run_cli, "models", "fetch", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))
    assert code == 3 and "short" in doc["error"] and doc["details"]["short_bytes"] > 0
    assert server.requests == [] and not list(comfy.rglob("*.part"))


def test_fetch_from_a_local_folder_offline(run_cli, server, small, comfy, tmp_path):
    usb = tmp_path / "usb"
    files = models.files_for_plan(_plan())
    for f in files:
        (usb / f.folder).mkdir(parents=True, exist_ok=True)
        (usb / f.folder / f.name).write_bytes(small[f.weight_id])
    code, doc, err = _json(run_cli, "models", "fetch", "--fingerprint", str(FP_4090), "--comfyui", str(comfy),
                           "--from", str(usb))
    assert code == 0, err
    assert server.requests == []  # nothing from the network
    assert {f["method"] for f in doc["files"]} <= {"hardlink", "copy"}
    for f in files:
        assert f.dest(comfy).read_bytes() == small[f.weight_id]


def test_a_users_different_file_is_never_overwritten(run_cli, small, comfy):
    dit = models.files_for_plan(_plan())[0]
    legacy = comfy / "models" / "unet" / dit.name  # ComfyUI also reads models/unet
    legacy.write_bytes(b"some other version")
    code, doc, _ = _json(run_cli, "models", "fetch", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))
    assert code == 4 and "will not overwrite" in doc["error"]
    assert legacy.read_bytes() == b"some other version"


def test_doctor_findings_report_missing_files_and_loader_pack(comfy):
    findings = models.doctor_findings(_plan(FP_AMD), comfy)
    assert all(set(f) == {"check", "status", "message", "fix"} for f in findings)
    pack = [f for f in findings if f["check"] == "loader pack ComfyUI-GGUF"]
    assert pack and pack[0]["status"] == "fail" and "--with-loaders" in pack[0]["fix"]
    assert any(f["status"] == "warn" and f["fix"] == "h3kit models fetch" for f in findings)
    assert models.doctor_findings(Plan(settings=PlanSettings(dit_weights="nope")), comfy)[0]["status"] == "warn"


def test_ensure_models_skip_ask_and_yes(small, comfy):
    plan = _plan()
    skipped = models.ensure_models(Context(), plan, comfy, skip=True, with_loaders=False)
    assert skipped["skipped"] and skipped["reason"] == "--no-models" and skipped["total_bytes"] > 0
    declined = models.ensure_models(Context(json=True), plan, comfy, skip=False, with_loaders=False)
    assert declined["reason"] == "declined" and not models.files_for_plan(plan)[0].dest(comfy).exists()
    done = models.ensure_models(Context(yes=True), plan, comfy, skip=False, with_loaders=False)
    assert done["skipped"] is False and done["fetched"]["downloaded_bytes"] > 0


def test_with_loaders_installs_the_pack_with_comfyuis_python(small, comfy, tmp_path):
    import subprocess

    pack_src = tmp_path / "ComfyUI-GGUF-src"
    pack_src.mkdir()
    (pack_src / "__init__.py").write_text("NODE_CLASS_MAPPINGS = {}\n")
    (pack_src / "requirements.txt").write_text("# gguf would be here; empty keeps the test offline\n")
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
        subprocess.run(["git", *cmd], cwd=pack_src, check=True, capture_output=True, timeout=60)
    (comfy / "venv" / "bin").mkdir(parents=True)
    os.symlink(sys.executable, comfy / "venv" / "bin" / "python")
    pack = LoaderPack("ComfyUI-GGUF", "https://github.com/city96/ComfyUI-GGUF", "ComfyUI-GGUF")
    ctx = Context()
    got = models.install_loader_pack(ctx, pack, comfy, git_url=str(pack_src))
    assert got["installed"] and (comfy / "custom_nodes" / "ComfyUI-GGUF" / "__init__.py").is_file()
    assert got["python"].endswith("venv/bin/python")
    man = load_or_new(ctx.locations.state_dir, comfy)
    paths = {e.path for e in man.by_role("loader-pack")}
    assert str((comfy / "custom_nodes" / "ComfyUI-GGUF" / "__init__.py").absolute()) in paths
    assert models.install_loader_pack(ctx, pack, comfy)["why"] == "already there"


def _pack_repo(tmp_path: Path) -> tuple[Path, LoaderPack]:
    """A one-commit git repository standing in for ComfyUI-GGUF, and its pack entry."""
    import subprocess

    pack_src = tmp_path / "pack-src"
    pack_src.mkdir()
    (pack_src / "__init__.py").write_text("NODE_CLASS_MAPPINGS = {}\n")
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
        subprocess.run(["git", *cmd], cwd=pack_src, check=True, capture_output=True, timeout=60)
    return pack_src, LoaderPack("ComfyUI-GGUF", folder="ComfyUI-GGUF")


def test_a_clone_killed_midway_is_named_in_the_record_and_redone(small, comfy, tmp_path):
    """Record before write: the pack folder is pending in the record before git makes it, so a half-made
    clone (killed mid-way) is recognised as ours and redone by the next run, not called 'already there'."""
    pack_src, pack = _pack_repo(tmp_path)
    ctx = Context()
    dest = comfy / "custom_nodes" / "ComfyUI-GGUF"
    man = load_or_new(ctx.locations.state_dir, comfy)
    Journal(man).intend_dir(dest, "loader-pack")  # what the record says when git was killed mid-clone
    man.save()
    (dest / ".git").mkdir(parents=True)
    (dest / "half-written.py").write_text("# cut off")
    got = models.install_loader_pack(ctx, pack, comfy, git_url=str(pack_src))
    assert got["installed"] and (dest / "__init__.py").is_file() and not (dest / "half-written.py").exists()
    entry = load_or_new(ctx.locations.state_dir, comfy).find(dest)
    assert entry is not None and not entry.pending
    # A folder the record does not name is the user's: left alone.
    (comfy / "custom_nodes" / "Theirs").mkdir()
    theirs = dataclasses.replace(pack, folder="Theirs")
    assert models.install_loader_pack(ctx, theirs, comfy, git_url=str(pack_src))["why"] == "already there"


def test_uninstall_keeps_models_and_models_remove_still_finds_them(run_cli, small, comfy, tmp_path):
    """Uninstall replays the same manifest: it removes a loader pack h3kit installed, keeps the
    weights (by design, they are tens of GB) and leaves their records, so 'models remove' still works after."""
    for marker in ("comfy", "comfy_extras"):
        (comfy / marker).mkdir()
    (comfy / "nodes.py").write_text("")
    pack_src, pack = _pack_repo(tmp_path)
    models.install_loader_pack(Context(), pack, comfy, git_url=str(pack_src))
    assert _json(run_cli, "models", "fetch", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))[0] == 0
    files = models.files_for_plan(_plan())
    code, un, err = _json(run_cli, "uninstall", "--comfyui", str(comfy), "--yes")
    assert code == 0, err
    assert not (comfy / "custom_nodes" / "ComfyUI-GGUF").exists()
    assert all(f.dest(comfy).exists() for f in files)
    code, gone, _ = _json(run_cli, "models", "remove", "--comfyui", str(comfy))
    assert code == 0 and sorted(gone["removed"]) == sorted(str(f.dest(comfy)) for f in files)
    assert not any(f.dest(comfy).exists() for f in files)
    assert (comfy / "models" / "diffusion_models").is_dir()  # there before h3kit: kept
    assert not (comfy / "models" / "vae").exists()  # h3kit created it for the VAE files: removed once empty


# -- downloads the user can trust ------------------------------------------------------------------

FIXTURES_PLANS = Path(__file__).parents[1] / "fixtures" / "plans"


def _doubtful_plan() -> Plan:
    """A reference plan whose user forced files nobody reported loading: a full-model GGUF DiT and, made doubtful
    here by hand, the fast preset's LoRA. No plan picks such files by itself (tests/plan/test_plan_loads.py)."""
    plan = json.loads((FIXTURES_PLANS / "nvidia-rtx4090-24gb-64gb.json").read_text(encoding="utf-8"))
    plan["settings"].update(dit_weights="h3-dit-full-q8_0", lora="h3-lora-turbo")
    plan["comfyui_loads"].update(dit="unknown", lora="unknown")
    return Plan.from_json(plan)


def test_yes_fetches_only_files_reported_to_load_and_names_the_rest(tmp_path, monkeypatch):
    from h3kit.cli.context import Context
    from h3kit.models import ensure

    plan = _doubtful_plan()
    comfy = tmp_path / "ComfyUI"
    (comfy / "models").mkdir(parents=True)
    fetched = {}

    def fake_fetch(ctx, plan, comfyui_dir, *, config=None, skip_names=frozenset(), folders=None):
        fetched["skip"] = set(skip_names)
        return {"files": []}

    monkeypatch.setattr(ensure, "fetch", fake_fetch)
    monkeypatch.setattr(ensure, "install_loader_pack", lambda ctx, pack, comfyui_dir, config=None: {"name": pack.name})
    files = ensure.files_for_plan(plan)
    doubtful = ensure.distrusted(plan, files)
    assert len(doubtful) == 2, "the plan names files not reported to load"
    with pytest.raises(NotReady) as held:
        ensure.ensure_models(Context(yes=True), plan, comfy, skip=False, with_loaders=False)
    assert fetched["skip"] == set(doubtful)
    for name in doubtful:
        assert name in held.value.message
    assert "--allow-unverified" in held.value.fix and "smaller canvas" in held.value.fix
    fetched.clear()
    out = ensure.ensure_models(Context(yes=True), plan, comfy, skip=False, with_loaders=False, allow_unverified=True)
    assert fetched["skip"] == set() and out["reason"] is None


def test_interactive_question_per_doubtful_file_defaults_to_no(tmp_path, monkeypatch):
    from dataclasses import dataclass, field

    from h3kit.core.session import Session
    from h3kit.models import ensure

    @dataclass
    class Scripted(Session):
        answers: list = field(default_factory=list)
        asked: list = field(default_factory=list)

        @property
        def interactive(self) -> bool:
            return True

        def ask(self, question: str, default: str = "") -> str:
            self.asked.append(question)
            return self.answers.pop(0) if self.answers else default

    plan = _doubtful_plan()
    comfy = tmp_path / "ComfyUI"
    (comfy / "models").mkdir(parents=True)
    fetched = {}
    monkeypatch.setattr(ensure, "fetch", lambda ctx, plan, d, *, config=None, skip_names=frozenset(), folders=None:
                        fetched.setdefault("skip", set(skip_names)) or {"files": []})
    monkeypatch.setattr(ensure, "install_loader_pack", lambda ctx, pack, d, config=None: {"name": pack.name})
    doubtful = sorted(ensure.distrusted(plan, ensure.files_for_plan(plan)))
    files_in_order = [r.name for r in ensure.files_for_plan(plan) if r.name in doubtful]
    ctx = Scripted(answers=["y"] + [""] * (len(files_in_order) - 1) + ["y"])
    with pytest.raises(NotReady) if len(files_in_order) > 1 else contextlib.nullcontext():
        ensure.ensure_models(ctx, plan, comfy, skip=False, with_loaders=False)
    assert "Download it anyway? [y/N]" in ctx.asked[0]
    assert fetched["skip"] == set(files_in_order[1:])  # yes to the first, the default (no) to the others


def test_the_fast_preset_puts_its_lora_in_the_models_plan(run_cli, h3kit_home):
    """preset: fast uses lightx2v's 8-step 768p LoRA: models plan lists it (in the plan's disk total), with its
    catalog entry."""
    (h3kit_home / "config.yaml").write_text("overrides:\n  preset: fast\n")
    code, doc, err = _json(run_cli, "models", "plan", "--fingerprint", str(FP_4090))
    assert code == 0, err
    (entry,) = [f for f in doc["files"] if f["id"] == "h3-lora-turbo-768p"]
    assert entry["folder"] == "loras" and entry["name"] == "minimax_h3_fl2v_turbo_8step_v1.0_768p_comfyui_bf16.safetensors"
    assert entry["bytes"] == entry["exact_bytes"] == 1_956_193_000 and entry["sha256"] is None
    assert entry["loader"]["node"] == "LoraLoaderModelOnly"
    assert entry["urls"] == ["https://huggingface.co/lightx2v/Minimax-h3-Turbo/resolve/main/"
                             "minimax_h3_fl2v_turbo_8step_v1.0_768p_comfyui_bf16.safetensors"]
    code, plan, _ = _json(run_cli, "plan", "--fingerprint", str(FP_4090))
    assert plan["settings"]["lora"] == "h3-lora-turbo-768p" and doc["total_bytes"] == plan["estimates"]["disk_bytes"]


def test_the_fast_preset_fetches_its_lora_into_comfyuis_loras_folder(run_cli, small, comfy, h3kit_home):
    cfg = h3kit_home / "config.yaml"
    cfg.write_text(cfg.read_text() + "overrides:\n  preset: fast\n")
    code, got, err = _json(run_cli, "models", "fetch", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))
    assert code == 0, err
    dest = comfy / "models" / "loras" / "minimax_h3_fl2v_turbo_8step_v1.0_768p_comfyui_bf16.safetensors"
    assert dest.read_bytes() == small["h3-lora-turbo-768p"]
    assert str(dest) in {f["path"] for f in got["files"]}


def test_a_preset_without_a_lora_fetches_none(run_cli, h3kit_home):
    (h3kit_home / "config.yaml").write_text("overrides:\n  preset: quality\n")
    code, doc, err = _json(run_cli, "models", "plan", "--fingerprint", str(FP_4090))
    assert code == 0, err
    assert all(f["folder"] != "loras" for f in doc["files"])


def test_a_disk_that_fills_during_a_download_is_exit_3_naming_the_file_and_the_space(run_cli, small, server,
                                                                                    tmp_path, monkeypatch):
    """Issue 26: the free-space check passes, then a real 256 KiB tmpfs runs out mid-download:
    one sentence naming the .part and the space, exit 3, not a bug; the record names the weight it was writing."""
    from small_disk import small_tmpfs

    with small_tmpfs(tmp_path / "disk", "256k") as disk:
        comfy = disk / "ComfyUI"
        for sub in ("models/diffusion_models", "custom_nodes"):
            (comfy / sub).mkdir(parents=True)
        (comfy / "main.py").write_text("# ComfyUI stand-in\n")
        monkeypatch.setattr(store, "check_free_space", lambda *a, **k: None)  # the check before any byte passes
        code, out, err = run_cli("models", "fetch", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))
        assert code == 3 and "Traceback" not in err and "This is a bug" not in err, err
        line = next(x for x in err.splitlines() if x.startswith("error: "))
        assert "No space left on the disk that holds" in line and ".part" in line and " free" in line, line
        pending = [e for e in load_or_new(Context().locations.state_dir, comfy).entries if e.pending]
        assert pending and all(e.role == "model" and e.fetch and e.fetch["part"].endswith(".part") for e in pending)
        code, gone, _ = _json(run_cli, "models", "remove", "--comfyui", str(comfy))
        assert code == 0 and any(p.endswith(".part") for p in gone["removed"]) and not list(comfy.rglob("*.part"))


# -- install against every reference machine -------------------------------------------------------

_tree_spec = importlib.util.spec_from_file_location("comfy_tree", Path(__file__).parents[1] / "fixtures" / "comfyui" /
                                                    "comfy_tree.py")
comfy_tree = importlib.util.module_from_spec(_tree_spec)
_tree_spec.loader.exec_module(comfy_tree)
REFERENCE = sorted(FPS.glob("*.json"))


@pytest.mark.parametrize("fp", REFERENCE, ids=[p.stem for p in REFERENCE])
def test_install_yes_on_each_reference_machine_loads_everything_or_stops_before_any_download(
        fp, run_cli, small, tmp_path, monkeypatch):
    """`install --yes` with the machine's recorded fingerprint and the local model server: exit 0 with every
    planned file in ComfyUI's folders, or exit 3 with the plan's plain sentence and not one byte downloaded."""
    from h3kit.models import ensure

    monkeypatch.setattr(ensure, "install_loader_pack", lambda ctx, pack, d, config=None: {"name": pack.name})
    comfy = comfy_tree.make_comfyui(tmp_path / "ComfyUI")
    theirs = {p for p in (comfy / "models").rglob("*") if p.is_file()}  # the user's own files in the tree
    code, doc, err = _json(run_cli, "install", "--comfyui", str(comfy), "--fingerprint", str(fp), "--yes",
                           "--skip-calibrate")
    plan = _plan(fp)
    weights = [p for p in (comfy / "models").rglob("*") if p.is_file() and p not in theirs]
    if plan.fits and plan.blocked is None:
        assert code == 0, err
        got = {p.name for p in weights}
        assert {f.name for f in model_files.files_for_plan(plan)} <= got
    else:
        assert code == 3, err
        assert plan.blocked in doc["error"] and weights == []
        assert "no weights are downloaded" in " ".join(doc["details"]["notes"])


def test_install_yes_stops_before_any_download_when_the_plan_holds_a_file_not_known_to_load(
        run_cli, small, tmp_path, monkeypatch, h3kit_home):
    """The user forces a DiT nobody reported loading in ComfyUI (the full-model Q8_0 GGUF): the plan says so, and
    install decides from the plan before the models step -- not one file is fetched, not even the ones that load."""
    from h3kit.models import ensure

    monkeypatch.setattr(ensure, "install_loader_pack", lambda ctx, pack, d, config=None: {"name": pack.name})
    cfg = h3kit_home / "config.yaml"
    cfg.write_text(cfg.read_text() + "overrides:\n  dit_weights: h3-dit-full-q8_0\n")
    comfy = comfy_tree.make_comfyui(tmp_path / "ComfyUI")
    theirs = {p for p in (comfy / "models").rglob("*") if p.is_file()}
    code, doc, err = _json(run_cli, "install", "--comfyui", str(comfy), "--fingerprint", str(FP_4090), "--yes",
                           "--skip-calibrate")
    assert code == 3, err
    assert "MiniMax-H3-FL2VA-Q8_0.gguf" in doc["error"] and "no model file was downloaded" in doc["error"]
    assert "--allow-unverified" in doc["fix"]
    assert [p for p in (comfy / "models").rglob("*") if p.is_file() and p not in theirs] == []
    code, doc, err = _json(run_cli, "install", "--comfyui", str(comfy), "--fingerprint", str(FP_4090), "--yes",
                           "--skip-calibrate", "--allow-unverified")
    assert code == 0, err
    assert (comfy / "models" / "diffusion_models" / "MiniMax-H3-FL2VA-Q8_0.gguf").is_file()


def test_models_plan_and_doctor_name_h3kits_gguf_loader(run_cli, tmp_path):
    fp = FPS / "nvidia-rtx4060-8gb-16gb.json"
    code, doc, err = _json(run_cli, "models", "plan", "--fingerprint", str(fp))
    assert code == 0, err
    (dit,) = [f for f in doc["files"] if f["name"].endswith(".gguf")]
    assert dit["loader"]["node"] == "H3kitUnetLoaderGGUF" and dit["loader"]["pack"]["name"] == "ComfyUI-GGUF"
    assert dit["comfyui_loads"] == "with_h3kit_loader"
    assert any(w.startswith(f"{dit['name']} loads through h3kit's node H3kitUnetLoaderGGUF") for w in doc["warnings"])
    from h3kit.models import ensure

    comfy = tmp_path / "ComfyUI"
    (comfy / "models").mkdir(parents=True)
    found = {f["check"]: f for f in ensure.doctor_findings(_plan(fp), comfy)}
    row = found[f"loads in ComfyUI: {dit['name']}"]
    assert row["status"] == "ok" and "H3kitUnetLoaderGGUF" in row["message"] and row["fix"] is None
    assert found["loader pack ComfyUI-GGUF"]["status"] == "fail"  # h3kit's node reuses the pack's ops


# -- hosts that cannot be reached ------------------------------------------------------------

def test_weights_unreachable_names_each_missing_file_its_path_and_the_way_to_finish(small, comfy, h3kit_home):
    """The mirror is a closed port: every trusted file is skipped after one probe, the held ones are named
    too, and the error lists full paths and the two commands that finish the job, within seconds."""
    import time

    from h3kit.cli.context import Context

    (h3kit_home / "config.yaml").write_text(f"profile: auto\nmodels:\n  mirror: http://127.0.0.1:{closed_port()}\n")
    plan = Plan.from_json(json.loads((FIXTURES_PLANS / "cpu-only-16gb.json").read_text(encoding="utf-8")))
    start = time.monotonic()
    with pytest.raises(NotReady) as exc:
        models.ensure_models(Context(yes=True), plan, comfy, skip=False, with_loaders=False)
    assert time.monotonic() - start < 10
    err = exc.value
    held = set(models.ensure.distrusted(plan, models.files_for_plan(plan)))
    missing = [m for m in err.details["missing"]]
    assert missing and err.details["hosts"] == {"127.0.0.1": "the connection was refused"}
    for m in missing:
        assert m["name"] in err.message and m["path"] in err.fix and m["path"].startswith(str(comfy))
        assert not Path(m["path"]).exists() and not Path(m["path"] + ".part").exists()
    assert {m["name"] for m in missing} | held == {f.name for f in models.files_for_plan(plan)}
    assert f"h3kit models fetch --comfyui {comfy} --from DIR" in err.fix and "models.mirror" in err.fix
    # every file the plan holds back (none, now that plans hold only files that load) is named too
    assert all(name in err.message for name in held) and (not held or "--allow-unverified" in err.fix)


def test_models_fetch_with_no_reachable_host_exits_3(run_cli, small, comfy, h3kit_home):
    (h3kit_home / "config.yaml").write_text(f"profile: auto\nmodels:\n  mirror: http://127.0.0.1:{closed_port()}\n")
    code, doc, err = _json(run_cli, "models", "fetch", "--fingerprint", str(FP_4090), "--comfyui", str(comfy))
    assert code == 3 and "could not be downloaded" in doc["error"] and "--from DIR" in doc["fix"]
    assert "Traceback" not in err


def test_loader_pack_from_a_local_zip_or_folder_when_github_is_unreachable(small, comfy, tmp_path, monkeypatch):
    import shutil as sh
    import time

    pack_src, pack = _pack_repo(tmp_path)
    pack = dataclasses.replace(pack, git=f"http://127.0.0.1:{closed_port()}/city96/ComfyUI-GGUF")
    start = time.monotonic()
    with pytest.raises(NotReady) as exc:
        models.install_loader_pack(Context(), pack, comfy)
    assert time.monotonic() - start < 5 and "H3KIT_LOADER_SOURCES" in exc.value.fix
    assert "cannot be reached" in exc.value.message and not (comfy / "custom_nodes" / "ComfyUI-GGUF").exists()
    archive = sh.make_archive(str(tmp_path / "offline" / "ComfyUI-GGUF-main"), "zip", tmp_path, "pack-src")
    monkeypatch.setenv("H3KIT_LOADER_SOURCES", str(Path(archive).parent))  # a folder holding ComfyUI-GGUF-main.zip
    got = models.install_loader_pack(Context(), pack, comfy)
    assert got["installed"] and (comfy / "custom_nodes" / "ComfyUI-GGUF" / "__init__.py").is_file()
    plain = tmp_path / "checkouts" / "ComfyUI-GGUF"
    sh.copytree(pack_src, plain, ignore=sh.ignore_patterns(".git"))
    from h3kit.models.loader_pack import local_source

    assert local_source(pack, {"H3KIT_LOADER_SOURCES": str(plain)}) == plain  # the checkout itself
    second = tmp_path / "ComfyUI2"
    (second / "custom_nodes").mkdir(parents=True)
    monkeypatch.setenv("H3KIT_LOADER_SOURCES", str(plain))
    assert models.install_loader_pack(Context(), pack, second)["installed"]
    assert (second / "custom_nodes" / "ComfyUI-GGUF" / "__init__.py").is_file()


def test_an_unreachable_loader_pack_does_not_stop_the_weights(small, comfy, monkeypatch):
    """GitHub blocked: the pack's failure is named at the end, after every weight file has been fetched."""
    from h3kit.cli.context import Context
    from h3kit.models import ensure

    real = ensure.install_loader_pack
    dead = f"http://127.0.0.1:{closed_port()}/city96/ComfyUI-GGUF"
    monkeypatch.setattr(ensure, "install_loader_pack",
                        lambda ctx, pack, comfyui_dir, config=None: real(ctx, dataclasses.replace(pack, git=dead), comfyui_dir,
                                                                         config=config))
    plan = Plan.from_json(json.loads((FIXTURES_PLANS / "cpu-only-16gb.json").read_text(encoding="utf-8")))
    with pytest.raises(NotReady) as exc:
        models.ensure_models(Context(yes=True), plan, comfy, skip=False, with_loaders=True, allow_unverified=True)
    assert "ComfyUI-GGUF cannot be installed" in exc.value.message and "H3KIT_LOADER_SOURCES" in exc.value.fix
    assert all(f.dest(comfy).is_file() for f in models.files_for_plan(plan))


@pytest.mark.parametrize("name", ["apple-m1-16gb", "cpu-only-16gb"])
def test_the_16gb_reference_machines_install_with_the_text_encoder_streamed(run_cli, server, small, tmp_path, name,
                                                                           monkeypatch):
    """Issue 33: the two 16 GB reference plans fit, and `install --yes` fetches their files from the (local) mirror
    -- ComfyUI-GGUF, which the GGUF encoder needs, from a local copy as on a machine without GitHub -- and deploys
    workflows that load the q4_k_m text encoder through h3kit's streamed node."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("comfy_tree", FPS.parent / "comfyui" / "comfy_tree.py")
    tree = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tree)
    comfy = tree.make_comfyui(tmp_path / "Comfy UI")
    pack_src = tmp_path / "ComfyUI-GGUF"
    pack_src.mkdir()
    (pack_src / "__init__.py").write_text("NODE_CLASS_MAPPINGS = {}\n")
    (pack_src / "nodes.py").write_text("# ComfyUI-GGUF stand-in\n")
    monkeypatch.setenv("H3KIT_LOADER_SOURCES", str(pack_src))
    fp = FPS / f"{name}.json"
    plan = _plan(fp)
    assert plan.fits and plan.settings.text_encoder_streaming.enabled
    te = catalog_mod.load().weight(plan.settings.text_encoder_weights)
    assert te.format == "q4_k_m"
    code, out, err = run_cli("install", "--yes", "--skip-calibrate", "--comfyui", str(comfy), "--fingerprint", str(fp))
    assert code == 0, out + err
    assert (comfy / "models" / te.file.folder / te.file.name).read_bytes() == small[te.id]
    api = comfy / "custom_nodes" / "ComfyUI-h3kit" / "workflows_api"
    for wf in sorted(api.glob("*.json")):
        nodes = json.loads(wf.read_text(encoding="utf-8")).values()
        loaders = [n for n in nodes if n["class_type"] == "H3kitStreamedTextEncoderLoader"]
        assert [n["inputs"]["clip_name"] for n in loaders] == [te.file.name], wf.name
        assert not [n for n in nodes if n["class_type"] in ("CLIPLoader", "H3kitCLIPLoaderGGUF")], wf.name
