"""h3kit: fit very large video models (MiniMax H3 first) into ComfyUI on the machine you own.

The package is the installer side of h3kit. It runs in its own virtual
environment and never imports torch or numpy; code that needs them runs inside
ComfyUI's interpreter and talks to this side through files and JSON.
"""

__version__ = "0.1.0"
