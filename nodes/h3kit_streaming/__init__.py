"""Streaming from disk: the DiT's transformer blocks and the text encoder's layers read as they run.

Node modules: `dit_node` (H3kitStreamedDiTLoader), `te_node`
(H3kitStreamedTextEncoderLoader). The rest (nodes/README.md): `logic` and
`te_logic` (standard library only), `load` and `te_load` (building the
models), `blocks` (BlockStream, the per-block hooks), `read` (the three
readers), `compiler` (ComfyUI's malloc graph around the reads).
"""
