"""`python -m agent` is the same as the `gua-agent` console script."""

from agent.cli import main

raise SystemExit(main())
