"""What a run is called (headroom/trace/analysis_terms.py)."""

from headroom.trace.analysis_terms import label_batches, run_label, run_model


def test_runs_of_one_model_at_several_batch_sizes_say_their_batch():
    rows = [
        {"workload": "llama-7b infer decode", "batch": 1},
        {"workload": "llama-7b infer decode", "batch": 32},
        {"workload": "bert-base infer", "batch": 8},
        {"workload": "a trace", "batch": ""},
        {"workload": "another", "batch": 4},
    ]
    labelled = label_batches(rows, ["llama-7b", "llama-7b", "bert-base", "", ""])
    assert [r["workload"] for r in labelled] == [
        "llama-7b infer decode bs1",
        "llama-7b infer decode bs32",
        "bert-base infer",
        "a trace",
        "another",
    ]
    assert rows[0]["workload"] == "llama-7b infer decode"  # new rows: the summaries' own are unchanged


def test_a_run_is_called_by_its_manifest_else_by_its_file():
    m = {
        "workload": "llama-7b",
        "flavour": "13b",
        "variant": "infer decode 4of40-layers",
        "layers": 4,
        "total_layers": 40,
    }
    assert run_label(m, "x.json") == "llama-13b infer decode (4 of 40 layers)"
    assert run_label(m, "x.json", extrapolated=True) == "llama-13b infer decode (4 of 40 layers, extrapolated)"
    assert run_label({}, "runs/rank0.pt.trace.json.gz") == "rank0"
    assert run_label({}, "runs/rank0.json") == "rank0"


def test_a_run_without_a_workload_names_no_model():
    assert run_model({"workload": "llama-7b", "flavour": "13b"}) == "llama-13b"
    assert run_model({"batch": 8}) == ""
