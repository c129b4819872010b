"""Hardening, class "tracebacks" (issue 46): a manifest that is not an object (or holds keys of any
type), `annotate` of a trace without GPU activity, running out of memory and a `launches=` without an
upper bound each end in one line and exit 2 (or a result), never a traceback.

Generated: manifests of arbitrary JSON; launches beyond the bound; traces without GPU activity."""

from __future__ import annotations

from hardening_support import HTA, SMALL, document, one_error_line, run, write
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
KEYS = (
    "workload",
    "variant",
    "flavour",
    "timing",
    "gpu",
    "layers",
    "total_layers",
    "dtype",
    "tf32",
    "info",
    "distributed",
    "family",
    "batch",
)
MANIFESTS = JSON.filter(lambda v: bool(v) and not isinstance(v, dict)) | st.dictionaries(
    st.sampled_from(KEYS), JSON | st.fixed_dictionaries({"step_ms": JSON, "overhead": JSON, "timed": JSON}), max_size=5
)
COMMANDS = (
    ["classify"],
    ["classify", "--json"],
    ["report"],
    ["report", "--json"],
    ["project", "-s", "category:embedding=2"],
    ["targets"],
    ["diff", str(SMALL)],
)
FAST = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


@FAST
@given(manifest=MANIFESTS, command=st.sampled_from(COMMANDS))
@example(manifest=[1, 2], command=["classify"])
def test_a_manifest_of_any_shape_is_read_or_refused_in_one_line(tmp_path_factory, manifest, command):
    doc = document()
    doc["headroom"] = manifest
    path = write(doc, tmp_path_factory.mktemp("m") / "t.json")
    code, out, err = run(*command, path, "--no-cache") if command[0] != "diff" else run(*command, path)
    assert code in (0, 2), err
    assert "Traceback" not in err
    if code == 2:
        assert one_error_line(err)


@FAST
@given(n=st.integers(min_value=10_001, max_value=10**40) | st.sampled_from(["1e30", "inf", "nan", "-1", "2.5"]))
def test_launches_has_a_range(n):
    code, _, err = run("project", SMALL, "-s", f"category:embedding=2,launches={n}")
    assert code == 2 and one_error_line(err) and "launches" in err


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(keep=st.sets(st.sampled_from(["cpu_op", "user_annotation", "python_function", "cuda_runtime"]), min_size=1))
def test_annotate_without_gpu_activity_is_one_line(tmp_path_factory, keep):
    doc = document()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") in keep]
    d = tmp_path_factory.mktemp("a")
    path = write(doc, d / "t.json")
    code, _, err = run("annotate", path, "-o", d / "out.json")
    assert code == 2 and one_error_line(err), err
    assert not (d / "out.json").exists()


def test_annotate_of_htas_cpu_only_trace(tmp_path):
    code, _, err = run(
        "annotate", HTA / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "-o", tmp_path / "o.json"
    )
    assert code == 2 and one_error_line(err) and "no GPU activity" in err


def test_out_of_memory_is_one_line(monkeypatch):
    import headroom.trace.analysis as analysis

    def oom(*a, **k):
        raise MemoryError

    monkeypatch.setattr(analysis, "analyze", oom)
    code, _, err = run("classify", SMALL)
    assert code == 2 and one_error_line(err) and "memory" in err
