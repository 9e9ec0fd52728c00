"""What the node modules of the pack share, so that no node module imports another.

- `pack`: the pack's folder (where h3kit_profile.json and the stats files
  lie) and the one reader of the profile file every node uses;
- `files`: the model files a loader lists (ComfyUI's lists leave `.gguf`
  out) and the stamp that tells a loader's IS_CHANGED a file was replaced.
"""
