"""The a-priori estimate's interval checked on the committed rows, and refitted:

    python -m headroom.report.calibration docs/gpu/apriori            # the checks (rows left out)
    python -m headroom.report.calibration docs/gpu/apriori --write    # and headroom/data/interval.toml refitted
    python -m headroom.report.calibration docs/gpu/apriori --check docs/gpu/apriori-graphs   # and rows it did not see

The calibration is headroom.projection.calibration; the rows are headroom.report.apriori's.
"""

from __future__ import annotations

import sys
from pathlib import Path

from headroom.projection.calibration import toml_text
from headroom.report.apriori import calibration_report


def main(argv: list[str]) -> int:
    usage = "usage: python -m headroom.report.calibration DIR [--check DIR ...] [--write]"
    checked = [Path(a) for k, a in zip(argv, argv[1:]) if k == "--check"]
    if not argv or not Path(argv[0]).is_dir() or not all(d.is_dir() for d in checked):
        print(usage, file=sys.stderr)
        return 2
    text, cal = calibration_report(Path(argv[0]), checked)
    print(text)
    if "--write" in argv[1:]:
        import headroom.projection.calibration as calibration

        (Path(calibration.__file__).resolve().parents[1] / "data" / "interval.toml").write_text(toml_text(cal))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
