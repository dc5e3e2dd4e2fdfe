"""Native bfloat16 detection: where it is missing, a requested bf16 falls back to float32."""

from __future__ import annotations

import logging

from tracegym import precision

CPUINFO = """processor\t: 0
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16
processor\t: 1
flags\t\t: fpu sse2 avx2 amx_tile
"""


def test_cpu_flags_are_read_from_every_processor() -> None:
    assert {"avx2", "avx512_bf16", "amx_tile"} <= precision.cpu_flags(CPUINFO)
    assert precision.cpu_flags("model name : AMD EPYC\n") == set()
    assert not precision.cpu_flags(CPUINFO.replace("avx512_bf16", "")) & precision.NATIVE_CPU_FLAGS
    assert precision.native_bf16("mps") is False  # unknown devices: float32


def test_a_requested_bf16_is_kept_only_where_it_is_native_and_the_fallback_is_warned_once(monkeypatch, caplog) -> None:
    monkeypatch.setattr(precision, "native_bf16", lambda device_type: device_type == "cuda")
    precision._warn_emulated.cache_clear()
    with caplog.at_level(logging.WARNING, logger="tracegym.precision"):
        assert precision.use_bf16(True, "cuda") and not caplog.text
        assert not precision.use_bf16(True, "cpu") and not precision.use_bf16(True, "cpu")
    assert caplog.text.count("training in float32") == 1
    assert not precision.use_bf16(False, "cuda")
