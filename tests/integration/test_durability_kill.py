#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""test_durability.py's Kill tests (SIGKILLs under load, in checkpoints and in the journal's
replay; SIGTERMs in checkpoints), described there: a program of their own, the longest of the
integration tests, so that make -j runs them beside the rest of test_durability.py.

Run one test:  tests/integration/test_durability_kill.py Kill.test_kill_sync_always
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_durability import Kill  # noqa: E402,F401  (harness.run_by: run here)

if __name__ == "__main__":
    harness.main()
