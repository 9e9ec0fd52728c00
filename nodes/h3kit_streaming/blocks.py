"""The streamed blocks at run time: read each one as the model reaches it, free it after.

`h3kit_streaming_load.load_streamed` builds the model with every block
parameter an empty placeholder and hands the blocks to a `BlockStream`. A
forward pre-hook on every block calls `BlockStream.before`, which gets that
block's weights into the parameters in the dtype ComfyUI chose for that
device (so a bf16 file computes in fp32 on --cpu, exactly as stock) and
applies the patcher's weight patches (LoRA) to them with ComfyUI's own
`patch_weight_to_device`; the forward hook (`after`) puts the placeholders
back. Two ways to read, by where the block computes (one class each in
`read`, picked in `BlockStream.reader_for`):

- on the CPU ("direct"): the native library reads each tensor straight into
  its buffer and widens bf16/fp16 to fp32 there, on every core, while the
  model waits; the next `prefetch_blocks` blocks are only handed to the OS's
  read-ahead, so the disk works during compute but no thread competes with
  it for the cores. (Converting in a thread beside the compute, as below,
  made a 2-core step 1.37x stock; reading in place on every core with the
  compute stopped, 1.12-1.23x: the README has the figures.)
- on the CPU with page_cache "bypass" ("uncached"; the plan asks for it
  when the streamed blocks are more than the page cache can keep next to
  the run, so every step would read them from the disk anyway): the C
  thread reads the next blocks past the page cache into the ring, keeping
  the disk busy through the compute, and each chunk is widened into the
  block's buffers as it arrives while the model waits.
- elsewhere ("ring"; past the page cache too with "bypass"): a C thread reads the next `prefetch_blocks` blocks
  into a ring of buffers and a helper thread copies the next block to the
  device while this one computes there. A GGUF file's quantized tensors
  always go this way, on the CPU too: their bytes are staged and
  dequantized (ComfyUI-GGUF's code, on the device) into the buffers by the
  helper thread while the block before computes.

The first `preload_bytes` worth of blocks keep their weights once read (per
device and patch set). Blocks not resident share buffers (every block has
the same layers): one set when reading direct, two in the ring way (one
computes while the helper fills the other), plus the ring itself in the
file's dtype.

The prefetch queue is kept in model order and round the end of the model to
the start of the next call; anything out of that order (an interrupted
call, a patched block that was skipped, a changed patch set) restarts the
streamer at the block asked for. A read that fails, or a file that changed
under us, becomes one StreamError naming the file and the block; the
streamer is then closed, so the next prompt starts clean.

torch and comfy are imported inside functions: the pack must import without them.
"""

from __future__ import annotations

import atexit
import logging
import time
import weakref

from .compiler import prepare as prepare_compiler
from .logic import (GGUF_QUANT_TYPES, StreamError, chunk_count, direct_types, is_quantized,
                                    merge_ranges, block_heads, head_change, stamp_change, stats_document,
                                    write_json_atomic)
from .read import DirectRead, RingRead, UncachedRead

LOG = logging.getLogger("h3kit")


