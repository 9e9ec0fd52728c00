"""Keeping H3 working when ComfyUI changes: the state record, history, update and rollback.

The chain, by module:

- `state`: one inspection of a ComfyUI as found (folder, kind, Python, version, git commit/branch/local
  changes, torch and its build, launch flags, the custom node packs, the pip set), typed, made once per
  command and handed on.
- `history`: the states h3kit recorded for one ComfyUI (install, apply, update, rollback, calibrate), the
  working ones marked with their evidence, and the one operation in flight (the journal of a move).
- `drift`: what changed since the last working state and what it means for H3 on this machine (pure).
- `api_check`: every `comfy.*` name and call the node packs use, checked against a git ref of ComfyUI
  without checking it out (comfy-import-guard).
- `selftest`: the pack's nodes registered in that ComfyUI, every node of the installed workflows there, and
  every `comfy.*` name the pack's loaders reach resolved in ComfyUI's own interpreter.
- `move`: the journaled move of a git checkout to another commit and pip set, and back.
- `upgrade` (with `freeze`): `doctor --fix`'s one move to the first release with H3, and its undo.
"""
