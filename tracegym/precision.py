"""Whether bfloat16 autocast pays on this machine, and so the precision training actually uses.

bfloat16 autocast is faster only where the hardware computes bfloat16 natively: a CUDA GPU that
supports it, or a CPU with AVX512-BF16 or AMX. A CPU without them (AVX2 only) emulates it, many
times slower than float32 (docs/engineering.md, "tracegym"). There a requested bf16 falls back to
float32 with a warning, so a config may ask for bf16 on any machine.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

NATIVE_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # /proc/cpuinfo flags of native bfloat16


def cpu_flags(cpuinfo: str) -> set[str]:
    """The feature flags of a /proc/cpuinfo text (the union over its processors)."""
    fields = (line.partition(":") for line in cpuinfo.splitlines())
    return {flag for key, _, value in fields if key.strip() == "flags" for flag in value.split()}


@functools.cache
def native_bf16(device_type: str) -> bool:
    """Whether `device_type` ("cpu", "cuda", ...) computes bfloat16 natively; False where unknown
    (a CPU whose flags cannot be read, any other device)."""
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device_type != "cpu":
        return False
    try:
        return bool(cpu_flags(Path("/proc/cpuinfo").read_text()) & NATIVE_CPU_FLAGS)
    except OSError:
        return False


def use_bf16(requested: bool, device_type: str) -> bool:
    """`requested`, unless the device lacks native bfloat16: then False (warned once per device type)."""
    if requested and not native_bf16(device_type):
        _warn_emulated(device_type)
        return False
    return requested


@functools.cache
def _warn_emulated(device_type: str) -> None:
    logger.warning(
        "bf16 was asked for, but this %s has no native bfloat16 (on a CPU: AVX512-BF16 or AMX) and would "
        "emulate it ~25x slower than float32: training in float32",
        device_type,
    )
