"""The pack's profile file as one typed value (nodes/h3k_profile): the bytes deploy writes, what the nodes read."""

from __future__ import annotations

import json

from pack_support import pack_module

P = pack_module("h3k_profile")
SETTINGS = {"vae_tile_size": 384, "vae_tile_overlap": 0, "vae_temporal_tile": None, "max_frames": 73,
            "shard_size_bytes": 3 << 20, "preload_bytes": 1 << 30, "env": {"A": "1"}, "comfyui_args": ["--lowvram"],
            "streaming": {"enabled": True, "prefetch_blocks": 2, "page_cache": "bypass", "preload_bytes": 5 << 20},
            "name": "café"}


def test_the_bytes_are_the_document_deploy_always_wrote():
    """Sorted keys, two-space indent, UTF-8 as is, one newline: the same settings give the same bytes."""
    doc = {"schema": "h3kit.node-profile/1", "profile": "nvidia-16gb", "h3kit_version": "9.9", "settings": SETTINGS}
    written = P.PackProfile(profile="nvidia-16gb", h3kit_version="9.9", settings=SETTINGS).to_bytes()
    assert written == (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    assert P.PackProfile.from_json(json.loads(written)).to_bytes() == written


def test_deploy_writes_the_profile_through_the_pack_module():
    from h3kit import __version__
    from h3kit.bundled import h3k_profile
    from h3kit.comfyui import deploy

    assert deploy.PROFILE_FILE == h3k_profile.PROFILE_FILE and deploy.PROFILE_SCHEMA == h3k_profile.SCHEMA
    from h3kit.data.plan_doc import PlanSettings

    settings = PlanSettings.from_json({"vae_tile_size": 384, "max_frames": 73, "shard_size_bytes": 3 << 20})
    written = deploy.profile_document(settings, "cpu-only")
    assert json.loads(written) == {"schema": P.SCHEMA, "profile": "cpu-only", "h3kit_version": __version__,
                                   "settings": settings.to_json()}
    assert written == P.PackProfile(profile="cpu-only", h3kit_version=__version__,
                                    settings=settings.to_json()).to_bytes()


def test_the_nodes_read_the_keys_where_the_plan_puts_them():
    profile = P.PackProfile.from_json({"profile": "x", "settings": SETTINGS})
    assert profile.tiles() == P.VaeTiles(tile_size=384, overlap=0, temporal_tile=64, max_frames=73)
    assert profile.dit_loader() == P.DiTLoaderSettings(page_cache="bypass", preload_bytes=5 << 20,
                                                       shard_size_bytes=3 << 20, prefetch_blocks=2)
    shown = profile.shown_settings()
    assert shown["vae_temporal_tile"] == 64 and shown["vae_tile_overlap"] == 0 and shown["env"] == {"A": "1"}


def test_a_document_of_the_wrong_shape_reads_as_unset():
    for doc in (None, [], {"profile": 3, "settings": "all"}, {"settings": {"vae_tile_size": "big", "streaming": 1}}):
        profile = P.PackProfile.from_json(doc)
        assert profile.name == "none" and profile.tiles() == P.VaeTiles()
        assert profile.dit_loader() == P.DiTLoaderSettings()
