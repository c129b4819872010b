"""The typed message protocol between the harness and a child process.

Every message is a msgspec struct, encoded as msgpack; the ``type`` tag picks
the struct. The harness sends a *command* and waits for exactly one *reply* of
the matching type with the same ``seq`` (``EXPECTED_REPLY``); anything else —
a message the harness did not ask for, a reply out of order, a malformed frame
— ends the run as tampering (verdict ``fail``). Nothing a child sends is
unpickled: decoding a reply builds plain structs and never runs code.

Tensors never travel inside messages. Inputs live in a harness-owned shared
*ring* (a ``/dev/shm`` file on a CPU, a CUDA allocation shared by IPC on a
GPU) and commands name views of it (``RingTensor``). Outputs stay in the
child: a reply names where they are (``AddrTensor``: an address the harness
reads through ``/proc/<pid>/mem``; ``IpcTensor``: a CUDA IPC handle), so the
harness reads the child's memory itself instead of trusting bytes the child
chooses to send.
"""

from __future__ import annotations

import msgspec

MAX_MESSAGE_BYTES = 64 << 20


class _Msg(msgspec.Struct, tag_field="type", forbid_unknown_fields=True, frozen=True):
    pass


# --- tensors ---------------------------------------------------------------------------------


class RingTensor(msgspec.Struct, frozen=True, tag="ring"):
    """A view of the harness's shared input ring: ``offset`` in bytes, strides in elements."""

    offset: int
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]


class Scalar(msgspec.Struct, frozen=True, tag="scalar"):
    """A non-tensor input (a Python number, bool or None), passed by value."""

    value: int | float | bool | None


class AddrTensor(msgspec.Struct, frozen=True, tag="addr"):
    """A CPU tensor in the child: the address of element 0 in the child's memory."""

    addr: int
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]


class IpcTensor(msgspec.Struct, frozen=True, tag="ipc"):
    """A CUDA tensor in the child, by CUDA IPC handle (what ``torch.multiprocessing`` sends)."""

    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int  # elements, within the storage
    device: int
    handle: bytes
    storage_size: int
    storage_offset: int  # bytes, of the storage within the IPC allocation
    ref_counter_handle: bytes
    ref_counter_offset: int
    event_handle: bytes | None
    event_sync_required: bool


class SegTensor(msgspec.Struct, frozen=True, tag="seg"):
    """A CUDA tensor in the child, in one of its allocations shared once (``gate.Segments``):
    ``offset`` in bytes from the allocation's start to element 0, strides in elements."""

    segment: int
    offset: int
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]


class Segment(msgspec.Struct, frozen=True):
    """One CUDA allocation of the child, by IPC handle: ``id`` is the driver's buffer id."""

    id: int
    handle: bytes
    size: int


class Opaque(msgspec.Struct, frozen=True, tag="opaque"):
    """An output that is not a plain ``torch.Tensor`` (a subclass, a lazy tensor, a Python object)."""

    type_name: str


