"""`python -m profiler.cli …`: the kvprof command, as the `kvprof` console script runs it."""

import sys

from profiler.cli import main

sys.exit(main())
