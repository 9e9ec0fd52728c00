"""The two ways a `BlockStream` (`blocks`) gets a block's weights, one class each.

- `DirectRead` (the CPU): the native library reads each tensor straight
  into its compute buffer, widening bf16/fp16 to fp32 there, on every core,
  while the model waits; the next blocks are only handed to the OS's
  read-ahead, so no thread competes with the compute for the cores.
- `RingRead` (a GPU or MPS device, and a GGUF file's quantized blocks on the
  CPU too): a C thread reads the next blocks into a ring of buffers and a
  helper thread converts the next block into the other buffer set while this
  one computes. A GGUF block type is staged whole and dequantized per use
  (ComfyUI-GGUF's torch code, on the device it computes on).
- `UncachedRead` (the CPU, a file larger than the page cache can keep next
  to the run: page_cache "bypass"): the ring's C thread reads past the page
  cache, so the disk works through the next blocks the whole time, and the
  main thread widens each chunk into the compute buffers as it arrives,
  while the model waits (no thread beside the compute). Through the cache
  such a file costs a copy out of it and the kernel's reclaim of the pages
  it evicts, on the cores the compute needs, and every pass misses anyway.
  A GPU's ring bypasses the cache too with "bypass".

Both answer the same calls, and `BlockStream.reader_for` is the one place
that picks one for a device:

- `name`: the stats file's read_mode; `buffer_sets`, `ring_bytes()`: what
  it holds besides the resident blocks (the loader's memory estimate);
- `open_args()`: the native streamer's read size and depth for it;
- `top_up(block, skip, device)`: `block` is there: ask for the ones after;
- `fetch(block, device, keep, skip)` -> ({id(spec): tensor}, buffer set):
  the block's weights, the model waiting;
- `ahead(device, skip)`: what to start while the block computes;
- `settle()` / `forget()`: wait for its own work in flight / drop what it
  asked of a streamer that was closed.

The streamer itself, the buffers and the block bookkeeping stay in
BlockStream. torch is imported inside functions: the pack imports without it.
"""

from __future__ import annotations

import threading
from collections import deque

from .logic import MIB, StreamError, pieces, upcoming


class DirectRead:
    """Read in place on every core, the disk told what comes next."""

    name = "direct"
    buffer_sets = 1
    bypass = False  # reads in place through the page cache: what this reader is for

    def __init__(self, stream):
        self.stream = stream
        self.advised: set[int] = set()  # blocks handed to the OS's read-ahead and not read since

    def ring_bytes(self) -> int:
        return MIB  # direct reads never touch the ring: the smallest one the library allows

    def open_args(self) -> tuple[int, int]:
        return MIB, 1

    def settle(self) -> None:
        pass  # nothing runs beside the model

    def forget(self) -> None:
        self.advised.clear()

    def top_up(self, block: int, skip: set, device) -> None:
        st = self.stream
        streamer = st.open_for(self)
        self.advised.discard(block)
        for b in upcoming(block, st.order, skip, st.plan["prefetch_blocks"]):
            if b not in self.advised:
                for start, end in st.ranges[b]:
                    streamer.advise(start, end - start)
                self.advised.add(b)

    def fetch(self, block: int, device, keep: bool, skip: set) -> tuple[dict, int | None]:
        import torch
        st = self.stream
        self.top_up(block, skip, device)
        dest = {id(s): st.buffer(s, device, keep, 0) for s in st.specs[block]}
        reads = [(s.start, s.end - s.start, t.data_ptr(), t.numel() * t.element_size(), *s.types)
                 for s in st.specs[block] for t in (dest[id(s)],)]
        st.streamer.read_many(reads, torch.get_num_threads())  # the cores ComfyUI's own compute uses
        return dest, None if keep else 0

    def ahead(self, device, skip: set) -> None:
        pass  # the next blocks were advised in fetch


