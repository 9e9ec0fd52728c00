"""The weight files a plan needs, in ComfyUI's model folders: plan, status, fetch, verify, remove.

The plan names weight variants by catalog id (`settings.dit_weights`,
`text_encoder_weights`, `vae_weights`; the audio VAE is the catalog's one).
Each variant's `file:` entry in profiles/models/*.yaml says what to fetch
and where it goes. The work, by module:

- `files`: from the plan to files under `<ComfyUI>/models/<folder>/`, and
  what of them is on disk (present, partial, missing, or the user's own);
- `store`: fetch the missing ones, verify them, remove exactly h3kit's
  (every file written is recorded in the install manifest, role "model");
- `download` (with `http` and `local`): one file onto disk, resumable and
  verified, from the network or a local folder;
- `loader_pack`: custom node packs some formats need;
- `ensure`: the install step and doctor's findings.

This front is what other layers import.
"""

from __future__ import annotations

from h3kit.models.ensure import doctor_findings, ensure_models
from h3kit.models.files import (
                                PACK_ROLE,
                                ROLE,
                                SCHEMA,
                                ModelFile,
                                file_state,
                                files_for_plan,
                                loader_packs,
                                plan_doc,
                                status_doc,
)
from h3kit.models.loader_pack import comfy_python, install_loader_pack
from h3kit.models.store import fetch, remove, verify

__all__ = ["PACK_ROLE", "ROLE", "SCHEMA", "ModelFile", "comfy_python", "doctor_findings", "ensure_models", "fetch",
           "file_state", "files_for_plan", "install_loader_pack", "loader_packs", "plan_doc", "remove", "status_doc",
           "verify"]
