"""Review flags: facts about a passing result worth a human look; never part of the verdict."""

from __future__ import annotations

from headroom.verify.compare import Check

MEMORY_FLAG_RATIO = 1.05
LARGE_SPEEDUP = 10.0

# Peak DRAM bandwidth (bytes/s) for the roofline flag, by device-name substring (datasheets).
PEAK_BANDWIDTH = {
    "H200": 4.8e12,
    "H100 NVL": 3.9e12,
    "H100": 3.35e12,
    "H800": 3.35e12,
    "GH200": 4.0e12,
    "B200": 8.0e12,
    "B100": 8.0e12,
    "A100": 2.04e12,
    "A800": 2.04e12,
    "L40S": 0.864e12,
    "L4": 0.3e12,
    "A10": 0.6e12,
    "V100": 0.9e12,
}


def peak_bandwidth(device_name: str) -> float | None:
    for key in sorted(PEAK_BANDWIDTH, key=len, reverse=True):
        if key in device_name:
            return PEAK_BANDWIDTH[key]
    return None


def review_flags(
    speedup: float | None,
    memory: dict,
    memory_ratio: float | None,
    candidate_ms: float | None,
    io_bytes: int | None,
    device_name: str,
    cuda: bool,
) -> tuple[list[Check], dict]:
    """``memory`` (needs > 1.05x the reference's peak), ``large_speedup`` (> 10x), ``roofline`` (faster than
    moving its inputs and outputs once at the device's peak bandwidth). Returns (flags, info)."""
    flags: list[Check] = []
    info: dict = {}
    rp = memory.get("reference_peak_bytes") or 0
    cp = memory.get("candidate_peak_bytes") or 0
    slack = (1 << 20) if cuda else (8 << 20)
    if memory_ratio and memory_ratio > MEMORY_FLAG_RATIO and cp - rp > slack:
        flags.append(
            Check(
                "memory",
                False,
                f"the candidate needs {memory_ratio:.2f}x the reference's peak memory "
                f"({(cp - rp) / 2**20:.1f} MiB more)",
            )
        )
    bw = peak_bandwidth(device_name) if cuda else None
    if bw and io_bytes and candidate_ms:
        t_min = io_bytes / bw * 1e3
        info["roofline_min_ms"] = t_min
        if candidate_ms < t_min:
            flags.append(
                Check(
                    "roofline",
                    False,
                    f"{candidate_ms * 1e3:.1f} us is below the time to move the inputs "
                    f"and outputs once ({io_bytes / 2**20:.1f} MiB at "
                    f"{bw / 1e12:.2f} TB/s = {t_min * 1e3:.1f} us)",
                )
            )
    if speedup and speedup > LARGE_SPEEDUP:
        flags.append(Check("large_speedup", False, f"{speedup:.1f}x over the TF32 reference: review"))
    return flags, info
