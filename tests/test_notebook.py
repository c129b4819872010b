"""notebooks/headroom.ipynb runs top to bottom (so it never rots) and draws its figures."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "headroom.ipynb"


@pytest.mark.slow  # a whole notebook run (~10 s): `make test-slow`
def test_notebook_executes():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()  # raises CellExecutionError on any failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    if text.startswith("0 trace(s)"):
        pytest.skip("no traces: neither traces/ nor ../shared/hta-traces is present")
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 2, "figures (a) and (b) should be drawn"
    tables = [o for o in outputs if "text/html" in o.get("data", {})]
    assert len(tables) >= 3  # summary, projections, targets
    assert not [o for o in outputs if o.output_type == "error"]
