"""H3kitCalibrationReport: shows the latest calibration summary (logic in `summary`)."""

from __future__ import annotations

from ..h3kit_common.pack import PACK_DIR
from .summary import SUMMARY_FILE, summary_stamp, summary_text

SUMMARY_PATH = PACK_DIR / SUMMARY_FILE  # calibration writes it at the top of the pack


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
