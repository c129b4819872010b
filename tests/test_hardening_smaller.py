"""Hardening, the smaller class (issue 46): text from traces and paths is never read as rich markup; a GPU trace
that names no device is not given the CPU's roofline; `annotate` never writes `Infinity` (which no JSON reader,
headroom's included, reads back); the rank-set decisions it makes silently are said (world sizes that disagree,
ranks on different devices).

Generated: file and kernel names holding markup tags; numbers beyond a double in a trace's args; the world
size and device name of each of two rank traces."""

from __future__ import annotations

import json
import shutil

from hardening_support import SMALL, document, one_error_line, run, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ranks_synthetic import rank_trace

FAST = settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
TAG = st.sampled_from(["bold", "red", "rich", "link=x", "/", "green", "i", "blink"]).map(lambda t: f"[{t}]")


@FAST
@given(
    tag=TAG.filter(lambda t: "/" not in t),
    stem=st.from_regex(r"[a-z]{1,6}", fullmatch=True),
    command=st.sampled_from([["classify"], ["targets"], ["project", "-s", "category:embedding=2"]]),
)
def test_markup_in_a_path_prints_as_it_is(tmp_path_factory, tag, stem, command):
    path = tmp_path_factory.mktemp("m") / f"{tag}{stem}.json.gz"
    shutil.copy(SMALL, path)
    code, out, err = run(*command, path)
    assert code == 0, err
    assert str(path) in out


@FAST
@given(tag=TAG)
def test_markup_in_a_kernel_name_prints_as_it_is(tmp_path_factory, tag):
    doc = document()
    name = f"{tag}weird_kernel{tag}"
    for e in doc["traceEvents"]:
        if isinstance(e, dict) and e.get("cat") == "kernel":
            e["name"] = name
    path = write(doc, tmp_path_factory.mktemp("k") / "t.json")
    code, out, err = run("diff", "--by", "kernel", path, path)  # kernel names in a table's cells
    assert code == 0, err
    assert name in out


@FAST
@given(drop=st.sampled_from(["name", "all"]))
def test_a_gpu_trace_without_a_device_name_gets_no_cpu_roofline(tmp_path_factory, drop):
    doc = document()
    if drop == "all":
        del doc["deviceProperties"]
        doc.get("headroom", {}).pop("gpu", None)
    else:
        doc["deviceProperties"] = [{k: v for k, v in p.items() if k != "name"} for p in doc["deviceProperties"]]
        doc.get("headroom", {}).pop("gpu", None)
    path = write(doc, tmp_path_factory.mktemp("d") / "t.json")
    code, _, err = run("targets", "--roofline", path)
    assert code == 2 and one_error_line(err) and "--peaks" in err
    assert run("targets", "--roofline", "--peaks", "h200", path)[0] == 0


@FAST
@given(value=st.sampled_from(["1e999", "-1e999", "1e400", "-2e308"]))
def test_annotate_writes_what_it_reads(tmp_path_factory, value):
    d = tmp_path_factory.mktemp("a")
    text = json.dumps(document())
    i = text.index('"args": {', text.index('"cat": "kernel"')) + len('"args": {')
    src = d / "t.json"
    src.write_text(text[:i] + f'"weird": {value}, ' + text[i:])
    code, _, err = run("annotate", src, "-o", d / "out.json")
    assert code == 0, err
    json.loads((d / "out.json").read_text(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert run("classify", d / "out.json")[0] == 0


@FAST
@given(
    worlds=st.tuples(st.integers(2, 8), st.integers(2, 8)),
    names=st.tuples(st.sampled_from(["NVIDIA H100", "NVIDIA H200"]), st.sampled_from(["NVIDIA H100", "NVIDIA H200"])),
)
def test_rank_set_decisions_are_said(tmp_path_factory, worlds, names):
    d = tmp_path_factory.mktemp("r")
    for rank in (0, 1):
        rank_trace(rank).write(
            d / f"rank-{rank}.json.gz",
            distributedInfo={"backend": "nccl", "rank": rank, "world_size": worlds[rank]},
            deviceProperties=[{"id": 0, "name": names[rank]}],
        )
    code, out, err = run("classify", d)
    assert code == 0, err
    if worlds[0] != worlds[1]:
        assert "world sizes" in err
    elif names[0] != names[1]:
        assert "kinds of device" in err