def _dtype(name: str):
    """The torch dtype of a safetensors / GGUF tensor type; GGUF block types are bytes (uint8)."""
    import torch
    if name in GGUF_QUANT_TYPES:
        return torch.uint8
    return {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
            "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
            "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}[name]


class _Spec:
    """One streamed parameter: where it lives in the model and in the file."""

    __slots__ = ("block", "key", "module", "pname", "shape", "dtype", "file_dtype", "itemsize", "start", "end",
                 "direct", "placeholder", "types", "qtype", "within")

    def __init__(self, block, key, module, pname, param, entry, range_start, within=None):
        import torch
        self.block, self.key, self.module, self.pname = block, key, module, pname
        # the name inside its block (the same layer of every block shares a buffer); a DiT key is
        # diffusion_model.blocks.N.<within>
        self.within = within if within is not None else key.split(".", 3)[-1]
        self.shape, self.dtype = tuple(param.shape), param.dtype
        self.file_dtype = _dtype(entry["dtype"])
        self.itemsize = torch.empty(0, dtype=self.file_dtype).element_size()
        self.start, self.end = entry["start"], entry["end"]
        # a GGUF block type: its bytes are staged whole and dequantized into the buffer (never read in place)
        self.qtype = entry.get("type_id") if is_quantized(entry) else None
        # chunk edges fall on range_start + k * read_size (a whole MiB): element-aligned iff the tensor is
        self.direct = (self.start - range_start) % self.itemsize == 0 and self.qtype is None
        # (file type, buffer type) when the native library can read it straight into the buffer
        self.types = None if self.qtype is not None else direct_types(entry["dtype"], str(param.dtype))
        self.placeholder = torch.nn.Parameter(torch.empty(0, dtype=param.dtype), requires_grad=False)

    def put(self, tensor) -> None:
        import torch
        self.module._parameters[self.pname] = torch.nn.Parameter(tensor, requires_grad=False)

    def clear(self) -> None:
        self.module._parameters[self.pname] = self.placeholder


# Every live BlockStream, so that at interpreter exit a block still being converted in the helper thread
# is waited for: a daemon thread inside a torch copy when Python finalizes aborts the process
# ("terminate called without an active exception").
_STREAMS: "weakref.WeakSet[BlockStream]" = weakref.WeakSet()


@atexit.register
def _settle_all_at_exit() -> None:
    for stream in list(_STREAMS):
        try:
            stream._settle()
        except Exception:  # exiting anyway: never turn a clean exit into a traceback
            pass


class BlockStream:
    """The streamed blocks' state: the native streamer, the buffers, which blocks are held; the readers read."""

    def __init__(self, path, stamp, bridge, specs: dict, plan: dict, stats_path, dequantize=None,
                 page_cache: str = "use"):
        self.path, self.stamp, self.bridge = str(path), stamp, bridge
        self.dequantize = dequantize  # (bytes on the device, ggml type id, shape, dtype) -> tensor, for GGUF files
        self.specs, self.plan = specs, plan
        self.order = sorted(specs)
        self.resident = set(plan["resident"])
        self.ranges = {b: merge_ranges((s.start, s.end) for s in ss) for b, ss in specs.items()}
        self.heads = block_heads(path, self.ranges)  # with the stamp, what tells a file rewritten in place
        self.chunks = {b: chunk_count(r, plan["read_size"]) for b, r in self.ranges.items()}
        self.keys = {s.key for ss in specs.values() for s in ss}
        self.direct_ok = all(s.types for ss in specs.values() for s in ss)
        self.modules = {s.key.rsplit(".", 1)[0] for s in self.keys_specs()}
        self.stats_path = stats_path
        self.streamer = None
        self.mode = None  # which reader the streamer was last opened for: "direct" or "ring"
        self.direct, self.ring, self.uncached = DirectRead(self), RingRead(self), UncachedRead(self)
        self.ring.bypass = page_cache == "bypass"
        self.page_cache = page_cache  # the loader's input: "use" or "bypass" (the plan's, by the page cache's room)
        self.bypass_refused: str | None = None  # why this system could not read past the page cache
        self.loaded: dict[int, tuple] = {}  # resident block -> (device, patches uuid) it was read for
        self.live: set[int] = set()
        self.set_in_use = None  # which of the two buffer sets the computing block uses
        self.slots: dict = {}
        self.closed_totals = {"bytes_read": 0, "reader_wait_s": 0.0}
        self.patcher_ref = None
        self.start_counters()
        self._t_block = None
        # ComfyUI 0.35+'s malloc graph: reads and releases run outside it (h3kit_compiler)
        self.outside_graph, self.malloc_graph = prepare_compiler()
        _STREAMS.add(self)

    def keys_specs(self):
        return [s for ss in self.specs.values() for s in ss]

    # -- runs -------------------------------------------------------------------------------------------
    @staticmethod
    def _fresh() -> dict:
        return {"bytes_read": 0, "wait_s": 0.0, "reader_wait_s": 0.0, "compute_s": 0.0, "load_s": 0.0, "model_calls": 0,
                "blocks_read": 0, "timesteps": set(), "t0": time.perf_counter(), "finished": False}

    def start_counters(self) -> None:
        """Start a run's counters: the bytes and waits `end_run` reports are counted from here."""
        self.counters = self._fresh()
        self._base = self._totals()

    def begin_run(self, patcher) -> None:
        hooked = sorted(k for group in (patcher.hook_patches or {}).values() for k in group if k in self.keys)
        if hooked:
            raise StreamError(f"h3kit's streamed loader does not support weight hooks (hook LoRA / keyframed "
                              f"weights) on its streamed blocks ({hooked[0]}); use a plain LoRA loader, or "
                              "ComfyUI's Load Diffusion Model.")
        wrapped = sorted(k for k in patcher.weight_wrapper_patches if k in self.keys)
        if wrapped:
            raise StreamError(f"h3kit's streamed loader does not support weight wrappers on its streamed blocks "
                              f"({wrapped[0]}); use ComfyUI's Load Diffusion Model for this graph.")
        self.patcher_ref = weakref.ref(patcher)
        self.start_counters()

    def end_run(self) -> None:
        self.release_all()
        c = self.counters
        now = self._totals()
        c.update(bytes_read=now["bytes_read"] - self._base["bytes_read"],
                 reader_wait_s=now["reader_wait_s"] - self._base["reader_wait_s"],
                 run_s=time.perf_counter() - c["t0"], steps=len(c["timesteps"]), finished=True)
        self.write_stats()

    def write_stats(self) -> None:
        if self.stats_path is None:
            return
        try:
            doc = stats_document(self.path, len(self.order), self.counters, self.plan, self.mode,
                                 self.page_cache_state())
            write_json_atomic(self.stats_path, dict(doc, malloc_graph=self.malloc_graph))
        except OSError as exc:  # the figures are a report, never a reason to fail a prompt
            LOG.warning("h3kit: could not write %s: %s", self.stats_path, exc)

    def page_cache_state(self) -> str:
        """What the stats file says of the page cache: "used", "bypassed", or why it could not be bypassed."""
        if self.page_cache != "bypass" or self.mode not in ("ring", "uncached"):
            return "used"
        if self.streamer is not None and not self.streamer.bypassing and not self.bypass_refused:
            return "used (an uncached read failed: " + self.streamer.last_error() + ")"
        return "used (bypass refused: " + self.bypass_refused + ")" if self.bypass_refused else "bypassed"

    def model_call(self, args) -> None:
        self.counters["model_calls"] += 1
        try:
            self.counters["timesteps"].add(float(args[1].flatten()[0]))
        except Exception:
            pass

    # -- the native streamer ------------------------------------------------------------------------------
    def _totals(self) -> dict:
        out = dict(self.closed_totals)
        if self.streamer is not None:
            st = self.streamer.stats()
            out["bytes_read"] += st["bytes_read"]
            out["reader_wait_s"] += st["wait_seconds"]
        return out

    def close(self) -> None:
        self._settle()
        if self.streamer is not None:
            st = self.streamer.stats()
            self.closed_totals["bytes_read"] += st["bytes_read"]
            self.closed_totals["reader_wait_s"] += st["wait_seconds"]
            self.streamer.close()
        self.streamer = None
        for reader in (self.direct, self.ring, self.uncached):
            reader.forget()

    def open_for(self, reader, fresh: bool = False):
        """The streamer, (re)opened for `reader` when the other one had it, it is closed, or `fresh`.

        Closing settles the ring's helper first, so a reader never finds the other one's work in flight.
        """
        if fresh or self.streamer is None or self.mode != reader.name:
            self.close()
            size, depth = reader.open_args()
            try:
                self.streamer = self.bridge.Streamer(self.path, read_size=size, depth=depth)
            except Exception as exc:
                raise StreamError(f"h3kit streamed loader: cannot open {self.path} for streaming: {exc}") from exc
            self.mode = reader.name
            if reader.bypass:
                why = self.streamer.bypass_cache()
                if why and why != self.bypass_refused:
                    LOG.warning("h3kit streamed loader: reading %s through the page cache: %s", self.path, why)
                self.bypass_refused = why
        return self.streamer

    def reader_for(self, device):
        """The one place the read path is chosen: past the page cache on the CPU with page_cache "bypass";
        else in place on the CPU when every tensor allows it; else the ring."""
        if device.type == "cpu" and self.page_cache == "bypass":
            return self.uncached
        return self.direct if device.type == "cpu" and self.direct_ok else self.ring

    # -- the hooks -------------------------------------------------------------------------------------
    def _patcher(self):
        return self.patcher_ref() if self.patcher_ref is not None else None

    def before(self, block: int, args) -> None:
        import torch
        t0 = time.perf_counter()
        x = args[0] if args else None
        device = x.device if torch.is_tensor(x) else torch.device("cpu")
        try:
            with self.outside_graph():
                self._ensure(block, device)
        except StreamError:
            self.close()
            raise
        except Exception as exc:
            self.close()
            if type(exc).__name__ == "InterruptProcessingException":
                raise
            raise StreamError(f"h3kit streamed loader: reading block {block} of {self.path} failed: {exc}. "
                              "If the file was cut short or changed, restore or re-download it and queue the "
                              "prompt again.") from exc
        self.counters["load_s"] += time.perf_counter() - t0
        self._t_block = time.perf_counter()

    def after(self, block: int) -> None:
        if self._t_block is not None:
            self.counters["compute_s"] += time.perf_counter() - self._t_block
            self._t_block = None
        if block not in self.resident:
            with self.outside_graph():
                self._release(block)

    def _ensure(self, block: int, device) -> None:
        problem = (stamp_change(self.path, self.stamp, block)
                   or head_change(self.path, self.ranges, self.heads, block))
        if problem:
            raise StreamError("h3kit streamed loader: " + problem)
        for other in list(self.live):
            if other != block:
                self._release(other)
        patcher = self._patcher()
        uuid = getattr(patcher, "patches_uuid", None)
        ready = {b for b, held in self.loaded.items() if held == (device, uuid)}
        reader = self.reader_for(device)
        if block in ready:
            reader.top_up(block, ready, device)
            return
        if block in self.loaded and self.loaded[block][1] == uuid:  # same weights, another device: move them
            for s in self.specs[block]:
                s.put(s.module._parameters[s.pname].data.to(device))
            self.loaded[block] = (device, uuid)
            reader.top_up(block, ready | {block}, device)
            return
        self.loaded.pop(block, None)
        keep = block in self.resident
        skip = ready | ({block} if keep else set())
        t_wait = time.perf_counter()  # from here until the weights are there, the model waits for them
        dest, used = reader.fetch(block, device, keep, skip)
        self.counters["wait_s"] += time.perf_counter() - t_wait
        for s in self.specs[block]:
            s.put(dest[id(s)])
        self.set_in_use = used
        self._patch(block, patcher, device)
        self.counters["blocks_read"] += 1
        if block in self.resident:
            self.loaded[block] = (device, uuid)
        else:
            self.live.add(block)
        reader.ahead(device, skip)

    # -- the buffers, the patches --------------------------------------------------------------------------
    def _settle(self) -> None:
        """Wait for whatever a reader runs beside the model (the ring's helper thread)."""
        self.ring.settle()
        self.direct.settle()
        self.uncached.settle()

    def buffer(self, s: _Spec, device, keep: bool, which):
        """Where a reader puts `s`'s weights: its own tensor when resident, else the shared slot of set `which`."""
        import torch
        if keep:
            return torch.empty(s.shape, dtype=s.dtype, device=device)
        # the same layer of every block shares a buffer in each of the two sets (one computes, one fills)
        slot = (which, s.within, s.shape, s.dtype, str(device))
        if slot not in self.slots:
            self.slots[slot] = torch.empty(s.shape, dtype=s.dtype, device=device)
        return self.slots[slot]

    def _patch(self, block: int, patcher, device) -> None:
        if patcher is None or not patcher.patches:
            return
        import comfy.model_patcher
        base = comfy.model_patcher.ModelPatcher.patch_weight_to_device
        for s in self.specs[block]:
            if s.key in patcher.patches:
                s.put(base(patcher, s.key, device_to=device, return_weight=True))

    def _release(self, block: int) -> None:
        for s in self.specs[block]:
            s.clear()
        self.live.discard(block)

    def drop_buffers(self) -> None:
        """Free the two buffer sets and a block converted ahead; the next block read makes them again."""
        self._settle()
        self.release_all()
        self.slots.clear()
        self.set_in_use = None

    def release_all(self) -> None:
        for b in list(self.live):
            self._release(b)
