"""The machine's fingerprint as a typed value: `Fingerprint.from_json(doc)` and back with `to_json()`.

The document (`h3kit.fingerprint/1`, written by h3kit.fingerprint.collect
and saved with `h3kit fingerprint --json`) is read once where it enters -- a
saved file, or a probe that just ran -- and every layer after that reads
attributes. The questions several layers ask (which GPUs can compute, which
one ComfyUI uses, on what backend) are answered here once.

Parsing is tolerant the way the old dict readers were: a missing key takes
the type's default, and a part that is not the shape the schema says (no
list where one belongs, say) reads as empty. Nothing is lost on the way
through: every part keeps its keys in document order and the keys it does
not model (probe details such as `gfx_target`, `metal`, `notes`) verbatim,
so `to_json()` returns the document it was given, key for key, and a saved
fingerprint survives a round trip byte for byte.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, ClassVar

SCHEMA = "h3kit.fingerprint/1"

# (typed value, whether it is the whole of what the document held)
_Parsed = tuple[Any, bool]


@dataclass(frozen=True)
class _Part:
    """What every part of the document shares: its key order, and what the type does not model."""

    extra: Mapping[str, Any] = field(default_factory=dict, kw_only=True, repr=False)
    layout: tuple[str, ...] = field(default=(), kw_only=True, repr=False, compare=False)

    # key -> parser for the keys that hold parts or lists rather than plain values
    _parsers: ClassVar[dict[str, Callable[[Any], _Parsed]]] = {}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]):
        modelled = {f.name for f in fields(cls)} - {"extra", "layout"}
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in doc.items():
            if key not in modelled:
                extra[key] = copy.deepcopy(value)  # the value owns its parts: later edits to `doc` do not reach it
                continue
            parse = cls._parsers.get(key)
            if parse is None:
                values[key] = value
                continue
            values[key], whole = parse(value)
            if not whole:  # read what could be read; write back what was there
                extra[key] = copy.deepcopy(value)
        return cls(**values, extra=MappingProxyType(extra), layout=tuple(doc))

    def to_json(self) -> dict:
        """The document this was read from (a fresh copy: changing it changes nothing here)."""
        return {key: copy.deepcopy(self.extra[key]) if key in self.extra else _dump(getattr(self, key))
                for key in self.layout}


def _dump(value: Any) -> Any:
    if isinstance(value, _Part):
        return value.to_json()
    if isinstance(value, tuple):
        return [_dump(v) for v in value]
    return value


def _part(cls: type[_Part]) -> Callable[[Any], _Parsed]:
    def parse(value: Any) -> _Parsed:
        return (cls.from_json(value), True) if isinstance(value, Mapping) else (cls(), False)
    return parse


def _parts(cls: type[_Part]) -> Callable[[Any], _Parsed]:
    def parse(value: Any) -> _Parsed:
        if not isinstance(value, list):
            return (), False
        items = tuple(cls.from_json(v) for v in value if isinstance(v, Mapping))
        return items, len(items) == len(value)
    return parse


def _strings(value: Any) -> _Parsed:
    return (tuple(value), True) if isinstance(value, list) else ((), False)


@dataclass(frozen=True)
class Os(_Part):
    system: str = ""  # linux | darwin | windows
    release: str = ""
    wsl: bool = False


@dataclass(frozen=True)
class Cpu(_Part):
    model: str | None = None
    physical_cores: int | None = None
    logical_cores: int | None = None
    flags: tuple[str, ...] = ()  # lower case: avx2, fma, avx512f, neon, ...

    _parsers: ClassVar = {"flags": _strings}


@dataclass(frozen=True)
class Memory(_Part):
    total_bytes: int | None = None
    available_bytes: int | None = None
    swap_total_bytes: int | None = None


@dataclass(frozen=True)
class Disk(_Part):
    path: str = ""
    total_bytes: int = 0
    free_bytes: int = 0
    kind: str = "unknown"  # ssd | hdd | unknown


@dataclass(frozen=True)
class Gpu(_Part):
    vendor: str | None = None  # nvidia | amd | intel | apple
    name: str | None = None
    memory_total_bytes: int = 0  # on Apple: the share of unified memory Metal lets the GPU use
    memory_free_bytes: int | None = None
    unified_memory: bool = False
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    compute_capability: str | None = None
    backend: str | None = None  # cuda | rocm | xpu | mps | directml; None: nothing computes on it

    def detail(self, key: str) -> Any:
        """A probe's extra fact about this card (`gfx_target`, `unified_memory_total_bytes`, ...), or None."""
        return self.extra.get(key)


@dataclass(frozen=True)
class Compiler(_Part):
    name: str = ""
    path: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class ProbeRecord(_Part):
    name: str = ""
    status: str = ""  # ok | missing | timeout | error
    seconds: float = 0.0
    detail: str | None = None


@dataclass(frozen=True)
class Fingerprint(_Part):
    schema: str = SCHEMA
    os: Os = field(default_factory=Os)
    arch: str = ""  # x86_64 | arm64 (the machine's; under Rosetta the Python's differs)
    rosetta: bool = False
    cpu: Cpu = field(default_factory=Cpu)
    memory: Memory = field(default_factory=Memory)
    disks: tuple[Disk, ...] = ()
    gpus: tuple[Gpu, ...] = ()  # largest first when probed
    compilers: tuple[Compiler, ...] = ()
    probes: tuple[ProbeRecord, ...] = ()

    _parsers: ClassVar = {"os": _part(Os), "cpu": _part(Cpu), "memory": _part(Memory), "disks": _parts(Disk),
                          "gpus": _parts(Gpu), "compilers": _parts(Compiler), "probes": _parts(ProbeRecord)}

    @property
    def system(self) -> str:
        """linux | darwin | windows; a document without one is read as Linux."""
        return self.os.system or "linux"

    @property
    def ram_total_bytes(self) -> int:
        return int(self.memory.total_bytes or 0)

    @property
    def usable_gpus(self) -> tuple[Gpu, ...]:
        """The GPUs something computes on (a backend is known), in document order."""
        return tuple(g for g in self.gpus if g.backend)

    @property
    def primary_gpu(self) -> Gpu | None:
        """The GPU ComfyUI runs on: the usable one with most memory (the first of equals); None on a CPU."""
        return biggest(self.usable_gpus)

    @property
    def backend(self) -> str:
        """What ComfyUI computes on here: cuda | rocm | xpu | mps | directml, or cpu without a usable GPU."""
        gpu = self.primary_gpu
        return str(gpu.backend) if gpu is not None else "cpu"

    @property
    def unified_memory(self) -> bool:
        """Does the primary GPU share the machine's RAM (Apple)?"""
        gpu = self.primary_gpu
        return bool(gpu is not None and gpu.unified_memory)

    def gpus_of(self, vendor: str) -> tuple[Gpu, ...]:
        """Every GPU of `vendor` (nvidia | amd | intel | apple), usable or not, in document order."""
        return tuple(g for g in self.gpus if g.vendor == vendor)


def biggest(gpus: tuple[Gpu, ...] | list[Gpu]) -> Gpu | None:
    """The card with most memory (the first of equals); None for no cards."""
    return max(gpus, key=lambda g: g.memory_total_bytes or 0) if gpus else None
