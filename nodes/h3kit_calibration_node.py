"""H3kitCalibrationReport: shows the latest calibration summary (logic in h3kit_calibration)."""

from __future__ import annotations

from pathlib import Path

from .h3kit_calibration import SUMMARY_FILE, summary_stamp, summary_text

SUMMARY_PATH = Path(__file__).resolve().parent / SUMMARY_FILE


class H3kitCalibrationReport:
    """The latest `h3kit calibrate` summary for this machine, as text."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    RETURN_TYPES = ("STRING",)
    RETURN_NAMES = ("summary",)
    FUNCTION = "show"
    CATEGORY = "h3kit"
    DESCRIPTION = "Shows what the last 'h3kit calibrate' measured and decided; re-reads it when it changes."

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return str(summary_stamp(SUMMARY_PATH))

    def show(self):
        return (summary_text(SUMMARY_PATH),)


NODE_CLASS_MAPPINGS = {"H3kitCalibrationReport": H3kitCalibrationReport}
NODE_DISPLAY_NAME_MAPPINGS = {"H3kitCalibrationReport": "h3kit Calibration Report"}
