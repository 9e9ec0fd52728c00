"""h3kit: fit very large video models (MiniMax H3 first) into ComfyUI on the machine you own.

The package is the installer side of h3kit. It runs in its own virtual
environment and never imports torch or numpy; code that needs them runs inside
ComfyUI's interpreter and talks to this side through files and JSON.

Layout: the folders follow the chain (fingerprint -> plan -> build -> deploy ->
calibrate), with the layers going one way. A module may import its own
package and any package listed above it here, never one below it, and the
import graph has no cycle (tests/repo/test_architecture.py checks both).

- `core/`: what every layer uses and that knows nothing of H3 or ComfyUI:
  errors and exit codes, folders (`H3KIT_HOME`), logging, subprocesses with
  timeouts, atomic writes and hashes, units for people, the `Session` a step
  reports through.
- `bundled/`: the one way in to the code that runs in ComfyUI's Python,
  which lives in `nodes/` at the top of the repository (the node pack as
  deployed, with its packages: the ctypes bridge `h3k_native`, the
  calibration runner, the safetensors header reader): `h3kit.bundled.<name>`
  imports those very files, from a checkout and from the wheel. That code
  imports only the standard library at import time and never `h3kit`, which
  is not installed there.
- `data/`: the files h3kit reads, parsed at the boundary into typed values:
  YAML with line numbers, the settings table, the model catalog and
  profiles, the user's `config.yaml`, the machine's `Fingerprint`.
- `fingerprint/`: the machine, probed. A front with per-OS back ends and
  pure parsers tested on recorded output; `schema` checks saved fingerprints
  and parses them into `data.fingerprint.Fingerprint`, as `this_machine()`
  does a fresh probe.
- `native/`: the C library in `payload/`: compiler search, the build of every
  SIMD variant and its self-test program; the kernels themselves are the
  bridge `nodes/h3k_native` (`h3kit.bundled.h3k_native`), re-exported as
  `h3kit.native`.
- `plan/`: a pure function from (fingerprint, catalog, config) to a plan:
  memory budgets, the search over files and canvases, the rationale prose,
  and the torch build that fits the hardware.
- `comfyui/`: one ComfyUI on disk: find it and its Python, inspect it, deploy
  and apply the node pack and launcher, the install record and the journal
  every write into a ComfyUI goes through, doctor's checks,
  uninstall, setting up or repairing a ComfyUI, and its HTTP API client.
- `models/`: the weight files a plan names: what to fetch, from where, into
  which folder, and the resumable, verified download.
- `calibrate/`: the calibration run: the job for the runner, estimates from
  its measurements, the decisions they lead to, the disk probe, and the
  report (one section model, rendered to Markdown and HTML).
- `steps/`: workflow steps: the order in which commands call the packages
  above (install's whole chain, apply, doctor's checks and fixes, uninstall,
  the first steps several commands share). Each takes a frozen options value
  (`steps/options.py`) and a `Session`; none sees argparse or prints.
- `cli/`: argparse, the terminal behind a `Session` (the only place that
  prints or reads the keyboard) and one module per command: parse, build
  the step's options, call one step, render its answer.
"""

__version__ = "0.1.0"
