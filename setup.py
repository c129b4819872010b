"""The one build step pyproject.toml cannot say: the C scanner's key table (headroom/trace/_scan_keys.h)
written from headroom/data/kineto.toml before the extension is compiled (scripts/gen_scan_keys.py).
Everything else about the package is in pyproject.toml."""

import runpy
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

GENERATOR = Path(__file__).resolve().parent / "scripts" / "gen_scan_keys.py"


class BuildExt(build_ext):
    def run(self) -> None:
        if GENERATOR.exists():  # (a source tree without scripts/ compiles the header it ships)
            argv, sys.argv = sys.argv, [str(GENERATOR)]
            try:
                runpy.run_path(str(GENERATOR), run_name="__main__")
            finally:
                sys.argv = argv
        super().run()


setup(cmdclass={"build_ext": BuildExt})
