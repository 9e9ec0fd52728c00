"""The pack's folder and its profile file: one reader for every node, re-reading the file when it changes."""

from __future__ import annotations

from pathlib import Path

from ..h3k_profile import PROFILE_FILE, ProfileStore

PACK_DIR = Path(__file__).resolve().parent.parent  # custom_nodes/ComfyUI-h3kit, as deploy lays it out
SUMMARY_FILE = "h3kit_calibration.json"  # what `h3kit calibrate` leaves in the pack (the report node and the panel)
PROFILE = ProfileStore(PACK_DIR / PROFILE_FILE)


def profile_stamp():
    """A node's IS_CHANGED while its outputs follow the profile: changes when the file does."""
    PROFILE.current()
    return PROFILE.stamp()
