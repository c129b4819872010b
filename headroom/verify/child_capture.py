"""The child's capture of one call in a CUDA graph (``--graphs``), as production decode runs it.

The model is called once eagerly on a side stream (lazy set-up such as cuBLAS handles and autotuning
cannot be captured), then captured on static copies of the inputs, as a serving loop holds them. The
replay's inputs are copied into those copies before the replay: a graph that baked in what it saw at
capture returns the wrong answer, and the harness's comparison sees it.
"""

from __future__ import annotations

from typing import Any

import torch

from headroom.verify import problem as prob

_type = type


def error_line(e: BaseException) -> str:
    """The first error of a chain, first line, at most 300 characters: a failed capture's own error,
    not the one ending the capture raises after it."""
    seen = {id(e)}
    while e.__context__ is not None and id(e.__context__) not in seen:  # a chain can loop
        e = e.__context__
        seen.add(id(e))
    text = str(e).strip().splitlines()
    return f"{_type(e).__name__}: {text[0]}"[:300] if text else _type(e).__name__


def capture_call(model: Any, xs: list, replay: list, sync: Any) -> tuple[list, str | None]:
    """(the replay's outputs, None) or ([], what capture or replay raised). ``sync``: a device-wide
    synchronise taken before any candidate code ran."""
    if len(xs) != len(replay):
        return [], "harness: capture and replay inputs differ in number"
    static = [x.clone() if _type(x) is torch.Tensor else x for x in xs]
    graph = None
    try:
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                model(*static)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: an unsafe call of this thread (the model's) ends the capture; other threads' do not
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                outs = prob.flatten_outputs(model(*static))
            for s, r in zip(static, replay):
                if _type(s) is torch.Tensor:
                    s.copy_(r)
            graph.replay()
            sync()
            kept = [o.clone() if _type(o) is torch.Tensor else o for o in outs]  # out of the graph's pool
            sync()
    except Exception as e:  # the candidate's failure to capture, reported, not raised
        try:
            sync()
        except Exception:
            pass
        return [], error_line(e)
    finally:
        del graph
    return kept, None