class RingRead:
    """The C thread's ring, and one block converted ahead in a helper thread while the one before computes."""

    name = "ring"
    buffer_sets = 2  # one computes while the helper fills the other
    bypass = False  # the ring's reads go past the page cache (BlockStream sets it from the loader's page_cache)

    def __init__(self, stream):
        self.stream = stream
        self.queue: deque = deque()  # blocks submitted to the streamer, in order, not yet consumed
        self.job: dict | None = None  # the block being converted by the helper thread

    def ring_bytes(self) -> int:
        return self.stream.plan["ring_bytes"]

    def open_args(self) -> tuple[int, int]:
        return self.stream.plan["read_size"], self.stream.plan["depth"]

    def settle(self) -> None:
        """Wait for the block being converted ahead and drop it (its chunks are consumed, its buffers free)."""
        job, self.job = self.job, None
        if job is not None:
            job["done"].wait()

    def forget(self) -> None:
        self.queue.clear()

    def _submit(self, block: int) -> None:
        for start, end in self.stream.ranges[block]:
            self.stream.streamer.submit(start, end - start)
        self.queue.append(block)

    def top_up(self, block: int, skip: set, device, reading: bool = False) -> None:
        """Queue the blocks after `block` (and `block` itself when `reading`) unless the queue is out of order."""
        st = self.stream
        st.open_for(self)
        want = ([block] if reading else []) + upcoming(block, st.order, skip, st.plan["prefetch_blocks"])
        have = ([self.job["block"]] if self.job else []) + list(self.queue)
        if have == want[:len(have)]:
            for b in want[len(have):]:
                self._submit(b)

    def fetch(self, block: int, device, keep: bool, skip: set) -> tuple[dict, int | None]:
        job = self.job
        if job is not None and (job["block"], job["device"], job["keep"]) == (block, device, keep):
            job["done"].wait()
            self.job = None
            if job["error"] is not None:
                raise job["error"]
            self.top_up(block, skip, device)
            return job["dest"], job["set"]
        self.settle()
        st = self.stream
        if st.streamer is None or st.mode != self.name or not self.queue or self.queue[0] != block:
            st.open_for(self, fresh=True)
            self._submit(block)
        self.top_up(block, skip, device, reading=True)
        used = None if keep else 0
        dest = self._read(block, device, keep, used)
        self.queue.popleft()
        return dest, used

    def ahead(self, device, skip: set) -> None:
        """Start converting the next queued block into the other buffer set.

        The C thread has already read it into the ring (prefetch); what is left is the copy into the compute
        dtype, which this thread does while the model computes the current block (torch releases the GIL).
        Only this thread and the main thread's reads touch the streamer, never both at once: the main thread
        waits for it (`settle`) before it reads, restarts or closes.
        """
        st = self.stream
        if self.job is not None or not self.queue or self.queue[0] in skip:
            return
        block = self.queue.popleft()
        keep = block in st.resident
        job = {"block": block, "device": device, "keep": keep, "set": None if keep else 1 - (st.set_in_use or 0),
               "done": threading.Event(), "error": None, "dest": None}

        import torch
        inference = torch.is_inference_mode_enabled()  # thread-local: the sampler's mode must hold in the helper too

        def run():
            try:
                with torch.inference_mode(inference), torch.no_grad():
                    job["dest"] = self._read(block, device, keep, job["set"])
            except BaseException as exc:  # handed to the main thread when it needs the block
                job["error"] = exc
            finally:
                job["done"].set()

        self.job = job
        threading.Thread(target=run, name=f"h3kit-block-{block}", daemon=True).start()

    def _read(self, block: int, device, keep: bool, which) -> dict:
        """The block's chunks from the ring, converted into its parameters' dtype: {id(spec): tensor}."""
        import torch
        st = self.stream
        specs = st.specs[block]
        dest = {id(s): st.buffer(s, device, keep, which) for s in specs}
        staged: dict = {}
        spans = [(s, s.start, s.end) for s in specs]
        for _ in range(st.chunks[block]):
            item = st.streamer.next()
            if item is None:
                raise StreamError(f"h3kit streamed loader: the streamer of {st.path} ran dry before block {block}.")
            off, view = item
            raw = torch.frombuffer(view, dtype=torch.uint8) if len(view) else None
            for s, a, b in pieces(off, len(view), spans):
                src = raw[a - off:b - off]
                if s.direct:
                    lo, hi = (a - s.start) // s.itemsize, (b - s.start) // s.itemsize
                    dest[id(s)].view(-1)[lo:hi].copy_(src.view(s.file_dtype))
                else:
                    buf = staged.setdefault(id(s), torch.empty(s.end - s.start, dtype=torch.uint8))
                    buf[a - s.start:b - s.start].copy_(src)
            del raw, view
        for s in specs:
            if id(s) in staged:
                raw = staged.pop(id(s))
                if s.qtype is not None:  # dequantized where it computes (ComfyUI-GGUF's torch code runs on the GPU)
                    dest[id(s)].copy_(st.dequantize(raw.to(dest[id(s)].device), s.qtype, s.shape, s.dtype))
                else:
                    dest[id(s)].view(-1).copy_(raw.view(s.file_dtype))
        return dest


class UncachedRead(RingRead):
    """The ring read past the page cache, each chunk widened on the main thread as it arrives (the CPU)."""

    name = "uncached"
    buffer_sets = 1  # the model waits while its block is widened: nothing fills a second set
    bypass = True

    def ahead(self, device, skip: set) -> None:
        pass  # converting beside the compute takes its cores; the disk is what works ahead, in the C thread
