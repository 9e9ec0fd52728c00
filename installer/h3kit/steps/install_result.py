"""What `h3kit install` did, typed: the `h3kit.install/1` document is made from it, once, at the end.

The steps fill one `InstallResult` as they go (the ComfyUI found, the deploy,
the verification, the models, the calibration) and the document printed by
--json, and attached to an error that stops the install half way, is
`to_json()` of it. The contract's keys (comfyui, node_dir, profile,
launchers, manifest, verified, report) are always there; the others appear
once their step ran.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SCHEMA = "h3kit.install/1"


@dataclass(frozen=True)
class ComfyFound:
    """The ComfyUI installed into, as inspected (h3kit.comfyui.locate)."""

    path: str
    python: str
    version: str | None
    layout: str
    found_by: str
    torch: str | None
    torch_build: str | None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class InstallResult:
    profile: str
    comfyui: ComfyFound | None = None
    node_dir: str | None = None
    library: str | None = None
    notes: list[str] = field(default_factory=list)
    launchers: list[str] = field(default_factory=list)
    manifest: str | None = None
    verified: bool = False
    report: str | None = None
    dry_run: bool = False
    launcher: dict | None = None  # deploy's launcher entry: path, args, dropped, detail, backup
    backed_up: list[str] | None = None
    nodes: list[str] | None = None  # the node classes the verification imported
    h3: dict | None = None  # h3kit.comfyui.h3_support: can this ComfyUI run MiniMax H3
    model_folders: dict | None = None
    models: dict | None = None
    app: dict | None = None  # an app (Desktop, Pinokio...) starts this ComfyUI: the flags to add there
    calibration_estimates: dict | None = None
    clip_time: dict | None = None  # the one clip-time figure of the last lines: seconds and source
    next_steps: list[str] | None = None
    warnings: list[str] | None = None  # only in the document of an install that found no ComfyUI
    plan_fits: bool | None = None  # likewise

    def to_json(self) -> dict:
        doc = {"schema": SCHEMA, "comfyui": self.comfyui.to_json() if self.comfyui else None,
               "node_dir": self.node_dir, "profile": self.profile, "launchers": list(self.launchers),
               "manifest": self.manifest, "verified": self.verified, "report": self.report}
        if self.comfyui is not None:
            doc["library"] = self.library
        doc["notes"] = self.notes
        if self.dry_run:
            doc["dry_run"] = True
        optional = ("launcher", "backed_up", "nodes", "h3", "model_folders", "models", "app",
                    "calibration_estimates", "clip_time", "next_steps", "warnings", "plan_fits")
        doc.update({k: getattr(self, k) for k in optional if getattr(self, k) is not None})
        return doc
