"""How to verify (``VerifyOptions``): device, time limits, rounds, CPU scaling, when to call a result."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from headroom.errors import UserError
from headroom.verify.timing import Policy

CPU_BUDGET_BYTES = 1 << 30  # harness peak estimate a CPU run is scaled to
CPU_BUDGET_FLOPS = 2e9  # matmul/convolution FLOPs per forward a CPU run is scaled to
FILE_CAP_BYTES = 2 << 30  # largest file a verify child (or a compiler it runs) may write


@dataclass
class VerifyOptions:
    """``None`` means the device's default."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    rounds: int | None = None  # minimum interleaved timing rounds (default 6); more run until the interval is tight
    iters: int | None = None  # deprecated alias of ``rounds``
    timeout: float = 300.0  # seconds a candidate child may work (harness-side work does not count)
    build_timeout: float = 600.0  # seconds for building a candidate's extensions (outside ``timeout``)
    reference_timeout: float = 900.0
    vs_compile: bool = False
    graphs: bool = False  # capture one call of each model in a CUDA graph, and time on the gated clock (GPU only)
    seed: int | None = None  # fixes every seed (reproduce a run; such a run is predictable by design)
    env: dict[str, str] = field(default_factory=dict)  # set in every process before the problem is imported
    threads: int | None = None  # torch CPU threads in the children
    keep_logs: bool = False
    log_dir: str | None = None
    # RLIMIT_FSIZE: no file the child or a compiler it starts writes (its log included) grows past
    # this. Big enough for torch.compile's precompiled header (156 MB on torch 2.10) and a linked
    # extension; a 32 MB cap failed an honest torch.compile on a machine without inductor's cache.
    file_cap_bytes: int = FILE_CAP_BYTES
    scale: str = "auto"  # auto: scale shapes to fit on a CPU | full: as written
    cpu_budget_bytes: int = CPU_BUDGET_BYTES
    cpu_budget_flops: float = CPU_BUDGET_FLOPS
    policy: Policy = field(default_factory=Policy)
    build_dir: str | None = None  # TORCH_EXTENSIONS_DIR / TRITON_CACHE_DIR root of this run (None: temporary)

    def resolved_device(self) -> str:
        import torch

        dev = self.device
        if dev == "auto":
            dev = "cuda" if torch.cuda.is_available() else "cpu"
        if dev != "cpu" and not (dev == "cuda" or (dev.startswith("cuda:") and dev[5:].isdigit())):
            raise UserError(f"--device {self.device}: expected auto, cpu, cuda or cuda:N")
        if dev.startswith("cuda"):
            if not torch.cuda.is_available():
                raise UserError(f"--device {self.device}: CUDA is not available on this machine")
            if dev == "cuda":
                dev = f"cuda:{torch.cuda.current_device()}"
            if int(dev[5:]) >= torch.cuda.device_count():
                raise UserError(f"--device {self.device}: this machine has {torch.cuda.device_count()} GPU(s)")
        if self.graphs and dev == "cpu":
            raise UserError(f"--graphs: CUDA graphs need a GPU, and this run is on the CPU (--device {self.device})")
        if self.scale not in ("auto", "full"):
            raise UserError(f"--scale {self.scale}: expected auto or full")
        return dev

    def resolved_policy(self, device: str) -> Policy:
        rounds = self.rounds or self.iters or self.policy.rounds or 6
        if rounds < 6:
            raise UserError(f"--rounds {rounds}: at least 6 rounds are needed for a 95% interval")
        return replace(self.policy, rounds=rounds)

    @classmethod
    def quick(cls, **kw) -> VerifyOptions:
        """Every code path, few and short rounds, small CPU shapes: for tests and dry runs."""
        policy = kw.pop(
            "policy",
            Policy(
                rounds=6,
                max_rounds=8,
                budget_s=10.0,
                calibration_phases=3,
                target_phase_ms=3.0,
                max_iters=20,
                samples_per_output=64,
            ),
        )
        base = dict(
            device="cpu", threads=1, timeout=120, cpu_budget_bytes=16 << 20, cpu_budget_flops=2e7, policy=policy
        )
        base.update(kw)
        return cls(**base)