class BytesTensor(msgspec.Struct, frozen=True, tag="bytes"):
    """A correctness-trial output copied through the pipe (only when CUDA IPC is unavailable)."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes


Arg = RingTensor | Scalar
Out = AddrTensor | IpcTensor | SegTensor | BytesTensor | Opaque


# --- the job (how a child starts) -----------------------------------------------------------------


class RingSpec(msgspec.Struct, frozen=True):
    """Where the shared input ring is: a sealed memfd sent by descriptor (CPU) or the CUDA IPC handle of
    the harness's raw allocation (``cuda_ipc``: not torch's refcounted sharing)."""

    nbytes: int
    path: str | None = None
    cuda_handle: bytes | None = None
    memfd: bool = False  # CPU: a sealed memfd, its descriptor sent over the command pipe after MapRing


class Job(msgspec.Struct, frozen=True):
    role: str  # reference | candidate | build (import the candidate, compiling its extensions, then wait)
    problem: str
    overrides: dict[str, int | list[int]]  # problem-module globals replaced for a scaled run
    candidate: str | None
    device: str
    env: dict[str, str]
    threads: int | None
    log_path: str
    file_cap_bytes: int  # RLIMIT_FSIZE of the child and everything it starts
    init_seed: int
    clock_path: str | None = None  # the page of host memory of the gated GPU clock (``gate``)
    clock_slot: int = 0


# --- commands (harness -> child) -----------------------------------------------------------------


class MapRing(_Msg, tag="map_ring"):  # type: ignore[misc]
    seq: int
    ring: RingSpec


class Memory(_Msg, tag="memory"):  # type: ignore[misc]
    """Peak memory of one forward (after a warm-up forward on the same inputs)."""

    seq: int
    args: list[Arg]


class Launches(_Msg, tag="launches"):  # type: ignore[misc]
    """Kernels (GPU) or aten ops (CPU) launched by one forward."""

    seq: int
    args: list[Arg]


class Trial(_Msg, tag="trial"):  # type: ignore[misc]
    """One correctness trial: one forward, called as a timed phase calls it (the same global state).

    Outputs are kept until the next Trial, Run or Release (the harness reads them in between).
    """

    seq: int
    index: int
    args: list[Arg]


class Run(_Msg, tag="run"):  # type: ignore[misc]
    """One timed phase: a forward per input set (outputs kept, like Trial's). ``null``: no forward (calibration).

    ``token`` > 0 (GPU): the phase is gated (``gate``): the child enqueues a wait for ``token`` in the
    gate word, the forwards, and a write of ``token`` to its flag word, and replies without waiting
    for the GPU. ``token`` = 0: the child runs the forwards, synchronises and replies."""

    seq: int
    batches: list[list[Arg]]
    tf32: bool = True
    compiled: bool = False
    null: bool = False
    token: int = 0


class Compile(_Msg, tag="compile"):  # type: ignore[misc]
    seq: int
    args: list[Arg]


class Capture(_Msg, tag="capture"):  # type: ignore[misc]
    """One call captured in a CUDA graph (``--graphs``): warm up on ``args``, capture a call on static copies
    of them, copy ``replay`` into those copies, replay, synchronise. Outputs are kept, like Trial's."""

    seq: int
    args: list[Arg]
    replay: list[Arg]


class Release(_Msg, tag="release"):  # type: ignore[misc]
    seq: int


class Bye(_Msg, tag="bye"):  # type: ignore[misc]
    seq: int


Command = MapRing | Memory | Launches | Trial | Run | Compile | Capture | Release | Bye


# --- replies (child -> harness) -----------------------------------------------------------------


class Ready(_Msg, tag="ready"):  # type: ignore[misc]
    seq: int
    device_name: str
    torch: str
    precision: dict[str, str | bool]
    violations: list[str]
    gated: bool = False  # the child registered the clock page (gated GPU phases possible)
    clock_error: str | None = None


class Done(_Msg, tag="done"):  # type: ignore[misc]
    """Acknowledges MapRing, Release, Compile and Bye."""

    seq: int
    violations: list[str]
    error: str | None = None


class MemoryDone(_Msg, tag="memory_done"):  # type: ignore[misc]
    seq: int
    peak_bytes: int
    method: str
    violations: list[str]
    free_bytes: int | None = None  # GPU: device memory free as the child's first forward started


class LaunchesDone(_Msg, tag="launches_done"):  # type: ignore[misc]
    """What one forward does, from a profile of a few (evidence: the candidate's child could lie)."""

    seq: int
    count: int | None
    method: str
    violations: list[str]
    kernel_us: float | None = None  # summed kernel durations per forward (the profiler's clock)
    syncs: float | None = None  # host synchronisations per forward
    d2h_bytes: float | None = None  # bytes copied device -> host per forward
    top_kernels: list[tuple[str, float | None, float]] = []  # launches.CallProfile.top_kernels


class TrialDone(_Msg, tag="trial_done"):  # type: ignore[misc]
    """``unordered_ms`` (GPU): how long a device-wide synchronise still waited after the caller's
    stream was done — work left on a side stream, not ordered with the caller's (evidence only)."""

    seq: int
    outputs: list[Out]
    violations: list[str]
    unordered_ms: float = 0.0


class CaptureDone(_Msg, tag="capture_done"):  # type: ignore[misc]
    """The replay's outputs (none when ``error``), and what capture or replay raised (its first line)."""

    seq: int
    outputs: list[Out]
    violations: list[str]
    error: str | None = None


class RunDone(_Msg, tag="run_done"):  # type: ignore[misc]
    """Outputs of every iteration (where they are) and the child's own clock, a cross-check only.

    ``segments``: allocations first used by these outputs (shared once). In a gated phase the
    child's clock (CUDA events around the forwards) is that of the child's previous gated phase:
    the GPU has not run this one yet when the child replies."""

    seq: int
    outputs: list[list[Out]]
    child_ms: list[float]
    violations: list[str]
    segments: list[Segment] = []


class Failed(_Msg, tag="failed"):  # type: ignore[misc]
    """The child's code raised (or the candidate called sys.exit); ``kind``: candidate | harness."""

    seq: int
    stage: str
    kind: str
    message: str
    traceback: str = ""


Reply = Ready | Done | MemoryDone | LaunchesDone | TrialDone | CaptureDone | RunDone | Failed

EXPECTED_REPLY: dict[type, type] = {
    MapRing: Done,
    Memory: MemoryDone,
    Launches: LaunchesDone,
    Trial: TrialDone,
    Run: RunDone,
    Compile: Done,
    Capture: CaptureDone,
    Release: Done,
    Bye: Done,
}

_ENC = msgspec.msgpack.Encoder()
_DEC_REPLY = msgspec.msgpack.Decoder(Reply)
_DEC_COMMAND = msgspec.msgpack.Decoder(Command)
_DEC_JOB = msgspec.msgpack.Decoder(Job)


def encode(msg: msgspec.Struct) -> bytes:
    return _ENC.encode(msg)


def decode_reply(raw: bytes) -> Reply:
    """A reply from a child; raises ``msgspec.DecodeError`` / ``ValidationError`` on anything malformed."""
    return _DEC_REPLY.decode(raw)


def decode_command(raw: bytes) -> Command:
    return _DEC_COMMAND.decode(raw)


def decode_job(raw: bytes) -> Job:
    return _DEC_JOB.decode(raw)
