"""Rewrites the child's own protocol code and integrity evidence to compute outside the clock.

At import it patches, in its own process, what the harness's child-side code calls by module
attribute: ``integrity.violations`` (the in-child snapshot then reports nothing replaced),
``protocol.decode_command`` (it sees every command) and ``protocol.encode`` (it rewrites replies).

- A null phase's reply gets the outputs of the last timed phase: a harness that took "the child
  holds outputs" from the reply would send an untimed ``Release`` before the next phase.
- At every ``Release`` it runs the forward on what the ring holds at the last timed phase's input
  views. In a round that times the reference first the ring already holds this round's inputs
  (written for the reference), so the candidate's timed phase finds its answers cached: a speedup
  in one round order only, and none at all unless the harness thaws it while the ring holds inputs
  it has not been timed on.

Expected: ``fail`` (``protocol``: a null phase answered with outputs is a forged reply); with the
forgery ignored the harness releases the candidate only after its own phase, and the cache never
hits.
"""

import sys

import torch
import torch.nn as nn

P = sys.modules["headroom.verify.protocol"]
ring_module = sys.modules["headroom.verify.ring"]
integrity = sys.modules["headroom.verify.integrity"]

integrity.violations = lambda snap: []  # the evidence is in our own process: it says what we like

_state: dict = {"ring": None, "run": None, "null": False, "outputs": None, "model": None}
_cache: dict = {}
_map_ring, _decode, _encode = ring_module.map_ring, P.decode_command, P.encode


def _fingerprint(x: torch.Tensor) -> tuple:
    flat = x.reshape(-1)
    step = max(1, flat.numel() // 64)
    return (x.data_ptr(), tuple(flat[::step][:64].tolist()))


def _precompute() -> None:
    run, ring, model = _state["run"], _state["ring"], _state["model"]
    if run is None or ring is None or model is None:
        return
    _cache.clear()
    with torch.no_grad():
        for batch in run.batches:
            xs = [ring_module.view(ring, a) for a in batch if isinstance(a, P.RingTensor)]
            if len(xs) == 1:
                _cache[_fingerprint(xs[0])] = model.compute(xs[0])


def _map(spec, device, *rest):
    _state["ring"] = _map_ring(spec, device, *rest)
    return _state["ring"]


def _decode_command(raw):
    cmd = _decode(raw)
    if isinstance(cmd, P.Release):
        _precompute()
    elif isinstance(cmd, P.Run):
        _state["null"] = cmd.null
        if not cmd.null:
            _state["run"] = cmd
    return cmd


def _encode_reply(msg):
    if isinstance(msg, P.RunDone):
        if _state["null"] and _state["outputs"]:
            msg = P.RunDone(
                seq=msg.seq,
                outputs=_state["outputs"][: len(msg.outputs)],
                child_ms=msg.child_ms,
                violations=[],
                segments=[],
            )
        elif not _state["null"]:
            _state["outputs"] = msg.outputs
    return _encode(msg)


ring_module.map_ring = _map
P.decode_command = _decode_command
P.encode = _encode_reply


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        _state["model"] = self

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hit = _cache.pop(_fingerprint(x), None) if _cache else None
        return hit if hit is not None else self.compute(x)
