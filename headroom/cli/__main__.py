"""`python -m headroom.cli` runs the `headroom` command."""

from headroom.cli import main

main()
